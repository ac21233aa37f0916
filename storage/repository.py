"""The store: what the UI, the CLI and the batch worker ask of the run history, the job queue, the gold
datasets and the fine-tuning runs.

Every method opens and closes its own session and returns plain dataclasses (`storage.views`), so a
Streamlit rerun or a worker thread never holds a session or an ORM object. Every query is a SQLAlchemy
expression with bound parameters. The job methods live in `storage.jobs_queue`, the gold datasets in
`storage.datasets`, the fine-tuning runs in `storage.training`, confidence thresholds in `storage.thresholds`.

A finished run is recorded with ``record_run(report, documents, source, task)`` (or `record_cli_run`,
which also closes the store); a run too long to hold is recorded as it goes with `run_writer` (the CLI).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from sqlalchemy import bindparam, case, delete, func, insert, inspect, or_, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, selectinload, sessionmaker

from contracts.domain import Document, Result
from storage import migrations
from storage.database import BUSY_TIMEOUT_MS, WRITE, create_sqlite_engine, is_busy
from storage.datasets import GoldDatasets
from storage.jobs_queue import JobQueue
from storage.records import (
    SOURCES,
    check_results,
    document_record,
    document_values,
    run_header,
    run_summary,
    run_values,
    stored_document,
    stored_result,
    table_row,
    weights_checksum,
    written_chars,
)
from storage.run_documents import (
    DocumentFilter,
    DocumentHit,
    DocumentPage,
    DocumentRow,
    RunDocuments,
    documents_matching,
    like_pattern,
)
from storage.tables import DocumentRecord, JobRecord, ResultRecord, RunRecord, utcnow
from storage.thresholds import SavedThresholds, ThresholdSettings
from storage.training import TrainingLog
from storage.views import (
    CutDocument,
    Dataset,
    GoldExample,
    JobStatus,
    NotFound,
    RunDetail,
    RunSummary,
    StoreBusy,
    TrainingRun,
)

if TYPE_CHECKING:
    from contracts.report import RunReport

log = logging.getLogger(__name__)

# record_runs' reads, built once: under the write lock, AUTOINCREMENT hands out ids above every earlier one in
# insertion order, so a group's runs are those above the largest id before it, in the order they went in.
LAST_RUN_ID = select(func.max(RunRecord.id))
RUNS_AFTER = select(RunRecord.id).where(RunRecord.id > bindparam("before")).order_by(RunRecord.id)
DOCUMENTS_OF_RUNS = (select(DocumentRecord.id, DocumentRecord.run_id, DocumentRecord.position)
                     .where(DocumentRecord.run_id.in_(bindparam("runs", expanding=True))))

__all__ = ["Store", "open_store", "record_cli_run", "RunSummary", "RunDetail", "JobStatus", "NotFound",
           "StoreBusy", "SOURCES", "weights_checksum", "Dataset", "GoldExample", "TrainingRun", "SavedThresholds",
           "CutDocument", "DocumentFilter", "DocumentHit", "DocumentPage", "DocumentRow"]


class Store(JobQueue, GoldDatasets, TrainingLog, ThresholdSettings, RunDocuments):
    """busy_timeout_ms: how long SQLite waits for another process's write lock, per attempt;
    retry_delays: the pauses between attempts. After the last one a call raises StoreBusy (nothing written)."""

    BUSY_TIMEOUT_MS = BUSY_TIMEOUT_MS
    RETRY_DELAYS = (0.5, 1.0, 2.0)
    CHUNK_CHARS = 2_000_000              # text and spans written per transaction when recording a run
    CHUNK_DOCUMENTS = 500

    def __init__(self, path: str | Path, migrate: bool = True, busy_timeout_ms: int | None = None,
                 retry_delays: Sequence[float] | None = None):
        self.path = Path(path)
        timeout_ms = self.BUSY_TIMEOUT_MS if busy_timeout_ms is None else busy_timeout_ms
        self.engine = create_sqlite_engine(self.path, timeout_ms)
        self.retry_delays = tuple(self.RETRY_DELAYS if retry_delays is None else retry_delays)
        if migrate:
            with _busy_as_store_busy(self.path):
                migrations.migrate(self.engine)
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = sessionmaker(self.engine.execution_options(**WRITE), expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with _busy_as_store_busy(self.path), self._reader() as session:
            yield session

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """A write transaction that holds the write lock from its start (BEGIN IMMEDIATE). Taking the lock
        is retried with pauses; the transaction itself should be short (see record_run)."""
        session = self._locked_session()
        try:
            with _busy_as_store_busy(self.path):
                yield session
                session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def _locked_session(self) -> Session:
        for attempt, delay in enumerate((*self.retry_delays, None)):
            session = self._writer()
            try:
                session.begin()
                session.connection()                 # emits BEGIN IMMEDIATE: waits busy_timeout for the lock
                return session
            except OperationalError as e:
                session.close()
                if not is_busy(e):
                    raise
                if delay is None:
                    raise StoreBusy(_busy_message(self.path)) from None
                log.warning("%s is locked by another process; retrying in %.1f s", self.path, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def schema_version(self) -> list[str]:
        return migrations.applied(self.engine)

    def record_run(self, report: RunReport, documents: list[Document], source: str, task: str | None = None,
                   settings_snapshot: dict | None = None, label: str | None = None, note: str | None = None) -> int:
        """Store a finished run: its settings and measurements, every document and its result. Written in
        short transactions (the run, its documents in chunks, then its finish time), so other processes
        are never locked out for long; History lists it once the last one commits. A failure part-way
        removes what was written."""
        check_results(report, documents)
        writer = self.run_writer(source, task, label, note)
        writer.start(report, settings_snapshot)
        try:
            for doc, result in zip(documents, report.results):
                writer.add(doc, result)
            return writer.finish(report, settings_snapshot)
        except BaseException:
            writer.abandon()
            raise

    def run_writer(self, source: str, task: str | None = None, label: str | None = None,
                   note: str | None = None) -> RunWriter:
        """Record a run as it goes (see RunWriter): what a run too long to hold in memory uses."""
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
        return RunWriter(self, source, task, label, note)

    def record_runs(self, runs: Sequence[tuple[RunReport, list[Document], str, dict | None]]) -> list[int]:
        """Store several small finished runs — (report, documents, source, settings snapshot) each — in ONE
        write transaction (a group commit: the HTTP API records every request of a pass at once). All or
        nothing, and each run is listed once it commits. Runs too large for one transaction are written by
        `record_run`, one after the other."""
        for report, documents, _, _ in runs:
            check_results(report, documents)
        chars = sum(len(d.text) for _, documents, _, _ in runs for d in documents)
        if chars > self.CHUNK_CHARS or sum(len(documents) for _, documents, _, _ in runs) > self.CHUNK_DOCUMENTS:
            return [self.record_run(report, documents, source, settings_snapshot=snapshot)
                    for report, documents, source, snapshot in runs]
        # Three INSERTs of plain rows (Core, executemany) for the whole group, not ORM objects: an API server writes
        # one run per request, and the ORM's unit of work, then its bulk INSERT, each cost more per one-document
        # run than the tiny model's pass did. Every row of a table has the same keys, so each is one statement.
        checksums: dict[str, str | None] = {}
        headers = [table_row(RunRecord, run_values(report, len(documents), source, None, snapshot, checksums=checksums))
                   for report, documents, source, snapshot in runs]
        with self._write() as s:
            finished = utcnow()
            for header in headers:
                header["finished_at"] = finished
            # Core statements on the session's connection (BEGIN IMMEDIATE already taken): Session.execute would add
            # its ORM dispatch to each.
            c = s.connection()
            before = c.scalar(LAST_RUN_ID) or 0
            c.execute(insert(RunRecord.__table__), headers)
            ids = list(c.scalars(RUNS_AFTER, {"before": before}))
            rows = [document_values(run_id, position, doc, result) for run_id, (report, documents, _, _)
                    in zip(ids, runs) for position, (doc, result) in enumerate(zip(documents, report.results))]
            if rows:
                c.execute(insert(DocumentRecord.__table__), [table_row(DocumentRecord, d) for d, _ in rows])
                document_ids = {(run_id, position): document_id for document_id, run_id, position in c.execute(
                    DOCUMENTS_OF_RUNS, {"runs": ids})}
                c.execute(insert(ResultRecord.__table__), [
                    table_row(ResultRecord, {**r, "document_id": document_ids[(d["run_id"], d["position"])]})
                    for d, r in rows])
        return ids

    def search_runs(self, text: str | None = None, model: str | None = None, task: str | None = None,
                    since: datetime | None = None, until: datetime | None = None, limit: int = 100,
                    offset: int = 0, source: str | None = None, cut: bool = False) -> list[RunSummary]:
        """Latest finished first. `text`: every whitespace-separated term must occur in one of the run's documents
        (text, schema, labels or an extracted span), or in the run's label or note. `cut`: only runs with
        a document the model read partly."""
        query = (select(RunRecord).where(*_run_filters(text, model, task, since, until, source, cut))
                 .order_by(RunRecord.finished_at.desc(), RunRecord.id.desc()).limit(limit).offset(offset))
        with self._read() as s:
            runs = list(s.scalars(query))
            cuts = _cut_counts(s, [r.id for r in runs])
            return [run_summary(r, cuts.get(r.id)) for r in runs]

    def count_runs(self, text: str | None = None, model: str | None = None, task: str | None = None,
                   since: datetime | None = None, until: datetime | None = None, source: str | None = None,
                   cut: bool = False) -> int:
        query = select(func.count(RunRecord.id)).where(*_run_filters(text, model, task, since, until, source, cut))
        with self._read() as s:
            return s.scalar(query) or 0

    def cut_documents(self, run_ids: list[int] | None = None, limit: int = 1_000) -> list[CutDocument]:
        """Documents a model read only partly (newest runs first), of the given runs or of all."""
        query = (select(DocumentRecord.run_id, DocumentRecord.position, DocumentRecord.doc_id, RunRecord.model,
                        func.length(DocumentRecord.text), ResultRecord.unread_chars)
                 .join(ResultRecord, ResultRecord.document_id == DocumentRecord.id)
                 .join(RunRecord, RunRecord.id == DocumentRecord.run_id)
                 .where(ResultRecord.unread_chars > 0)
                 .order_by(RunRecord.created_at.desc(), RunRecord.id.desc(), DocumentRecord.position).limit(limit))
        if run_ids is not None:
            query = query.where(DocumentRecord.run_id.in_(run_ids))
        with self._read() as s:
            return [CutDocument(*row) for row in s.execute(query)]

    def run_filters(self) -> dict[str, list[str]]:
        """Distinct models, tasks and sources, for the history page's filter boxes."""
        with self._read() as s:
            return {name: [v for v in s.scalars(select(col).where(RunRecord.finished_at.is_not(None))
                                                 .distinct().order_by(col)) if v is not None]
                    for name, col in (("model", RunRecord.model), ("task", RunRecord.task),
                                      ("source", RunRecord.source))}

    def get_run(self, run_id: int) -> RunDetail:
        query = (select(RunRecord).where(RunRecord.id == run_id)
                 .options(selectinload(RunRecord.documents).selectinload(DocumentRecord.result)))
        with self._read() as s:
            run = s.scalar(query)
            if run is None:
                raise NotFound(f"run {run_id} is not in the history (deleted?)")
            return RunDetail(run_summary(run, _cut_counts(s, [run.id]).get(run.id)), run.settings,
                             [(stored_document(d), stored_result(d)) for d in run.documents])

    def run_header(self, run_id: int) -> RunDetail:
        """The run's summary and settings without its documents (no items): what a page needs to show one
        document of a large run (`run_document`) without loading the others."""
        with self._read() as s:
            run = s.get(RunRecord, run_id)
            if run is None:
                raise NotFound(f"run {run_id} is not in the history (deleted?)")
            return RunDetail(run_summary(run, _cut_counts(s, [run.id]).get(run.id)), run.settings, [])

    def input_names(self, run_ids: list[int]) -> dict[int, str]:
        """run id -> the name of the file its batch job read (the upload's name or the path), for runs
        recorded by a batch job."""
        if not run_ids:
            return {}
        query = select(JobRecord.run_id, JobRecord.source_name).where(JobRecord.run_id.in_(run_ids))
        with self._read() as s:
            return {run_id: name for run_id, name in s.execute(query)}

    def update_run(self, run_id: int, label: str | None = None, note: str | None = None) -> None:
        """Set the run's label and note (None clears them)."""
        with self._write() as s:
            run = s.get(RunRecord, run_id)
            if run is None:
                raise NotFound(f"run {run_id} is not in the history (deleted?)")
            run.label, run.note = label, note

    def delete_run(self, run_id: int) -> bool:
        """Documents, results and their search entries go with it (foreign-key cascade and a trigger)."""
        with self._write() as s:
            return s.execute(delete(RunRecord).where(RunRecord.id == run_id)).rowcount > 0


