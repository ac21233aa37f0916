"""The UI server process (workstation/ui/server.py): the job runner starts with it, not with a page."""
from __future__ import annotations

import time

from contracts.domain import Document
from tests.workstation.ui.test_browser_e2e import running_server, write_server_settings
from workstation.ui.server import streamlit_argv


def test_a_job_left_queued_runs_when_the_server_starts_with_no_browser_connected(tmp_path):
    from storage.repository import open_store
    write_server_settings(tmp_path)
    store = open_store(tmp_path / "runs.db")
    job_id = store.create_job([Document("1", "[CLASSIFY]很满意", {"正向情感": None, "负向情感": None})],
                              "rexuninlu", str(tmp_path / "demo-weights" / "rexuninlu-tiny"), 4, [], {},
                              "left over", device="cpu")
    try:
        with running_server(tmp_path):              # no page is ever requested
            deadline = time.time() + 120
            while not store.get_job(job_id).finished and time.time() < deadline:
                time.sleep(0.2)
            job = store.get_job(job_id)
        assert job.status == "done", (job, (tmp_path / "streamlit.log").read_text())
        assert store.get_run(job.run_id).summary.source == "batch"
    finally:
        store.close()


def test_the_server_starts_streamlit_with_the_file_watcher_off():
    argv = streamlit_argv("127.0.0.1", 8501)
    assert argv[argv.index("--server.fileWatcherType") + 1] == "none"
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"
