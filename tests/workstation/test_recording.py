"""extract's history recording on a thread of its own: everything recorded in order, the run never held up by a
store that fails, and nothing left behind by a run that fails."""
import sqlite3
import threading
import types

import pytest

from contracts.domain import Document, Result, Span
from contracts.report import RunReport
from storage import open_store
from storage.repository import RunWriter
from workstation import recording


@pytest.fixture
def history(tmp_path):
    return recording.History(types.SimpleNamespace(database="runs.db", path=lambda name: tmp_path / name))


def report(documents=0):
    r = RunReport("rexuninlu", "w", True, "cpu", "fp32", "eager", {}, 8, {}, "2026-12-04T00:00:00")
    r.documents, r.wall_seconds = documents, 1.0
    return r


def item(n):
    return Document(str(n), f"张三{n}在北京", {"人物": None}), Result(str(n), [[Span("人物", "张三", (0, 2), 0.9)]])


def rows(tmp_path):
    """Runs in the database, finished or not (History lists only finished ones)."""
    with sqlite3.connect(tmp_path / "runs.db") as db:
        return db.execute("SELECT count(*) FROM runs").fetchone()[0]


def runs(tmp_path):
    store = open_store(tmp_path / "runs.db")
    try:
        return [store.get_run(s.id) for s in store.search_runs()]
    finally:
        store.close()


def test_documents_are_written_by_the_writer_thread_in_order(history, tmp_path, monkeypatch):
    threads, real_add = set(), RunWriter.add
    monkeypatch.setattr(RunWriter, "add", lambda self, d, r: (threads.add(threading.current_thread().name),
                                                              real_add(self, d, r)))
    history.start(report())
    for n in range(600):                     # more than the queue holds: the run waits for the store, loses nothing
        history.add(*item(n))
    history.finish(report(600), {"summary": {}})
    [run] = runs(tmp_path)
    assert threads == {"history-writer"} and [d.id for d, _ in run.items] == [str(n) for n in range(600)]
    assert run.items[0][1].to_json() == item(0)[1].to_json() and history.thread is None


def test_a_store_that_fails_mid_run_warns_and_leaves_no_partial_run(history, tmp_path, monkeypatch, capsys):
    real_add = RunWriter.add

    def fails_at_five(self, document, result):
        if document.id == "5":
            raise OSError("disk full")
        real_add(self, document, result)
    monkeypatch.setattr(RunWriter, "add", fails_at_five)
    history.start(report())
    for n in range(20):
        history.add(*item(n))                # never raises: the output file is what the command is for
    history.finish(report(20), {})
    assert "not recorded in the history (OSError: disk full)" in capsys.readouterr().err
    assert runs(tmp_path) == [] and rows(tmp_path) == 0


def test_an_abandoned_run_drops_what_is_queued_and_removes_what_was_written(history, tmp_path, monkeypatch):
    release, written, real_add = threading.Event(), [], RunWriter.add

    def slow(self, document, result):
        release.wait(5)
        written.append(document.id)
        real_add(self, document, result)
    monkeypatch.setattr(RunWriter, "add", slow)
    history.start(report())
    for n in range(50):
        history.add(*item(n))
    threading.Timer(0.2, release.set).start()
    history.abandon()                        # the run failed: the queued documents are not written first
    assert len(written) <= 2 and rows(tmp_path) == 0 and history.thread is None