def _busy_message(path: Path) -> str:
    return (f"The history database ({path}) is busy: another process (a batch job, a fine-tune or the command "
            "line) is writing to it. Nothing was lost; try again in a moment.")


class RunWriter:
    """A run recorded while it runs: `start` writes its row (hidden from History: no finish time yet), `add`
    keeps each document and result, written in short transactions of about CHUNK_CHARS, and `finish` writes
    the rest with the run's measurements and makes it visible. `abandon` removes what was written. Nothing
    but one chunk is held, so a run of any length is recorded in bounded memory."""

    def __init__(self, store: Store, source: str, task: str | None, label: str | None, note: str | None):
        self.store, self.source, self.task, self.label, self.note = store, source, task, label, note
        self.run_id: int | None = None
        self.written = 0
        self._chunk: list[DocumentRecord] = []
        self._chars = 0

    def start(self, report: RunReport, settings_snapshot: dict | None = None) -> int:
        with self.store._write() as s:
            run = run_header(report, 0, self.source, self.task, settings_snapshot, self.label, self.note)
            s.add(run)
            s.flush()
            self.run_id = run.id
        return self.run_id

    def add(self, doc: Document, result: Result) -> None:
        if self.run_id is None:
            raise RuntimeError("RunWriter.add before start")
        record = document_record(self.run_id, self.written, doc, result)
        self._chunk.append(record)
        self.written += 1
        self._chars += written_chars(record)        # from the record: the output's text is written once
        if self._chars >= self.store.CHUNK_CHARS or len(self._chunk) >= self.store.CHUNK_DOCUMENTS:
            self._flush()

    def finish(self, report: RunReport, settings_snapshot: dict | None = None) -> int:
        """The last documents, the run's final settings and measurements, and its finish time: now History lists it."""
        self._flush()
        final = run_header(report, self.written, self.source, self.task, settings_snapshot, self.label, self.note)
        values = {a.key: getattr(final, a.key) for a in inspect(RunRecord).column_attrs
                  if a.key not in ("id", "created_at", "finished_at")}
        with self.store._write() as s:
            s.execute(update(RunRecord).where(RunRecord.id == self.run_id).values(**values, finished_at=utcnow()))
        return self.run_id

    def abandon(self) -> None:
        self._chunk, self._chars = [], 0
        if self.run_id is not None:
            try:
                self.store.delete_run(self.run_id)
            except Exception:                # noqa: BLE001 - the original error matters; an unfinished run stays hidden
                log.warning("could not remove the partly written run %s", self.run_id, exc_info=True)
            self.run_id = None

    def _flush(self) -> None:
        if self._chunk:
            with self.store._write() as s:
                s.add_all(self._chunk)
            self._chunk, self._chars = [], 0


