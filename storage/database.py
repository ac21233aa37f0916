"""The SQLite engine: pragmas on every connection, and who emits BEGIN.

Several processes write the same file (the UI, a batch worker, the CLI), so:
- WAL: readers never block the writer and the writer never blocks readers;
- busy_timeout: a writer waits for the lock instead of failing with "database is locked";
- synchronous=NORMAL: safe with WAL (a power cut may lose the last commits, never corrupts);
- foreign_keys=ON: SQLite turns it off on every new connection, and our deletes cascade through it.

pysqlite's own transaction handling does not BEGIN before a SELECT and cannot say BEGIN IMMEDIATE,
so SQLAlchemy emits BEGIN itself (the recipe in SQLAlchemy's pysqlite docs). Write transactions
use BEGIN IMMEDIATE: they take the write lock up front and wait (busy_timeout) for it. A deferred
transaction that reads and then writes can instead fail at once with SQLITE_BUSY when another
process committed in between, and no timeout helps with that.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from sqlalchemy import Engine, create_engine, event

BUSY_TIMEOUT_MS = 15_000
WRITE = {"sqlite_begin": "IMMEDIATE"}       # execution options of a write transaction


class JsonText(str):
    """JSON already written (a Result's output text): stored in a JSON column as it is, not parsed and dumped
    again, which on dense outputs cost the recording more than the run's decoding."""


def _json_dumps(value) -> str:
    if isinstance(value, JsonText):
        return value
    # Chinese stays readable in the file and searchable by the full-text index (no \uXXXX escapes).
    return json.dumps(value, ensure_ascii=False)


def is_busy(error: BaseException) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds the lock this one needs."""
    text = str(getattr(error, "orig", None) or error).lower()
    return "database is locked" in text or "database table is locked" in text or "database is busy" in text


def _switch_to_wal(cursor, timeout_s: float) -> None:
    """PRAGMA journal_mode=WAL, waiting for the lock it needs. While another connection is switching a new
    file at the same moment, SQLite answers "database is locked" at once, without its busy handler, so
    the wait is ours: retried until busy_timeout has passed, as any other lock wait would be."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if not is_busy(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def create_sqlite_engine(path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> Engine:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}", json_serializer=_json_dumps)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, connection_record):
        dbapi_connection.isolation_level = None          # we emit BEGIN ourselves (see above)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        _switch_to_wal(cursor, busy_timeout_ms / 1000)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine
