"""`serve --workers N`: several server processes on one port over one history, the CPU's cores split between them."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from storage.repository import open_store
from workstation.api import server
from workstation.settings import ROOT, ApiSettings, Settings


def test_the_cores_are_split_between_the_workers_never_below_one(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert [server.threads_per_worker(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


def test_serve_refuses_fewer_than_one_worker_before_anything_starts():
    with pytest.raises(SystemExit, match="--workers must be 1 or more"):
        server.serve(Settings(api=ApiSettings()), workers=0)


def test_the_server_hands_the_interpreter_lock_over_often(monkeypatch):
    # At Python's 5 ms the event loop queued behind the model's thread after every socket read and write.
    import uvicorn
    seen = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.append(sys.getswitchinterval()))
    monkeypatch.setattr("workstation.api.app.create_app", lambda settings: None)
    before = sys.getswitchinterval()
    try:
        server.serve(Settings(api=ApiSettings()), workers=1)
    finally:
        sys.setswitchinterval(before)
    assert seen == [pytest.approx(server.SWITCH_INTERVAL_S)] and server.SWITCH_INTERVAL_S <= 0.001


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_worker_processes_share_the_history_without_losing_a_run(tmp_path, rex_tiny):
    port = _free_port()
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[storage]\ndatabase = "{tmp_path / "runs.db"}"\ndemo_weights_dir = "{tmp_path / "demo"}"\n'
                        f'[models.rexuninlu]\nweights = "{rex_tiny}"\ndevice = "cpu"\nbatch_size = 4\n'
                        f'[api]\nport = {port}\nmodels = ["rexuninlu"]\n', "utf-8")
    log = open(tmp_path / "serve.log", "w")
    process = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "serve", "--workers", "2"], cwd=ROOT,
                               env={**os.environ, "IEW_SETTINGS": str(settings), "OMP_NUM_THREADS": "1"},
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while (tmp_path / "serve.log").read_text().count("Application startup complete") < 2:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "two workers did not start within 240 s"
            time.sleep(0.5)

        def extract(i: int) -> dict:
            response = httpx.post(f"{url}/v1/extract", timeout=120, json={
                "model": "rexuninlu", "documents": [{"id": f"d{i}", "text": f"{i}. 张三在北京大学读书"}],
                "schema": {"人物": None, "组织机构": None}})
            assert response.status_code == 200, response.text
            return response.json()
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(extract, range(24)))
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()
    text = (tmp_path / "serve.log").read_text()
    assert "2 worker processes, " in text and len(set(_started_pids(text))) == 2
    ids = [a["run_id"] for a in answers]
    assert None not in ids and len(set(ids)) == 24
    assert [a["results"][0]["id"] for a in answers] == [f"d{i}" for i in range(24)]
    store = open_store(tmp_path / "runs.db")
    try:
        assert store.count_runs(source="api") == 24
        assert sorted(r.id for r in store.search_runs(source="api", limit=100)) == sorted(ids)
    finally:
        store.close()


def _started_pids(log: str) -> list[str]:
    return [line.rsplit("[", 1)[1].rstrip("]") for line in log.splitlines() if "Started server process [" in line]
