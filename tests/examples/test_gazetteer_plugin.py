"""The gazetteer as an installed plugin: found through its entry point, run from the CLI, the UI, batch jobs
and the API, recorded in the history and exported like any run; a model that needs no weights."""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from contracts import DEMO_NOTICE
from contracts.testing import Workstation
from tests.examples.conftest import DISTRIBUTION, ROOT

LINES = [
    {"id": "zh", "text": "😀 2024年3月5日，阿里巴巴在杭州发布，电话138-1234-5678。",
     "schema": {"日期": None, "组织机构": None, "城市": None, "电话": None}},
    {"id": "en", "text": "On March 5, 2024 NATO met in Paris; write to press@nato.int.",
     "schema": {"date": None, "Organization": None, "city": None, "email": None}},
    {"id": "id", "text": "身份证号11010519491231002X，IP 10.0.0.1", "schema": {"身份证号": None, "IP地址": None}},
]
OUTPUT = [
    {"id": "zh", "output": [[{"type": "日期", "span": "2024年3月5日", "offset": [2, 11]}],
                            [{"type": "组织机构", "span": "阿里巴巴", "offset": [12, 16]}],
                            [{"type": "城市", "span": "杭州", "offset": [17, 19]}],
                            [{"type": "电话", "span": "138-1234-5678", "offset": [24, 37]}]], "coverage": [[0, 38]]},
    {"id": "en", "output": [[{"type": "date", "span": "March 5, 2024", "offset": [3, 16]}],
                            [{"type": "Organization", "span": "NATO", "offset": [17, 21]}],
                            [{"type": "city", "span": "Paris", "offset": [29, 34]}],
                            [{"type": "email", "span": "press@nato.int", "offset": [45, 59]}]], "coverage": [[0, 60]]},
    {"id": "id", "output": [[{"type": "身份证号", "span": "11010519491231002X", "offset": [4, 22]}],
                            [{"type": "IP地址", "span": "10.0.0.1", "offset": [26, 34]}]], "coverage": [[0, 34]]},
]


def write_settings(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(f"""
[storage]
database = "{tmp_path / 'data' / 'runs.db'}"
demo_weights_dir = "{tmp_path / 'demo-weights'}"
demo_size = "tiny"

[optimizations]
# Defaults written for other models: they do not apply to the gazetteer, which runs without them.
enabled = ["sparse-mask", "precision"]
{extra}
""", encoding="utf-8")
    return path


def write_jsonl(path: Path, lines) -> Path:
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


# Defaults written for other models: they do not apply to the gazetteer, which runs without them.
OTHER_MODELS_DEFAULTS = '[optimizations]\nenabled = ["sparse-mask", "precision"]\n'


# ---- through the entry point, in processes of their own (contracts.testing.Workstation) --------------------------

def test_extract_runs_the_installed_plugin_and_records_the_run_that_exporters_then_write(tmp_path,
                                                                                         gazetteer_plugin):
    workstation = Workstation(tmp_path, plugins=DISTRIBUTION, settings=OTHER_MODELS_DEFAULTS)
    assert workstation.extract("gazetteer", LINES) == OUTPUT
    assert "demo" not in workstation.last.stderr.lower() and "3 documents" in workstation.last.stderr
    assert [(d.text, r.to_json()) for d, r in workstation.read_run()] == [(line["text"], out)
                                                                         for line, out in zip(LINES, OUTPUT)]
    with zipfile.ZipFile(workstation.export("gazetteer", suffix=".zip")) as archive:
        assert "日期.txt" in archive.namelist() and "Organization.txt" in archive.namelist()
        assert archive.read("日期.txt").decode().splitlines()[1:] == ["2024年3月5日"]
    listed = [json.loads(row) for row in workstation.command("plugins", "--json").stdout.splitlines()]
    exporters = [name for row in listed for name in row["registered"].get("exporters", [])]
    assert {"jsonl", "csv", "excel", "parquet", "label-studio", "doccano", "gazetteer"} <= set(exporters)

    from storage import open_store
    from workstation.exports import export_runs
    store = open_store(tmp_path / "runs.db")
    try:
        [summary] = store.search_runs()
        assert (summary.model, summary.source, summary.documents, summary.demo, summary.device, summary.attention,
                summary.optimizations) == ("gazetteer", "cli", 3, False, "cpu", "none", {})
        assert summary.weights == str(tmp_path / "models" / "gazetteer")     # its folder: none there
        assert store.search_runs("阿里巴巴")[0].id == summary.id
        spans = sum(len(line["output"]) for line in OUTPUT)
        for name in exporters:                      # gazetteer_plugin registered it in this process too
            report = export_runs(store, [summary.id], name, tmp_path / f"run-{name}")
            assert (report.documents, report.invalid, report.skipped) == (3, 0, 0), name
            assert report.spans == spans and report.path.stat().st_size > 0, name
    finally:
        store.close()


def test_the_plugin_table_shows_it_installed_and_only_a_named_distribution_loads(tmp_path):
    def listed(workstation):
        return {row["name"]: row for row in map(json.loads, workstation.command("plugins", "--json").stdout.splitlines())}
    named = listed(Workstation(tmp_path / "named", plugins=DISTRIBUTION))
    assert named["gazetteer"] == {"name": "gazetteer", "version": "0.1.0", "source": f"installed ({DISTRIBUTION})",
                                  "hooks": ["register_exporters", "register_models"], "distribution": DISTRIBUTION,
                                  "registered": {"models": ["gazetteer"], "exporters": ["gazetteer"]}}
    unnamed = listed(Workstation(tmp_path / "unnamed"))
    assert "gazetteer" not in unnamed and {r["source"] for r in unnamed.values()} == {"built-in"}


# ---- the host's handling of a model that needs no weights (in this process) -------------------------------------

@pytest.fixture
def settings_file(tmp_path, monkeypatch):
    from workstation import settings
    path = write_settings(tmp_path, '[models.gazetteer]\ndevice = "cpu"\nbatch_size = 4\n')
    monkeypatch.setattr(settings, "DEFAULT_PATH", path)
    return path


def test_a_dictionary_folder_is_its_weights_and_a_missing_one_is_an_error(tmp_path, gazetteer_plugin,
                                                                            settings_file, capsys):
    from workstation.cli import main
    folder = tmp_path / "dictionaries"
    folder.mkdir()
    (folder / "产品.txt").write_text("星火一号\n", "utf-8")
    source = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "星火一号在杭州", "schema": {"产品": None, "城市": None}}])
    out = tmp_path / "out.jsonl"
    args = ["extract", "--model", "gazetteer", "--input", str(source), "--output", str(out), "--no-record"]
    assert main(args + ["--weights", str(folder)]) == 0
    assert json.loads(out.read_text("utf-8"))["output"] == [[{"type": "产品", "span": "星火一号", "offset": [0, 4]}],
                                                            [{"type": "城市", "span": "杭州", "offset": [5, 7]}]]
    out.unlink()
    assert main(args + ["--weights", str(tmp_path / "dictionarys")]) == 1       # a typo, not "no dictionaries"
    assert "dictionarys does not exist" in capsys.readouterr().err and not out.exists()
    assert main(args) == 2                  # without them 产品 is no type: the error names the known ones
    assert "unknown type(s) '产品'" in capsys.readouterr().err
    assert main(args + ["--optimizations", "sparse-mask"]) == 2      # asked for by name: it must apply
    assert "optimization 'sparse-mask' does not apply to gazetteer" in capsys.readouterr().err


