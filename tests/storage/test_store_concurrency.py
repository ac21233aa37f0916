"""SQLite settings for several writers: WAL, write lock taken up front, concurrent threads and processes."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.storage.sample_runs import make_report, ner_run
from tests.threads import errors_on_threads

ROOT = Path(__file__).resolve().parents[2]


def pragmas(store) -> dict:
    """The connection settings in force on a connection of the store's engine."""
    with store.engine.connect() as conn:
        return {name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")}


def test_store_uses_wal_foreign_keys_busy_timeout_and_normal_sync(store):
    assert pragmas(store) == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 15000, "synchronous": 1}
    docs, results = ner_run()
    store.record_run(make_report(results), docs, "ui")
    assert Path(str(store.path) + "-wal").exists()


def test_write_transactions_take_the_lock_up_front_and_readers_still_read(store):
    docs, results = ner_run()
    store.record_run(make_report(results), docs, "ui")
    other = sqlite3.connect(store.path, timeout=0, isolation_level=None)
    with store._write() as session:
        session.execute(select(1))                       # BEGIN IMMEDIATE already holds the write lock
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        assert other.execute("SELECT count(*) FROM runs").fetchone()[0] == 1     # WAL: reads go on
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()


def test_two_threads_record_runs_at_once_without_losing_any(store):
    docs, results = ner_run()

    def writer():
        for _ in range(15):
            store.record_run(make_report(results), docs, "ui")
            store.search_runs("北京", limit=5)
    assert errors_on_threads(writer, 2) == [] and store.count_runs() == 30


# The child builds a stand-in report (RunReport's fields) so it does not import torch: the test is about
# the database, and three torch imports would dominate its time. Children start writing together.
CHILD = textwrap.dedent("""
    import sys, time, types
    from pathlib import Path
    from tests.storage.sample_runs import ner_run
    from storage import open_store
    store = open_store({db!r})
    docs, results = ner_run()
    report = types.SimpleNamespace(model="seqgpt", weights="", demo=True, device="cpu", dtype="fp32",
                                   attention="eager", optimizations={{}}, batch_size=8, options={{}},
                                   started_at="2026-03-01T10:00:00+00:00", documents=2, wall_seconds=1.0,
                                   tokens=5, peak_memory_bytes=None, results=results)
    Path({go!r} + sys.argv[1]).touch()
    while not Path({go!r}).exists():
        time.sleep(0.01)
    for i in range(40):
        store.record_run(report, docs, "cli", label=f"child {{sys.argv[1]}} run {{i}}")
""")


def test_processes_and_a_thread_write_the_same_file_at_once(store, tmp_path):
    go = str(tmp_path / "go")
    script = CHILD.format(db=str(store.path), go=go)
    children = [subprocess.Popen([sys.executable, "-c", script, str(n)], stderr=subprocess.PIPE, text=True)
                for n in range(3)]
    deadline = time.monotonic() + 60
    while not all(Path(go + str(n)).exists() for n in range(3)) and time.monotonic() < deadline:
        time.sleep(0.01)
    Path(go).touch()
    docs, results = ner_run()
    for _ in range(40):                                   # this process writes meanwhile
        store.record_run(make_report(results), docs, "ui")
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    assert store.count_runs(source="cli") == 120 and store.count_runs() == 160
    assert store.count_runs(text="child 2 run 39") == 1


class SwitchingCursor:
    """Answers PRAGMA journal_mode=WAL with the given errors first, as SQLite does to a connection that
    switches a new file while another one is switching it."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def execute(self, sql):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


def test_switching_to_wal_waits_out_a_lock_sqlite_does_not_wait_for():
    from storage.database import _switch_to_wal
    locked = sqlite3.OperationalError("database is locked")
    cursor = SwitchingCursor(locked, locked, locked)
    _switch_to_wal(cursor, timeout_s=5)
    assert cursor.calls == 4
    with pytest.raises(sqlite3.OperationalError, match="locked"):      # not forever: busy_timeout's worth
        _switch_to_wal(SwitchingCursor(*[locked] * 1000), timeout_s=0.05)
    other = SwitchingCursor(sqlite3.OperationalError("disk I/O error"))
    with pytest.raises(sqlite3.OperationalError, match="disk"):         # anything else is not waited on
        _switch_to_wal(other, timeout_s=5)
    assert other.calls == 1
