"""Schema migrations: empty -> head, previous -> head, idempotent, refuses a newer database."""
from __future__ import annotations

import sqlite3
import threading

import pytest
from sample_runs import make_report, ner_run
from sqlalchemy import inspect

from storage import migrations, open_store
from storage.database import create_sqlite_engine
from storage.models import Base
from storage.repository import Store

ALL = [m.__name__ for m in migrations.MIGRATIONS]


def test_empty_database_upgrades_to_head_and_matches_the_models(tmp_path):
    store = open_store(tmp_path / "runs.db")
    assert store.schema_version() == ALL and ALL[-1] == migrations.HEAD
    inspector = inspect(store.engine)
    for name, table in Base.metadata.tables.items():       # the SQL migrations and the ORM describe one schema
        assert {c["name"] for c in inspector.get_columns(name)} == set(table.columns.keys()), name
    store.close()


def test_previous_schema_upgrades_to_head_and_indexes_existing_runs(tmp_path):
    path = tmp_path / "runs.db"
    engine = create_sqlite_engine(path)
    assert migrations.migrate(engine, upto="m001_initial") == ["m001_initial"]
    engine.dispose()
    v1 = Store(path, migrate=False)                        # the v1 schema, written by v1-era code paths
    docs, results = ner_run()
    run_id = v1.record_run(make_report(results), docs, "ui")
    v1.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'document_search'").fetchone() is None

    store = open_store(path)
    assert store.schema_version() == ALL
    assert [r.id for r in store.search_runs("阿里巴巴")] == [run_id]        # text indexed by the backfill
    assert [r.id for r in store.search_runs("=SUM")] == [run_id]
    assert [r.id for r in store.search_runs("七")] == [run_id]            # an ungrounded span, only in output
    new_id = store.record_run(make_report(results), docs, "ui")            # and the triggers index new runs
    assert {r.id for r in store.search_runs("阿里巴巴")} == {run_id, new_id}
    store.close()


def test_migrations_are_idempotent(tmp_path):
    store = open_store(tmp_path / "runs.db")
    docs, results = ner_run()
    store.record_run(make_report(results), docs, "ui")
    with store.engine.begin() as conn:
        for fn in migrations.MIGRATIONS:                   # run every migration again over a live database
            fn(conn)
    assert migrations.migrate(store.engine) == []
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM document_search").fetchone()[0] == 2
    store.close()


def test_database_written_by_a_newer_version_is_refused(tmp_path):
    store = open_store(tmp_path / "runs.db")
    with sqlite3.connect(store.path) as conn:
        conn.execute("INSERT INTO _migrations VALUES ('m999_from_the_future', '2030-01-01')")
    store.close()
    with pytest.raises(migrations.SchemaTooNew, match="newer"):
        open_store(tmp_path / "runs.db")


def test_stores_opened_at_once_on_a_new_file_migrate_it_once(tmp_path):
    path, errors, stores = tmp_path / "runs.db", [], []

    def open_one():
        try:
            stores.append(open_store(path))
        except Exception as e:                              # pragma: no cover - the failure we look for
            errors.append(e)
    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY rowid")] == ALL
    for s in stores:
        s.close()


def test_an_existing_database_upgrades_to_run_ids_that_are_never_reused(tmp_path):
    path = tmp_path / "runs.db"
    engine = create_sqlite_engine(path)
    assert migrations.migrate(engine, upto="m003_datasets_and_training_runs")[-1] == "m003_datasets_and_training_runs"
    engine.dispose()
    old = Store(path, migrate=False)
    docs, results = ner_run()
    ids = [old.record_run(make_report(results), docs, "ui") for _ in range(3)]
    old.delete_run(ids[-1])
    assert old.record_run(make_report(results), docs, "ui") == ids[-1]      # the old schema reused the id
    old.close()

    store = open_store(path)                                                # m004 rebuilds the table
    assert store.schema_version() == ALL
    with sqlite3.connect(path) as conn:
        assert "AUTOINCREMENT" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 6     # nothing cascaded away
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'ix_runs_created_at'").fetchone()
    assert [len(store.get_run(i).items) for i in ids] == [2, 2, 2]
    store.delete_run(ids[-1])
    store.delete_run(ids[-2])
    newest = store.record_run(make_report(results), docs, "ui")
    assert newest == ids[-1] + 1                                            # not reused
    store.delete_run(newest)
    assert store.record_run(make_report(results), docs, "ui") == newest + 1
    assert {r.id for r in store.search_runs("阿里巴巴")} == {ids[0], newest + 1}   # search triggers still index
    store.delete_run(ids[0])                                                # and deletes still cascade
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 2
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    store.close()


def test_a_new_database_never_reuses_run_ids(tmp_path):
    store = open_store(tmp_path / "runs.db")
    docs, results = ner_run()
    first = store.record_run(make_report(results), docs, "ui")
    store.delete_run(first)
    assert store.record_run(make_report(results), docs, "ui") == first + 1
    store.close()