def test_model_options_are_given_on_the_command_line_typed_like_their_defaults(tmp_path, gazetteer_plugin,
                                                                                settings_file, capsys):
    from workstation.cli import main
    source = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "the nato summit", "schema": {"组织机构": None}}])
    out = tmp_path / "out.jsonl"
    args = ["extract", "--model", "gazetteer", "--input", str(source), "--output", str(out), "--no-record"]
    assert main(args) == 0 and json.loads(out.read_text("utf-8"))["output"] == []
    assert main(args + ["--option", "ignore_case=true"]) == 0
    assert json.loads(out.read_text("utf-8"))["output"] == [[{"type": "组织机构", "span": "nato", "offset": [4, 8]}]]
    assert main(args + ["--option", "ignore_case=maybe"]) == 2
    assert "--option ignore_case: 'maybe' is not a bool" in capsys.readouterr().err
    assert main(args + ["--option", "num_beams=2"]) == 2
    assert "gazetteer takes ignore_case=False, builtin_dictionaries=True" in capsys.readouterr().err


def test_no_demo_weights_are_written_or_announced_for_it(tmp_path, gazetteer_plugin, settings_file, capsys):
    from workstation.cli import ensure_demo_weights, main
    from workstation.settings import load_settings
    s = load_settings()
    assert s.weights_for("gazetteer", needs_weights=False) == (tmp_path / "data" / "models" / "gazetteer", False)
    ensure_demo_weights(s)
    assert "gazetteer" not in capsys.readouterr().err and not (tmp_path / "demo-weights" / "gazetteer-tiny").exists()
    assert main(["demo-weights", "--model", "gazetteer", "--out", str(tmp_path / "demo")]) == 0
    assert capsys.readouterr().out == "gazetteer: no demo weights (it runs without weights)\n"


def test_a_model_that_needs_weights_and_has_no_demo_weights_says_what_to_do(tmp_path, settings_file, capsys):
    from contracts import WeightsError, hookimpl
    from tests.workstation.ui.fake_plugin import FakeFamily
    from workstation import engine, plugins
    from workstation.cli import ensure_demo_weights
    from workstation.settings import load_settings

    class NoDemo(FakeFamily):
        name = "nodemo"

        def write_demo_weights(self, out_dir, size="full"):
            return None

    class Plugin:
        @staticmethod
        @hookimpl
        def register_models(register):
            register(NoDemo())
    plugins.load_plugins()
    plugins.pm.register(Plugin, name="nodemo-plugin")
    try:
        ensure_demo_weights(load_settings())
        assert "nodemo offers no demo weights; nodemo has no weights" in capsys.readouterr().err
        with pytest.raises(WeightsError, match=r"does not exist\. Set \[models.nodemo\] weights in settings.toml"):
            engine.load_model("nodemo", load_settings().weights_for("nodemo")[0], "cpu")
    finally:
        plugins.pm.unregister(name="nodemo-plugin")


