"""The app shell: pages, the demo banner, the Plugins page, resuming jobs at start."""
from __future__ import annotations

import time

from contracts.domain import Document
from contracts.model import DEMO_NOTICE
from workstation.ui import state


def test_every_page_renders_without_an_exception(app):
    at = app.run()
    for page in ("extract", "batch", "history", "review", "datasets", "finetune", "thresholds", "optimizations",
                 "monitor", "plugins"):
        at.switch_page(f"screens/{page}.py").run()
        assert not at.exception, page
        assert not at.error, page


def test_demo_weights_carry_an_unmistakable_banner_and_real_ones_do_not(app, ui_env):
    at = app.run()
    assert any(DEMO_NOTICE in w.value for w in at.warning)
    (ui_env / "fake-weights" / "RANDOM_DEMO_WEIGHTS.txt").unlink()
    at.run()
    assert not any(DEMO_NOTICE in w.value for w in at.warning)


def test_the_plugins_page_lists_plugins_with_versions_hooks_and_source(app):
    at = app.run().switch_page("screens/plugins.py").run()
    table = at.dataframe[0].value
    fake = table[table["name"] == "undo-fake-ie"].iloc[0]
    assert fake["source"] == "in-process" and fake["version"]
    assert fake["hooks"] == "register_models, register_optimizations"
    exporters = table[table["name"] == "exporters"].iloc[0]
    assert exporters["source"] == "built-in" and exporters["hooks"] == "register_exporters"
    assert any("fakeie" in m.value for m in at.markdown)


def test_jobs_left_queued_by_a_previous_process_resume_when_the_app_starts(app, ui_env):
    from storage.repository import open_store
    store = open_store(ui_env / "runs.db")
    job_id = store.create_job([Document("1", "Alice", {"Alice": None})], "fakeie", str(ui_env / "fake-weights"),
                              4, [], {}, "left over", device="cpu")
    store.close()
    app.run()
    deadline = time.time() + 20
    while not state.store().get_job(job_id).finished and time.time() < deadline:
        time.sleep(0.05)
    assert state.store().get_job(job_id).status == "done"


def test_no_folder_beside_app_py_is_streamlits_legacy_pages_folder():
    # A `pages/` folder beside the main script switches a process into Streamlit's legacy multipage mode
    # when a page URL is the first request (app.py, its sidebar and the job runner would never run).
    from pathlib import Path

    from tests.workstation.ui.conftest import APP
    assert not (Path(APP).parent / "pages").exists()
