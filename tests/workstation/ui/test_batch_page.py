"""The Batch page: uploads and server paths become background jobs whose state lives in SQLite."""
from __future__ import annotations

import json
import time

from streamlit.testing.v1 import AppTest

from tests.workstation.ui.conftest import APP
from workstation.ui import state

PAGE = "screens/batch.py"


def start(at):
    next(b for b in at.button if b.label == "Start batch job").click().run()


def wait_done(job_id: int, timeout: float = 30):
    store, deadline = state.store(), time.time() + timeout
    while time.time() < deadline:
        job = store.get_job(job_id)
        if job.finished:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {store.get_job(job_id)}")


def jsonl(*rows) -> bytes:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in rows).encode()


def test_an_uploaded_jsonl_runs_in_the_background_and_becomes_a_batch_run(app):
    at = app.run().switch_page(PAGE).run()
    at.file_uploader(key="batch_upload").set_value(("news.jsonl", jsonl(
        {"id": "a", "text": "Alice in Paris"}, {"id": "b", "text": "Bob", "schema": {"Bob": None}}),
        "application/jsonl")).run()
    start(at)
    assert not at.exception and not at.error
    [job] = state.store().list_jobs()
    assert (job.source_name, job.total, job.model) == ("news.jsonl", 2, "fakeie")
    done = wait_done(job.id)
    assert done.status == "done" and done.done == 2
    run = state.store().get_run(done.run_id)
    assert run.summary.source == "batch"
    assert [[s.span for t in r.tuples for s in t] for _, r in run.items] == [["Alice", "Paris"], ["Bob"]]
    at.run()
    assert any("2 / 2 documents" in p.proto.text for p in at.get("progress"))
    assert any(b.label == "Open run" for b in at.button)


def test_a_reload_or_a_new_tab_still_shows_the_job(app):
    at = app.run().switch_page(PAGE).run()
    at.file_uploader(key="batch_upload").set_value(("t.txt", "Alice\nParis and Alice\n".encode(), "text/plain")).run()
    start(at)
    [job] = state.store().list_jobs()
    wait_done(job.id)
    fresh = AppTest.from_file(APP, default_timeout=60)       # a new browser session: nothing in its state
    fresh.session_state["model"] = "fakeie"
    fresh.run().switch_page(PAGE).run()
    assert any(f"Job {job.id}" in m.value and "`done`" in m.value for m in fresh.markdown)


def test_a_broken_upload_is_a_clear_error_naming_the_line_and_starts_nothing(app):
    at = app.run().switch_page(PAGE).run()
    at.file_uploader(key="batch_upload").set_value(
        ("bad.jsonl", b'{"id": 1, "text": "Alice"}\n{"id": 2, "text": \n', "application/jsonl")).run()
    start(at)
    assert not at.exception
    assert any("Nothing was started" in e.value and "line 2" in e.value for e in at.error)
    assert state.store().list_jobs() == []
    assert at.file_uploader(key="batch_upload").value is not None       # the upload is kept for a retry


def test_invalid_lines_can_be_skipped_and_are_reported(app):
    at = app.run().switch_page(PAGE).run()
    at.file_uploader(key="batch_upload").set_value(
        ("mixed.jsonl", b'{"text": "Alice"}\nnot json\n{"text": "  "}\n', "application/jsonl")).run()
    at.checkbox[0].check().run()
    start(at)
    assert any("Skipped 2 invalid lines" in w.value and "line 2" in w.value and "line 3" in w.value
               for w in at.warning)
    [job] = state.store().list_jobs()
    assert job.total == 1


def open_folders(ui_env, monkeypatch, *folders, host="127.0.0.1"):
    """settings.toml with [batch] input_folders and [ui] host."""
    from tests.workstation.ui.conftest import write_settings
    from workstation import settings
    listed = ", ".join(f'"{f}"' for f in folders)
    monkeypatch.setattr(settings, "DEFAULT_PATH", write_settings(
        ui_env, ui_env / "fake-weights", f'[batch]\ninput_folders = [{listed}]\n\n[ui]\nhost = "{host}"\n'))


def test_a_server_side_path_works_and_a_missing_one_is_an_error(app, ui_env, monkeypatch):
    path = ui_env / "in.csv"
    path.write_text("id,text\n1,Alice\n2,Paris\n", encoding="utf-8")
    open_folders(ui_env, monkeypatch, ui_env)
    at = app.run().switch_page(PAGE).run()
    at.radio(key="batch_source").set_value("A file on this machine").run()
    at.text_input(key="batch_path").input(str(ui_env / "missing.csv")).run()
    start(at)
    assert any("does not exist" in e.value for e in at.error)
    at.text_input(key="batch_path").input(str(path)).run()
    start(at)
    [job] = state.store().list_jobs()
    assert job.total == 2 and wait_done(job.id).status == "done"