# ---- the UI, batch jobs and the API -----------------------------------------------------------------------------

@pytest.fixture
def app(tmp_path, gazetteer_plugin, settings_file, monkeypatch):
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from tests.fake_monitor import FakeMonitor
    from workstation.ui import state
    monkeypatch.setattr(state, "monitor_factory", lambda: FakeMonitor.steady(gpus=0, pid=os.getpid()))
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "workstation" / "ui" / "app.py"), default_timeout=60)
    at.session_state["model"] = "gazetteer"
    at.session_state["device"] = "cpu"
    yield at
    st.cache_resource.clear()


def test_the_extract_page_lists_and_runs_it_without_a_demo_banner(app):
    from workstation.ui import state
    at = app.run()
    assert not at.exception
    assert "gazetteer" in at.selectbox(key="model").options
    assert not any(DEMO_NOTICE in w.value for w in at.warning) and not at.warning
    assert any("Weights: none needed" in c.value for c in at.sidebar.caption)
    assert json.loads(at.text_area(key="schema:gazetteer").value) == {"国家": None, "省份": None, "城市": None,
                                                                       "组织机构": None}
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and not at.error
    drawn = "".join(h.value for h in at.get("html"))
    assert ">巴塞罗那</mark>" in drawn and ">北大西洋议会</mark>" in drawn
    detail = state.store().get_run(at.session_state["extract_run_id"])
    assert (detail.summary.model, detail.summary.source, detail.summary.demo) == ("gazetteer", "ui", False)
    assert [s.span for t in detail.items[0][1].tuples for s in t] == [
        "北大西洋议会", "西班牙", "巴塞罗那", "阿里巴巴", "浙江省", "杭州市", "腾讯", "深圳"]


def test_the_optimizations_page_says_none_applies(app):
    at = app.run().switch_page("screens/optimizations.py").run()
    assert not at.exception and not at.error
    from workstation import plugins
    for name in plugins.optimizations():
        assert at.toggle(key=f"opt:{name}").disabled
    assert sum("does not apply" in c.value for c in at.caption) == len(plugins.optimizations())


def test_a_batch_job_runs_it_and_records_a_batch_run(app):
    import time

    from workstation.ui import state
    at = app.run().switch_page("screens/batch.py").run()
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in LINES).encode()
    at.file_uploader(key="batch_upload").set_value(("lines.jsonl", body, "application/jsonl")).run()
    next(b for b in at.button if b.label == "Start batch job").click().run()
    assert not at.exception and not at.error
    [job] = state.store().list_jobs()
    deadline = time.time() + 60
    while not state.store().get_job(job.id).finished and time.time() < deadline:
        time.sleep(0.05)
    job = state.store().get_job(job.id)
    assert (job.status, job.done, job.model, job.optimizations) == ("done", 3, "gazetteer", [])
    run = state.store().get_run(job.run_id)
    assert run.summary.source == "batch" and [r.to_json() for _, r in run.items] == OUTPUT


def test_the_api_serves_it_as_a_model_with_no_demo_weights(tmp_path, gazetteer_plugin):
    from fastapi.testclient import TestClient

    from tests.fake_monitor import FakeMonitor
    from workstation.api.app import create_app
    from workstation.settings import ApiSettings, ModelSettings, Settings
    s = Settings(database=str(tmp_path / "runs.db"), demo_weights_dir=str(tmp_path / "demo"),
                 optimizations=["sparse-mask"])
    s.models["gazetteer"] = ModelSettings(device="cpu")
    s.api = ApiSettings(models=["gazetteer"])
    with TestClient(create_app(s, monitor_factory=lambda: FakeMonitor.steady(gpus=0))) as client:
        [model] = client.get("/v1/models").json()["models"]
        assert (model["name"], model["demo"]) == ("gazetteer", False)
        # No optimizations named: settings.toml's sparse-mask is a default, skipped where it does not apply ...
        answer = client.post("/v1/extract", json={"model": "gazetteer", "documents": LINES[:1]}).json()
        assert answer["results"][0]["output"] == OUTPUT[0]["output"] and answer["optimizations"] == {}
        job = client.post("/v1/jobs", json={"model": "gazetteer", "documents": LINES}).json()
        assert client.app.state.api.jobs.wait(job["job_id"], timeout=60)
        assert client.get(f"/v1/jobs/{job['job_id']}").json()["status"] == "done"
        # ... while one asked for by name must apply.
        refused = client.post("/v1/extract", json={"model": "gazetteer", "optimizations": ["sparse-mask"],
                                                   "documents": LINES[:1]})
        assert refused.status_code in (400, 422) and "does not apply" in refused.json()["error"]["message"]
        client.app.state.api.store.close()
