"""GET /v1/runs/{id}/export?format=NAME reaches every registered format, a plugin's too, with the suffix and
media type the exporter declares; an unknown name is a 404 listing the available ones."""
from __future__ import annotations

import pytest

from contracts import Exporter, ExportReport, hookimpl
from tests.registered import plugin_registered


class Shout:
    """A throwaway plugin whose format writes each document's id in capitals."""

    @staticmethod
    def write(runs, path):
        ids = [d.id.upper() for run in runs for d, _ in run.items]
        path.write_text("\n".join(ids), encoding="utf-8")
        return ExportReport(documents=len(ids))

    @staticmethod
    @hookimpl
    def register_exporters(register):
        register(Exporter("shout", ".shout.txt", Shout.write, "Ids in capitals", "text/x-shout"))


@pytest.fixture
def shout():
    with plugin_registered(Shout, "shout-plugin"):
        yield


def test_a_plugin_s_format_is_served_with_its_suffix_and_media_type(client, shout):
    run_id = client.post("/v1/extract", json={"model": "rexuninlu", "documents": [
        {"id": "a", "text": "杭州", "schema": {"城市": None}}, {"id": "b", "text": "北京", "schema": {"城市": None}}]}
    ).json()["run_id"]
    got = client.get(f"/v1/runs/{run_id}/export", params={"format": "shout"})
    assert got.status_code == 200, got.text
    assert got.content == b"A\nB" and got.headers["content-type"].startswith("text/x-shout")
    assert got.headers["content-disposition"] == f'attachment; filename="runs-{run_id}.shout.txt"'


def test_an_unknown_format_is_a_404_listing_the_available_ones(client, shout):
    run_id = client.post("/v1/extract", json={"model": "rexuninlu", "documents": [
        {"id": "a", "text": "杭州", "schema": {"城市": None}}]}).json()["run_id"]
    got = client.get(f"/v1/runs/{run_id}/export", params={"format": "pdf"})
    assert got.status_code == 404 and got.json()["error"]["code"] == "unknown_format"
    message = got.json()["error"]["message"]
    assert message.startswith("unknown export format 'pdf'; available: jsonl, csv, excel") and "shout" in message
    assert client.get("/v1/runs/999/export", params={"format": "shout"}).status_code == 404