def test_a_path_outside_the_configured_folders_is_refused(app, ui_env, monkeypatch):
    allowed, secret = ui_env / "corpora", ui_env / "secret.csv"
    allowed.mkdir()
    secret.write_text("id,text\n1,password\n", encoding="utf-8")
    (allowed / "link.csv").symlink_to(secret)
    open_folders(ui_env, monkeypatch, allowed)
    at = app.run().switch_page(PAGE).run()
    at.radio(key="batch_source").set_value("A file on this machine").run()
    for attempt in (str(secret), str(allowed / ".." / "secret.csv"), "link.csv"):
        at.text_input(key="batch_path").input(attempt).run()
        start(at)
        assert any("is not inside a folder open to the Batch page" in e.value for e in at.error), attempt
    assert state.store().list_jobs() == []


def test_no_configured_folder_means_uploads_only(app, ui_env):
    at = app.run().switch_page(PAGE).run()
    at.radio(key="batch_source").set_value("A file on this machine").run()
    assert any("No folder is open to the Batch page" in i.value for i in at.info)
    assert not [t for t in at.text_input if t.key == "batch_path"]


def test_reading_by_path_is_refused_when_the_ui_listens_beyond_loopback(app, ui_env, monkeypatch):
    path = ui_env / "in.csv"
    path.write_text("id,text\n1,Alice\n", encoding="utf-8")
    open_folders(ui_env, monkeypatch, ui_env)
    at = app.run().switch_page(PAGE).run()
    at.radio(key="batch_source").set_value("A file on this machine").run()
    at.text_input(key="batch_path").input(str(path)).run()
    open_folders(ui_env, monkeypatch, ui_env, host="0.0.0.0")          # settings.toml now exposes the UI
    at.run()
    assert at.radio(key="batch_source").options == ["Upload a file"]
    assert not [t for t in at.text_input if t.key == "batch_path"]
    start(at)
    assert not at.exception and state.store().list_jobs() == []


def test_a_running_job_can_be_cancelled_from_the_page(app):
    at = app.run().switch_page(PAGE).run()
    at.file_uploader(key="batch_upload").set_value(("t.txt", b"[SLOW] Alice\n" * 400, "text/plain")).run()
    start(at)
    [job] = state.store().list_jobs()
    deadline = time.time() + 10
    while state.store().get_job(job.id).done == 0 and time.time() < deadline:
        time.sleep(0.05)
    at.run()
    next(b for b in at.button if b.label == "Cancel").click().run()
    assert state.job_runner().wait(timeout=20)
    stopped = state.store().get_job(job.id)
    assert stopped.status == "cancelled" and 0 < stopped.done < stopped.total
    at.run()
    assert any(b.label == "Resume" for b in at.button)


def test_a_model_that_cannot_load_starts_nothing_and_keeps_the_upload(app, ui_env):
    import shutil
    shutil.rmtree(ui_env / "fake-weights")
    at = app.run().switch_page(PAGE).run()
    at.file_uploader(key="batch_upload").set_value(("t.txt", b"Alice\n", "text/plain")).run()
    start(at)
    assert not at.exception
    assert any("Nothing was started" in e.value and "fakeie has no weights" in e.value for e in at.error)
    assert state.store().list_jobs() == [] and at.file_uploader(key="batch_upload").value is not None


def test_a_corpus_job_shows_its_counts_and_how_to_resume_without_a_resume_button(app):
    import socket
    store, owner = state.store(), f"{socket.gethostname()}:999999999:a"     # a process that is gone
    job_id = store.begin_corpus_job(None, "corpus: shards/*.jsonl", "/data/out_[x](y)", "fakeie", "w", owner=owner,
                                    device="local", dtype="fp32", batch_size=8, optimizations=[], options={})
    assert store.corpus_progress(job_id, owner, total=40, done=10, wall_seconds=2.0, docs_per_second=5.0) == "running"
    assert state.job_runner().resume_unfinished() == []          # its owner is gone, yet no runner takes it
    at = app.run().switch_page(PAGE).run()
    assert any("10 / 40 documents" in p.proto.text for p in at.get("progress"))
    assert any("/data/out\\_\\[x\\]\\(y\\)" in c.value for c in at.caption)     # the path, escaped
    next(b for b in at.button if b.label == "Cancel").click().run()
    assert store.corpus_progress(job_id, owner, total=40, done=12, wall_seconds=3.0, docs_per_second=4.0) \
        == "cancelled"                                                         # the command sees it and stops
    store.end_corpus_job(job_id, owner, "cancelled", "interrupted: run the same corpus command again to resume")
    at.run()
    assert store.get_job(job_id).status == "cancelled" and not any(b.label == "Resume" for b in at.button)
    assert not store.requeue_job(job_id)


