"""Schema migrations: an ordered list of idempotent functions and a `_migrations` table (the `llm` idiom).

Each migration is plain SQL frozen at the time it was written, so a database made by any earlier
version upgrades the same way; `storage.tables` describes the head. Append new migrations at the
end; never edit or reorder old ones. JSON columns are declared TEXT: SQLite's "JSON" type name would
get NUMERIC affinity, which turns a JSON document like `5` into an integer.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Callable

from sqlalchemy import Connection, Engine, text

from storage.database import WRITE

Migration = Callable[[Connection], None]
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


def _run(conn: Connection, script: str) -> None:
    # Statements are separated by a blank line: trigger bodies contain semicolons of their own.
    for statement in script.split("\n\n"):
        if statement.strip():
            conn.exec_driver_sql(statement)


@migration
def m001_initial(conn: Connection) -> None:
    _run(conn, """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('ui', 'batch', 'cli')),
    model TEXT NOT NULL,
    task TEXT,
    weights TEXT NOT NULL,
    weights_checksum TEXT,
    demo INTEGER NOT NULL,
    device TEXT NOT NULL,
    dtype TEXT NOT NULL,
    attention TEXT NOT NULL,
    optimizations TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    options TEXT NOT NULL,
    settings TEXT,
    documents INTEGER NOT NULL,
    wall_seconds REAL NOT NULL,
    docs_per_second REAL,
    tokens INTEGER NOT NULL,
    peak_memory_bytes INTEGER,
    label TEXT,
    note TEXT
)

CREATE INDEX IF NOT EXISTS ix_runs_created_at ON runs (created_at)

CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    doc_id TEXT NOT NULL,
    text TEXT NOT NULL,
    schema TEXT,
    task TEXT,
    labels TEXT,
    UNIQUE (run_id, position)
)

CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL UNIQUE REFERENCES documents (id) ON DELETE CASCADE,
    output TEXT NOT NULL,
    raw TEXT,
    warnings TEXT NOT NULL
)

CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    source_name TEXT NOT NULL,
    model TEXT NOT NULL,
    weights TEXT NOT NULL,
    device TEXT NOT NULL,
    dtype TEXT NOT NULL,
    task TEXT,
    batch_size INTEGER NOT NULL,
    optimizations TEXT NOT NULL,
    options TEXT NOT NULL,
    settings TEXT,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'cancelled', 'done', 'failed')),
    total INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    docs_per_second REAL,
    wall_seconds REAL NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    peak_memory_bytes INTEGER,
    error TEXT,
    owner TEXT,
    heartbeat_at TEXT,
    started_at TEXT,
    finished_at TEXT,
    run_id INTEGER REFERENCES runs (id) ON DELETE SET NULL
)

CREATE TABLE IF NOT EXISTS job_items (
    id INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    doc TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'claimed', 'done')),
    claimed_by TEXT,
    claimed_at TEXT,
    result TEXT,
    UNIQUE (job_id, position)
)

CREATE INDEX IF NOT EXISTS ix_job_items_status ON job_items (job_id, status, position)
""")


# The search box looks for a word in document text, schema/labels and extracted spans. Chinese has
# no spaces, so a word tokenizer would index a whole sentence as one token; the trigram tokenizer
# matches any substring of 3+ characters from the index (shorter ones scan the index table with
# LIKE, still correct). Triggers keep it in step with documents and results written by any process.
_BODY = ("d.text || char(10) || coalesce(d.schema, '') || char(10) || coalesce(d.task, '') || char(10) "
         "|| coalesce(d.labels, '')")
_SPANS = ("coalesce((SELECT group_concat(value, ' ') FROM json_tree(r.output) WHERE key = 'span'), '')")


@migration
def m002_document_search(conn: Connection) -> None:
    _run(conn, f"""
CREATE VIRTUAL TABLE IF NOT EXISTS document_search USING fts5(body, tokenize = 'trigram')

CREATE TRIGGER IF NOT EXISTS documents_search_insert AFTER INSERT ON documents BEGIN
    INSERT INTO document_search (rowid, body) SELECT d.id, {_BODY} FROM documents d WHERE d.id = new.id;
END

CREATE TRIGGER IF NOT EXISTS documents_search_delete AFTER DELETE ON documents BEGIN
    DELETE FROM document_search WHERE rowid = old.id;
END

CREATE TRIGGER IF NOT EXISTS results_search_insert AFTER INSERT ON results BEGIN
    DELETE FROM document_search WHERE rowid = new.document_id;
    INSERT INTO document_search (rowid, body)
        SELECT d.id, {_BODY} || char(10) || {_SPANS} FROM documents d JOIN results r ON r.document_id = d.id
        WHERE d.id = new.document_id;
END

INSERT INTO document_search (rowid, body)
    SELECT d.id, {_BODY} || char(10) || {_SPANS} FROM documents d LEFT JOIN results r ON r.document_id = d.id
    WHERE d.id NOT IN (SELECT rowid FROM document_search)
""")


# Gold examples keep their own text and output: a correction never edits the run it came from, and
# deleting that run only unlinks the example. Dataset names are unique per model.


@migration
def m003_datasets_and_training_runs(conn: Connection) -> None:
    _run(conn, """
