"""A store held locked by another connection: retries with pauses, then StoreBusy (never a raw sqlite error);
runs are written in short transactions and listed only once complete."""
from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from storage import open_store, records
from storage.repository import Store, StoreBusy
from tests.storage.sample_runs import make_report, ner_run


@pytest.fixture
def quick_store(tmp_path):
    s = Store(tmp_path / "runs.db", busy_timeout_ms=50, retry_delays=(0.05, 0.1))
    yield s
    s.close()


def hold_write_lock(path) -> sqlite3.Connection:
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_write_that_cannot_get_the_lock_raises_store_busy_after_its_retries_and_writes_nothing(quick_store):
    docs, results = ner_run()
    other = hold_write_lock(quick_store.path)
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusy, match="is busy: another process .* Nothing was lost"):
            quick_store.record_run(make_report(results), docs, "ui")
        assert time.monotonic() - started >= 0.15                     # waited and retried with pauses
        assert quick_store.count_runs() == 0                          # reads go on (WAL) and see nothing
    finally:
        other.execute("ROLLBACK")
        other.close()
    quick_store.record_run(make_report(results), docs, "ui")
    assert quick_store.count_runs() == 1


def test_a_lock_released_during_the_pauses_lets_the_write_through(tmp_path):
    store = Store(tmp_path / "runs.db", busy_timeout_ms=50, retry_delays=(0.3, 0.3, 0.3))
    other = sqlite3.connect(store.path, timeout=0, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.4, lambda: (other.execute("ROLLBACK"), other.close())).start()
    job_id = store.create_job(ner_run()[0], "m", "", 1, [], {}, "in.jsonl")
    assert store.get_job(job_id).status == "queued"
    store.close()


def test_a_run_is_written_in_chunks_and_listed_only_once_complete(store, monkeypatch):
    docs, results = ner_run()
    docs, results = docs * 3, results * 3
    for i, d in enumerate(docs):
        docs[i] = type(d)(f"{d.id}-{i}", d.text, d.schema)
    results = [type(r)(docs[i].id, r.tuples, r.raw, list(r.warnings)) for i, r in enumerate(results)]
    store.CHUNK_DOCUMENTS = 2
    seen = []
    real = records.document_record

    def watching(run_id, position, doc, result):
        if position == 2:                    # the second chunk: the first is committed, the run still hidden
            with sqlite3.connect(store.path) as other:
                seen.append(other.execute("SELECT count(*) FROM documents WHERE run_id = ?", (run_id,)).fetchone()[0])
            seen.append(store.count_runs())
        return real(run_id, position, doc, result)

    monkeypatch.setattr("storage.repository.document_record", watching)
    run_id = store.record_run(make_report(results), docs, "ui")
    assert seen == [2, 0]
    assert [r.id for r in store.search_runs()] == [run_id]
    assert [d.id for d, _ in store.get_run(run_id).items] == [d.id for d in docs]


def test_a_run_that_fails_part_way_leaves_nothing_behind(store, monkeypatch):
    docs, results = ner_run()
    store.CHUNK_DOCUMENTS = 1
    real = records.document_record

    def failing(run_id, position, doc, result):
        if position == len(docs) - 1:
            raise RuntimeError("disk full")
        return real(run_id, position, doc, result)

    monkeypatch.setattr("storage.repository.document_record", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        store.record_run(make_report(results), docs, "ui")
    with sqlite3.connect(store.path) as other:
        assert other.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        assert other.execute("SELECT count(*) FROM documents").fetchone()[0] == 0


def test_open_store_on_a_locked_database_raises_store_busy(tmp_path, monkeypatch):
    open_store(tmp_path / "runs.db").close()
    other = sqlite3.connect(tmp_path / "runs.db", timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    monkeypatch.setattr(Store, "BUSY_TIMEOUT_MS", 50)
    try:
        with pytest.raises(StoreBusy):
            open_store(tmp_path / "runs.db")
    finally:
        other.execute("ROLLBACK")
        other.close()