def test_a_job_started_after_an_extract_run_uses_the_model_that_run_loaded(app, fake_plugin):
    at = app.run()
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and len(fake_plugin.family.loads) == 1
    [key] = state.model_shelf().loaded()
    at.switch_page(PAGE).run()
    at.file_uploader(key="batch_upload").set_value(("t.txt", "Alice\nParis and Alice\n".encode(), "text/plain")).run()
    start(at)
    [job] = state.store().list_jobs()
    done = wait_done(job.id)
    assert done.status == "done" and state.model_shelf().loaded() == [key]
    assert len(fake_plugin.family.loads) == 1                 # the job borrowed it: no second copy
    assert set(state.store().get_run(done.run_id).summary.stages["seconds"]) == {"prepare", "device", "decode", "write"}


def test_a_csv_with_a_content_column_is_previewed_and_runs_on_the_chosen_text_column(app):
    # A CSV whose text is under `content` was a dead end: "no 'text' column", and no way to say which.
    at = app.run().switch_page(PAGE).run()
    csv_bytes = "id,content,source\na,Alice in Paris,web\nb,Bob,mail\nc,\"Paris, again\",web\n".encode()
    at.file_uploader(key="batch_upload").set_value(("notes.csv", csv_bytes, "text/csv")).run()
    assert not at.exception
    assert any("3 rows · 3 columns" in c.value for c in at.caption)
    assert [list(d.value.columns) for d in at.dataframe] == [["id", "content", "source"]]   # the first rows
    assert at.selectbox(key="batch_text_column").value == "content"        # guessed from its name
    at.text_area(key="batch-schema:fakeie").input('{"Paris": null, "Bob": null}').run()
    start(at)
    assert not at.exception and not at.error
    [job] = state.store().list_jobs()
    done = wait_done(job.id)
    run = state.store().get_run(done.run_id)
    assert [d.text for d, _ in run.items] == ["Alice in Paris", "Bob", "Paris, again"]
    assert [[s.span for t in r.tuples for s in t] for _, r in run.items] == [["Paris"], ["Bob"], ["Paris"]]
    assert run.settings["input"] == {"file": "notes.csv", "text_column": "content"}


def test_choosing_another_text_column_reads_that_one(app):
    at = app.run().switch_page(PAGE).run()
    csv_bytes = "text,summary\nAlice,Bob\n".encode()
    at.file_uploader(key="batch_upload").set_value(("two.csv", csv_bytes, "text/csv")).run()
    assert at.selectbox(key="batch_text_column").value == "text"
    at.selectbox(key="batch_text_column").select("summary").run()
    at.text_area(key="batch-schema:fakeie").input('{"Bob": null}').run()
    start(at)
    [job] = state.store().list_jobs()
    run = state.store().get_run(wait_done(job.id).run_id)
    assert [d.text for d, _ in run.items] == ["Bob"]


def test_a_running_job_shows_the_time_left_and_its_throughput_and_a_done_one_a_download(app):
    import socket
    store, owner = state.store(), f"{socket.gethostname()}:999999999:a"     # a corpus job: progress by hand
    job_id = store.begin_corpus_job(None, "corpus: shards/*.jsonl", "/data/out", "fakeie", "w", owner=owner,
                                    device="local", dtype="fp32", batch_size=8, optimizations=[], options={})
    store.corpus_progress(job_id, owner, total=40, done=10, wall_seconds=2.0, docs_per_second=5.0)
    at = app.run().switch_page(PAGE).run()
    assert any("10 / 40 documents · 5.0 docs/s · 2.0 s · about 6 s left" in p.proto.text for p in at.get("progress"))
    for done in (20, 30):
        time.sleep(0.2)
        store.corpus_progress(job_id, owner, total=40, done=done, wall_seconds=3.0, docs_per_second=5.0)
        at.run()
    assert any(e.label.startswith("Throughput") for e in at.expander) and at.get("vega_lite_chart")

    at.file_uploader(key="batch_upload").set_value(("t.txt", b"Alice\n", "text/plain")).run()
    start(at)
    finished = wait_done(max(j.id for j in store.list_jobs()))
    at.run()
    key = f"job-{finished.id}-export"
    next(b for b in at.button if b.key == f"{key}_prepare").click().run()
    assert not at.exception
    assert any(d.label.startswith(f"Download runs-{finished.run_id}-") for d in at.get("download_button"))