CREATE TABLE IF NOT EXISTS datasets (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    model TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    note TEXT,
    UNIQUE (model, name)
)

CREATE TABLE IF NOT EXISTS gold_examples (
    id INTEGER PRIMARY KEY,
    dataset_id INTEGER NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,
    doc_id TEXT NOT NULL,
    text TEXT NOT NULL,
    schema TEXT,
    task TEXT,
    labels TEXT,
    output TEXT NOT NULL,
    source TEXT NOT NULL,
    run_id INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    document_id INTEGER REFERENCES documents (id) ON DELETE SET NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)

CREATE INDEX IF NOT EXISTS ix_gold_examples_dataset ON gold_examples (dataset_id, id)

CREATE INDEX IF NOT EXISTS ix_gold_examples_document ON gold_examples (document_id)

CREATE TABLE IF NOT EXISTS training_runs (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('ui', 'cli')),
    model TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'cancelling', 'completed', 'cancelled', 'failed')),
    base_weights TEXT NOT NULL,
    output_dir TEXT NOT NULL,
    train_dataset_id INTEGER REFERENCES datasets (id) ON DELETE SET NULL,
    eval_dataset_id INTEGER REFERENCES datasets (id) ON DELETE SET NULL,
    datasets TEXT NOT NULL,
    args TEXT NOT NULL,
    pid INTEGER,
    host TEXT,
    events_path TEXT,
    log_path TEXT,
    step INTEGER,
    total_steps INTEGER,
    loss TEXT,
    evaluation_before TEXT,
    evaluation_after TEXT,
    evaluation_epochs TEXT,
    error TEXT,
    started_at TEXT,
    finished_at TEXT
)

CREATE INDEX IF NOT EXISTS ix_training_runs_created_at ON training_runs (created_at)
""")


# SQLite reuses the largest rowid once the newest rows are deleted, so "run 50" named in a gold example, an
# export or a note could silently become another run. AUTOINCREMENT never hands an id out twice, and SQLite
# can add it only by rebuilding the table (its documented procedure: foreign keys off, which `migrate`
# does for its transaction; a new table; copy; drop; rename; indexes and triggers again). The table's
# current definition is rebuilt as it stands, so columns added by later code survive; the ids are kept,
# so the documents, jobs and gold examples that point at runs still do. Runs deleted before this
# migration are not known any more; ids continue after the largest one left.
_INTEGER_KEY = re.compile(r"\bid\s+INTEGER\s+PRIMARY\s+KEY\b", re.IGNORECASE)


def _rebuild_runs(conn: Connection, definition: str, rebuilt: str, must_hold: str) -> None:
    """Replace the runs table by one made from `rebuilt` (its edited CREATE statement), rows, indexes and
    triggers kept: SQLite cannot alter a column's key or a CHECK in place. `must_hold` is the text the edit
    put in; without it the old definition was not understood and nothing is changed."""
    rebuilt = re.sub(r"^CREATE TABLE\s+(\"?runs\"?)", "CREATE TABLE runs_rebuilt", rebuilt, count=1)
    if must_hold not in rebuilt or "runs_rebuilt" not in rebuilt:
        raise RuntimeError(f"cannot read the runs table's definition to rebuild it: {definition!r}")
    extras = [r[0] for r in conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'runs' AND type IN ('index', 'trigger') AND sql IS NOT NULL")]
    columns = ", ".join(f'"{r[1]}"' for r in conn.exec_driver_sql("PRAGMA table_info(runs)"))
    conn.exec_driver_sql(rebuilt)
    conn.exec_driver_sql(f"INSERT INTO runs_rebuilt ({columns}) SELECT {columns} FROM runs")
    conn.exec_driver_sql("DROP TABLE runs")
    conn.exec_driver_sql("ALTER TABLE runs_rebuilt RENAME TO runs")
    for statement in extras:
        conn.exec_driver_sql(statement)


@migration
def m004_never_reused_run_ids(conn: Connection) -> None:
    (definition,) = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'runs'").one()
    if "AUTOINCREMENT" in definition.upper():
        return
    rebuilt = _INTEGER_KEY.sub("id INTEGER PRIMARY KEY AUTOINCREMENT", definition, count=1)
    _rebuild_runs(conn, definition, rebuilt, "AUTOINCREMENT")


# Runs are written in short transactions (the header, documents in chunks, then finished_at), so that one
# huge run never holds the write lock for minutes; finished_at also orders History. Runs recorded before
# have no finish time: it is estimated as start + wall time (a batch job's pauses are not in it).
@migration
def m005_reliability(conn: Connection) -> None:
    if "finished_at" not in {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(runs)")}:
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN finished_at TEXT")
    _run(conn, """
UPDATE runs SET finished_at =
    strftime('%Y-%m-%d %H:%M:%f', created_at, printf('%+.3f seconds', wall_seconds)) || '000'
    WHERE finished_at IS NULL

