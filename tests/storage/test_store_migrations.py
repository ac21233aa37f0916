"""Schema migrations: empty -> head, previous -> head, idempotent, refuses a newer database."""
from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import inspect

from storage import migrations, open_store
from storage.database import create_sqlite_engine
from storage.tables import Base
from tests.storage.sample_runs import make_report, ner_run
from tests.threads import errors_on_threads

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
    with engine.begin() as conn:                           # today's ORM writes finished_at (m005 adds it if missing)
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN finished_at TEXT")
    engine.dispose()
    docs, results = ner_run()
    run_id = record_in_older_schema(path, make_report(results), docs, "ui")     # what v1-era code wrote
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


def record_in_older_schema(path, report, docs, source) -> int:
    """A run written into an older schema: the head's rows, less the columns added since."""
    from sqlalchemy import inspect as inspect_object

    from storage.records import document_record, run_header
    engine = create_sqlite_engine(path)
    present = {t: {c["name"] for c in inspect(engine).get_columns(t)} for t in ("runs", "documents", "results")}

    def row(obj, **extra) -> dict:
        mapper = inspect_object(obj).mapper
        values = {p.columns[0].name: getattr(obj, p.key) for p in mapper.column_attrs} | extra
        return {k: v for k, v in values.items() if k in present[mapper.local_table.name] and k != "id"}
    run = run_header(report, len(docs), source, None, None)
    with engine.begin() as conn:
        run_id = conn.execute(run.__table__.insert().values(row(run))).inserted_primary_key[0]
        for position, (doc, result) in enumerate(zip(docs, report.results)):
            d = document_record(run_id, position, doc, result)
            doc_id = conn.execute(d.__table__.insert().values(row(d, run_id=run_id))).inserted_primary_key[0]
            conn.execute(d.result.__table__.insert().values(row(d.result, document_id=doc_id)))
    engine.dispose()
    return run_id


def test_runs_recorded_before_m005_get_a_finish_time_and_history_lists_them_by_it(tmp_path):
    path = tmp_path / "runs.db"
    engine = create_sqlite_engine(path)
    migrations.migrate(engine, upto="m003_datasets_and_training_runs")
    columns = ("created_at, source, model, weights, demo, device, dtype, attention, optimizations, batch_size, "
               "options, documents, wall_seconds, tokens")
    with engine.begin() as conn:
        for created, wall in (("2026-03-01 10:00:00.000000", 100.25), ("2026-03-01 10:01:00.000000", 1.0)):
            conn.exec_driver_sql(f"INSERT INTO runs ({columns}) VALUES (?, 'batch', 'm', '', 0, 'cpu', 'fp32', "
                                 "'eager', '{}', 8, '{}', 0, ?, 0)", (created, wall))
    engine.dispose()
    store = open_store(path)
    long_run, short_run = store.search_runs()             # started first, finished last: listed first
    assert (long_run.id, short_run.id) == (1, 2)
    assert long_run.finished_at.isoformat() == "2026-03-01T10:01:40.250000+00:00"
    assert short_run.finished_at.isoformat() == "2026-03-01T10:01:01+00:00"
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
    path, stores = tmp_path / "runs.db", []

    def open_one():
        stores.append(open_store(path))
    assert errors_on_threads(open_one, 4) == []
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY rowid")] == ALL
    for s in stores:
        s.close()


def test_an_existing_database_upgrades_to_run_ids_that_are_never_reused(tmp_path):
    path = tmp_path / "runs.db"
    engine = create_sqlite_engine(path)
    assert migrations.migrate(engine, upto="m003_datasets_and_training_runs")[-1] == "m003_datasets_and_training_runs"
    engine.dispose()
    docs, results = ner_run()
    ids = [record_in_older_schema(path, make_report(results), docs, "ui") for _ in range(3)]
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM runs WHERE id = ?", (ids[-1],))
    assert record_in_older_schema(path, make_report(results), docs, "ui") == ids[-1]   # the old schema reused it

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


def test_m009_lets_runs_come_from_the_api_and_keeps_older_runs_their_documents_and_search(tmp_path):
    path = tmp_path / "runs.db"
    engine = create_sqlite_engine(path)
    migrations.migrate(engine, upto="m008_thresholds_and_review")
    engine.dispose()
    docs, results = ner_run()
    old_id = record_in_older_schema(path, make_report(results), docs, "cli")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET finished_at = created_at WHERE id = ?", (old_id,))   # a complete run
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE runs SET source = 'api' WHERE id = ?", (old_id,))   # the old CHECK refuses it

    store = open_store(path)
    assert store.schema_version() == ALL
    api_id = store.record_run(make_report(results), docs, "api")
    assert api_id > old_id                                           # AUTOINCREMENT survived the rebuild
    assert [r.source for r in store.search_runs(source="api")] == ["api"]
    assert {r.id for r in store.search_runs("阿里巴巴")} == {old_id, api_id}   # documents and the index kept
    assert len(store.get_run(old_id).items) == len(docs)
    with pytest.raises(ValueError):
        store.record_run(make_report(results), docs, "robot")
    store.close()
