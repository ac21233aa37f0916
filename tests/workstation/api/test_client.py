"""workstation.api.client against the API over real HTTP; `launcher.py serve` and [api] settings."""
import json

import pytest

from workstation.api.client import ApiError, Client, Extraction

NER = {"人物": None, "地理位置": None, "组织机构": None}
DOCS = [{"id": "a", "text": "[CLASSIFY]很好看", "schema": {"正向": None, "负向": None}},
        {"id": "b", "text": "张三在北京大学读书"}]


def test_client_covers_extract_jobs_history_and_errors(live_api, tmp_path):
    with Client(live_api) as api:
        assert api.health()["status"] == "ok"
        assert [m["name"] for m in api.models()] == ["rexuninlu"]
        assert api.gpus()["gpus"][0]["name"] == "Fake GPU 0"
        answer = api.extract("rexuninlu", DOCS, schema=NER, optimizations=[])
        assert isinstance(answer, Extraction) and [r["id"] for r in answer.results] == ["a", "b"]
        assert answer.results[0]["output"] and answer.demo is True and answer.device == "cpu"
        assert api.run(answer.run_id)["documents"] == 2
        assert api.runs(q="北京大学")["total"] == 1
        assert json.loads(api.export(answer.run_id, "jsonl").splitlines()[0])["id"] == "a"

        job = api.submit_job("rexuninlu", DOCS, schema=NER, optimizations=[])
        assert api.wait_for_job(job, timeout=120, poll_s=0.2)["status"] == "done"
        assert list(api.job_results(job)) == answer.results
        (tmp_path / "docs.txt").write_text("张三在北京\n李四去上海\n", "utf-8")
        upload = api.upload_job(tmp_path / "docs.txt", "rexuninlu", schema=NER, optimizations=[])
        assert api.wait_for_job(upload, timeout=120, poll_s=0.2)["total"] == 2
        assert [r["id"] for r in api.job_results(upload)] == ["1", "2"]

        with pytest.raises(ApiError) as e:
            api.extract("rexuninlu", [{"text": "好", "schema": NER}, {"text": "x", "schema": {}}])
        assert e.value.status == 400 and e.value.code == "invalid_input" and e.value.line == 2
        with pytest.raises(ApiError) as e:
            list(api.job_results(10**6))
        assert e.value.status == 404
        with pytest.raises(TypeError):
            api.submit_job("rexuninlu", DOCS, colour="red")


def test_client_sends_the_token(api_settings):
    api_settings.api.token = "t0ken"                # Guard reads the token it was built with: a new app
    from fastapi.testclient import TestClient

    from workstation.api.app import create_app
    app = create_app(api_settings)
    with Client("http://testserver", token="t0ken", transport=TestClient(app)._transport) as api:
        assert api.models()[0]["name"] == "rexuninlu"
    with Client("http://testserver", token="wrong", transport=TestClient(app)._transport) as api:
        with pytest.raises(ApiError) as e:
            api.models()
        assert e.value.status == 401
    app.state.api.store.close()


def test_api_settings_are_read_from_settings_toml_and_the_token_from_the_environment(tmp_path, monkeypatch):
    from workstation.settings import load_settings
    path = tmp_path / "settings.toml"
    path.write_text('[api]\nhost = "0.0.0.0"\nport = 9000\ntoken = "from-file"\ncors_origins = ["http://x"]\n'
                    'queue_size = 3\n', "utf-8")
    monkeypatch.delenv("IEW_API_TOKEN", raising=False)
    s = load_settings(path)
    assert (s.api.host, s.api.port, s.api.token, s.api.cors_origins, s.api.queue_size) == \
        ("0.0.0.0", 9000, "from-file", ["http://x"], 3)
    monkeypatch.setenv("IEW_API_TOKEN", "from-env")
    assert load_settings(path).api.token == "from-env"
    assert load_settings(tmp_path / "missing.toml").api.port == 8502


def test_serve_refuses_to_listen_off_loopback_without_a_token(tmp_path, monkeypatch):
    from workstation.cli import main
    (tmp_path / "settings.toml").write_text("[api]\nhost = \"0.0.0.0\"\n", "utf-8")
    monkeypatch.setattr("workstation.settings.DEFAULT_PATH", tmp_path / "settings.toml")
    monkeypatch.delenv("IEW_API_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="needs a bearer token"):
        main(["serve"])
    with pytest.raises(SystemExit, match="needs a bearer token"):
        main(["serve", "--host", "10.0.0.7", "--port", "9999"])


def test_a_slow_client_does_not_hold_up_others(live_api):
    import socket
    import time
    from urllib.parse import urlparse
    where = urlparse(live_api)
    with socket.create_connection((where.hostname, where.port)) as slow:
        # Headers and the start of a body, then nothing: the server waits for the rest without stalling.
        slow.sendall(b"POST /v1/extract HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000\r\n\r\n{\"model\": \"rexuninlu\", ")
        start = time.monotonic()
        with Client(live_api, timeout=60) as api:
            assert api.health()["status"] == "ok"
            assert api.extract("rexuninlu", DOCS[:1], optimizations=[]).results[0]["id"] == "a"
        assert time.monotonic() - start < 60


def test_api_runs_and_jobs_are_in_the_store_another_process_opens(live_api, api_settings):
    """The UI is another process on the same database: it sees what the API wrote."""
    from storage.repository import open_store
    with Client(live_api) as api:
        run_id = api.extract("rexuninlu", DOCS, schema=NER, optimizations=[]).run_id
        job_id = api.submit_job("rexuninlu", DOCS, schema=NER, optimizations=[])
        assert api.wait_for_job(job_id, timeout=120, poll_s=0.2)["status"] == "done"
    ui_store = open_store(api_settings.database)
    try:
        assert ui_store.get_run(run_id).summary.documents == 2
        job = ui_store.get_job(job_id)
        assert job.status == "done" and ui_store.get_run(job.run_id).summary.source == "batch"
        assert job_id in [j.id for j in ui_store.list_jobs()]
    finally:
        ui_store.close()