CREATE INDEX IF NOT EXISTS ix_runs_finished_at ON runs (finished_at)
""")


@migration
def m006_run_stages(conn: Connection) -> None:
    """Where a run's time went (seconds per stage, device busy share) and its out-of-memory back-offs."""
    columns = {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(runs)")}
    if "stages" not in columns:
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN stages TEXT")


# The character ranges a model read (JSON [[start, end], ...]) and how many characters it left unread
# (whitespace not counted; NULL: the model does not report coverage). The count is kept beside the ranges
# so History can list and filter cut documents in SQL; a partial index holds only those.
@migration
def m007_coverage(conn: Connection) -> None:
    columns = {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(results)")}
    if "coverage" not in columns:
        conn.exec_driver_sql("ALTER TABLE results ADD COLUMN coverage TEXT")
    if "unread_chars" not in columns:
        conn.exec_driver_sql("ALTER TABLE results ADD COLUMN unread_chars INTEGER")
    conn.exec_driver_sql("CREATE INDEX IF NOT EXISTS ix_results_cut ON results (document_id) WHERE unread_chars > 0")


# Confidence thresholds tuned for one model's weights on a gold dataset; the newest row for a
# (model, weights) pair is the one later runs apply. The review queue keeps no table of its own:
# a reviewed document is one saved as a gold example (gold_examples.document_id).
@migration
def m008_thresholds_and_review(conn: Connection) -> None:
    _run(conn, """
CREATE TABLE IF NOT EXISTS thresholds (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    model TEXT NOT NULL,
    weights TEXT NOT NULL,
    weights_checksum TEXT,
    dataset_id INTEGER REFERENCES datasets (id) ON DELETE SET NULL,
    dataset_name TEXT NOT NULL,
    thresholds TEXT NOT NULL,
    tuning TEXT NOT NULL
)

CREATE INDEX IF NOT EXISTS ix_thresholds_weights ON thresholds (model, weights, id)
""")


# Runs requested through the HTTP API are recorded as source 'api' (before, they were filed as 'cli'), so
# History can tell programs from people. SQLite cannot alter a CHECK constraint: the table is rebuilt.
_SOURCE_CHECK = re.compile(r"CHECK\s*\(\s*source\s+IN\s*\(\s*'ui'\s*,\s*'batch'\s*,\s*'cli'\s*\)\s*\)", re.IGNORECASE)


@migration
def m009_api_source(conn: Connection) -> None:
    (definition,) = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'runs'").one()
    if "'api'" in definition:
        return
    _rebuild_runs(conn, definition, _SOURCE_CHECK.sub("CHECK (source IN ('ui', 'batch', 'cli', 'api'))", definition,
                                                       count=1), "'api'")


@migration
def m010_job_stages(conn: Connection) -> None:
    """A batch job's seconds per stage and out-of-memory back-offs, summed over its slices: the run it
    records carries them like any other run."""
    if "stages" not in {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(jobs)")}:
        conn.exec_driver_sql("ALTER TABLE jobs ADD COLUMN stages TEXT")


class SchemaTooNew(RuntimeError):
    pass


def _ensure_table(conn: Connection) -> None:
    conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")


def applied(engine: Engine) -> list[str]:
    with engine.begin() as conn:
        _ensure_table(conn)
        return [r[0] for r in conn.exec_driver_sql("SELECT name FROM _migrations ORDER BY rowid")]


def migrate(engine: Engine, upto: str | None = None) -> list[str]:
    """Apply pending migrations (up to and including `upto`) in one write transaction; return their names.

    The write lock makes a second process opening the store at the same time wait, then find nothing to do.
    """
    known = [m.__name__ for m in MIGRATIONS]
    if upto is not None and upto not in known:
        raise ValueError(f"unknown migration {upto!r}")
    ran: list[str] = []
    with engine.connect() as outer:
        # A table rebuild must not cascade the old table's deletion into its children, so foreign keys are
        # off while migrating (SQLite ignores the pragma inside a transaction: it is set before BEGIN) and
        # checked before the commit instead.
        raw = outer.connection.dbapi_connection
        raw.execute("PRAGMA foreign_keys=OFF")
        try:
            with outer.execution_options(**WRITE).begin():
                conn = outer
                _ensure_table(conn)
                done = {r[0] for r in conn.exec_driver_sql("SELECT name FROM _migrations")}
                newer = done - set(known)
                if newer:
                    raise SchemaTooNew(f"the database has migrations this version does not know "
                                       f"({', '.join(sorted(newer))}); it was written by a newer IE Workstation — "
                                       "upgrade, or point [storage] database in settings.toml at another file")
                for fn in MIGRATIONS:
                    if fn.__name__ not in done:
                        fn(conn)
                        conn.execute(text("INSERT INTO _migrations (name, applied_at) VALUES (:n, :t)"),
                                     {"n": fn.__name__, "t": datetime.now(timezone.utc).isoformat(timespec="seconds")})
                        ran.append(fn.__name__)
                    if fn.__name__ == upto:
                        break
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"migrating would break {len(broken)} foreign key(s), e.g. {broken[0]}; "
                                       "nothing was changed")
        finally:
            raw.execute("PRAGMA foreign_keys=ON")
    return ran


HEAD = MIGRATIONS[-1].__name__