@contextmanager
def _busy_as_store_busy(path: Path) -> Iterator[None]:
    try:
        yield
    except OperationalError as e:
        if is_busy(e):
            raise StoreBusy(_busy_message(path)) from None
        raise


def open_store(db_path: str | Path) -> Store:
    """Open the history (creating its folder and file as needed) and bring the schema to head."""
    return Store(Path(db_path).expanduser())


def record_cli_run(report: RunReport, documents: list[Document], db_path: str | Path, task: str | None = None,
                   settings_snapshot: dict | None = None) -> int:
    store = open_store(db_path)
    try:
        return store.record_run(report, documents, "cli", task, settings_snapshot)
    finally:
        store.close()


def _runs_with_documents_matching(term: str):
    return select(DocumentRecord.run_id).where(DocumentRecord.id.in_(documents_matching(term)))


def _cut_counts(session: Session, run_ids: list[int]) -> dict[int, int]:
    """run id -> documents read partly, for runs whose model reports coverage (others are left out)."""
    if not run_ids:
        return {}
    query = (select(DocumentRecord.run_id, func.count(ResultRecord.unread_chars),
                    func.sum(case((ResultRecord.unread_chars > 0, 1), else_=0)))
             .join(ResultRecord, ResultRecord.document_id == DocumentRecord.id)
             .where(DocumentRecord.run_id.in_(run_ids)).group_by(DocumentRecord.run_id))
    return {run_id: int(cut or 0) for run_id, reported, cut in session.execute(query) if reported}


def _run_filters(text, model, task, since, until, source, cut=False) -> list:
    conditions: list = [RunRecord.finished_at.is_not(None)]         # a run still being written is not listed
    if cut:
        conditions.append(RunRecord.id.in_(
            select(DocumentRecord.run_id).join(ResultRecord, ResultRecord.document_id == DocumentRecord.id)
            .where(ResultRecord.unread_chars > 0)))
    if model:
        conditions.append(RunRecord.model == model)
    if task:
        conditions.append(RunRecord.task == task)
    if source:
        conditions.append(RunRecord.source == source)
    if since is not None:
        conditions.append(RunRecord.created_at >= since)
    if until is not None:
        conditions.append(RunRecord.created_at <= until)
    for term in (text or "").split():
        pattern = like_pattern(term)
        conditions.append(or_(RunRecord.id.in_(_runs_with_documents_matching(term)),
                              RunRecord.label.like(pattern, escape="\\"), RunRecord.note.like(pattern, escape="\\")))
    return conditions
