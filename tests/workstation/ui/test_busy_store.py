"""Every page survives a database held locked by another process: a clear message, never a traceback."""
from __future__ import annotations

import sqlite3

import pytest

from storage.repository import Store

PAGES = ("extract", "batch", "history", "datasets", "finetune", "optimizations", "monitor", "plugins")


@pytest.fixture
def locked(ui_env, monkeypatch):
    """The history database with another connection holding its write lock; the store gives up quickly."""
    from storage import open_store
    monkeypatch.setattr(Store, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(Store, "RETRY_DELAYS", (0.05,))
    open_store(ui_env / "runs.db").close()
    other = sqlite3.connect(ui_env / "runs.db", timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    yield other
    if other.in_transaction:
        other.execute("ROLLBACK")
    other.close()


def test_every_page_shows_a_clear_message_while_the_store_is_locked_and_works_after(app, locked):
    at = app.run()
    for page in PAGES:
        at.switch_page(f"screens/{page}.py").run()
        assert not at.exception, page
        assert any("is busy" in e.value and "Nothing was lost" in e.value for e in at.error), page
    locked.execute("ROLLBACK")
    for page in PAGES:
        at.switch_page(f"screens/{page}.py").run()
        assert not at.exception and not at.error, page


def test_a_run_whose_recording_meets_a_locked_store_says_so_without_a_traceback(app, ui_env, monkeypatch):
    monkeypatch.setattr(Store, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(Store, "RETRY_DELAYS", (0.05,))
    at = app.run()                                       # the store is open before the lock is taken
    other = sqlite3.connect(ui_env / "runs.db", timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        at.text_area(key="text:fakeie").input("Alice met Bob.").run()
        next(b for b in at.button if b.label == "Run").click().run()
        assert not at.exception
        assert any("is busy" in e.value for e in at.error)
    finally:
        other.execute("ROLLBACK")
        other.close()
