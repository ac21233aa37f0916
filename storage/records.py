"""Between the domain (Document, Result, RunReport) and the table rows, both ways."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import inspect as sa_inspect

from contracts.domain import Document, Result, unread_chars
from contracts.words import plural
from storage.database import JsonText
from storage.tables import (
    DatasetRecord,
    DocumentRecord,
    GoldExampleRecord,
    JobRecord,
    ResultRecord,
    RunRecord,
    TrainingRunRecord,
    utcnow,
)
from storage.views import Dataset, GoldExample, JobStatus, RunSummary, TrainingRun

if TYPE_CHECKING:
    from contracts.report import RunReport

SOURCES = ("ui", "batch", "cli", "api")
WEIGHT_SUFFIXES = {".bin", ".safetensors", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf"}
_HASHED_BYTES_LIMIT = 8 << 20


def weights_checksum(weights: str | Path) -> str | None:
    """Identify the checkpoint a run used, fast enough to compute on every run.

    Hashing a gigabyte of weights would add seconds to each run, so weight files contribute their
    name, size and mtime, while config and vocabulary files (small, and what tells look-alike
    checkpoints apart) contribute their bytes. A replaced checkpoint never keeps the old checksum;
    a mere copy gets a new one (new mtime), which errs on the side of "maybe different".
    """
    path = Path(weights)
    if not str(weights) or not path.exists():
        return None
    files = sorted(f for f in path.iterdir() if f.is_file()) if path.is_dir() else [path]
    digest = sha256()
    for f in files:
        stat = f.stat()
        digest.update(f.name.encode() + b"\0")
        if f.suffix in WEIGHT_SUFFIXES or stat.st_size > _HASHED_BYTES_LIMIT:
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
        else:
            digest.update(f.read_bytes())
    return digest.hexdigest()


def check_results(report: RunReport, documents: Sequence[Document]) -> None:
    """A report's results pair with the documents, in order."""
    results = report.results
    if len(results) != len(documents):
        raise ValueError(f"the report has {plural(len(results), 'result')} for {plural(len(documents), 'document')}; "
                         "run the engine with keep_results=True to record a run")
    for doc, result in zip(documents, results):
        if str(result.document_id) != str(doc.id):
            raise ValueError(f"the result for {result.document_id!r} is paired with document {doc.id!r}: "
                             "results must be in document order")


def run_header(report: RunReport, documents: int, source: str, task: str | None, settings: dict | None,
               label: str | None = None, note: str | None = None) -> RunRecord:
    """The run's own row, without its documents and unfinished (finished_at NULL) until they are all written."""
    return RunRecord(**run_values(report, documents, source, task, settings, label, note))


def run_values(report: RunReport, documents: int, source: str, task: str | None, settings: dict | None,
               label: str | None = None, note: str | None = None,
               checksums: dict[str, str | None] | None = None) -> dict[str, Any]:
    """run_header's values by attribute, every column but the id: one row of a bulk INSERT (record_runs).
    `checksums`: weights -> checksum already computed for runs written together (one look at the files each)."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    wall = float(report.wall_seconds)
    weights = str(report.weights)
    checksums = {} if checksums is None else checksums
    if weights not in checksums:
        checksums[weights] = weights_checksum(weights)
    return dict(
        created_at=_parse_time(report.started_at), source=source, model=report.model, task=task,
        weights=weights, weights_checksum=checksums[weights], demo=bool(report.demo),
        device=report.device, dtype=report.dtype, attention=report.attention,
        optimizations=dict(report.optimizations), batch_size=int(report.batch_size), options=dict(report.options),
        settings=_with_thresholds(settings, report), documents_count=documents, wall_seconds=wall,
        docs_per_second=documents / wall if wall > 0 else None, tokens=int(report.tokens),
        peak_memory_bytes=report.peak_memory_bytes, label=label, note=note, finished_at=None,
        stages=run_stages(report))


def document_record(run_id: int, position: int, doc: Document, result: Result) -> DocumentRecord:
    document, result_values = document_values(run_id, position, doc, result)
    record = DocumentRecord(**document)
    record.result = ResultRecord(**result_values)
    return record


def document_values(run_id: int, position: int, doc: Document, result: Result) -> tuple[dict, dict]:
    """A document's row and its result's (without the document's id, not known before it is inserted), by
    attribute: what document_record builds, as rows of bulk INSERTs."""
    coverage = [list(r) for r in result.coverage] if result.coverage is not None else None
    return ({"run_id": run_id, "position": position, "doc_id": str(doc.id), "text": doc.text, "schema": doc.schema,
             "task": doc.task, "labels": doc.labels},
            {"output": JsonText(result.output_json_text()), "raw": result.raw, "warnings": list(result.warnings),
             "coverage": coverage, "unread_chars": unread_chars(doc.text, result.coverage)})


def table_row(record_class, values: dict[str, Any]) -> dict[str, Any]:
    """Values by attribute -> by column name, for a Core INSERT into the record's table (the ORM's bulk INSERT
    cost an API server more per one-document run than the rows themselves: docs/benchmarks.md)."""
    names = _column_names(record_class)
    return {names[k]: v for k, v in values.items()}


@cache
def _column_names(record_class) -> dict[str, str]:
    return {a.key: a.columns[0].name for a in sa_inspect(record_class).column_attrs}


def written_chars(record: DocumentRecord) -> int:
    """About how much a document and its result add to a write transaction."""
    return len(record.text) + len(record.result.output)


def run_stages(report: RunReport) -> dict | None:
    """Where the run's time went (contracts/stages.py); None for a report that measured no stages."""
    if not getattr(report, "stages", None):
        return None
    stages = {"seconds": dict(report.stages), "device_busy": report.device_busy, "backoffs": list(report.backoffs)}
    if getattr(report, "first_after_load", False):    # it paid the model's one-time warm-up (engine.run)
        stages["first_after_load"] = True
    return stages


def _with_thresholds(settings: dict | None, report: RunReport) -> dict | None:
    # The confidence thresholds a run applied are part of how it was made: kept in its settings snapshot.
    thresholds = getattr(report, "thresholds", None)
    return {**(settings or {}), "thresholds": dict(thresholds)} if thresholds else settings


def _parse_time(value: str | datetime | None) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value) if value else utcnow()
    except ValueError:
        return utcnow()


def run_summary(r: RunRecord, cut_documents: int | None = None) -> RunSummary:
    return RunSummary(r.id, r.created_at, r.source, r.model, r.task, r.weights, r.weights_checksum, r.demo, r.device,
                      r.dtype, r.attention, dict(r.optimizations or {}), r.batch_size, dict(r.options or {}),
                      r.documents_count, r.wall_seconds, r.docs_per_second, r.tokens, r.peak_memory_bytes,
                      r.label, r.note, dict(r.stages or {}), cut_documents, r.finished_at)


def stored_document(d: DocumentRecord) -> Document:
    return Document(d.doc_id, d.text, d.schema, d.task, d.labels)


def stored_result(d: DocumentRecord) -> Result:
    r = d.result
    if r is None:                     # only a writer bypassing the store could leave a document without one
        return Result(d.doc_id, warnings=["no result was stored for this document"])
    return Result.from_json({"id": d.doc_id, "output": r.output, "raw": r.raw, "warnings": r.warnings,
                             "coverage": r.coverage})


def document_to_json(d: Document) -> dict[str, Any]:
    return {"id": str(d.id), "text": d.text, "schema": d.schema, "task": d.task, "labels": d.labels, "line": d.line}


def document_from_json(j: dict[str, Any]) -> Document:
    return Document(str(j["id"]), j["text"], j.get("schema"), j.get("task"), j.get("labels"), j.get("line"))


def job_status(j: JobRecord) -> JobStatus:
    return JobStatus(j.id, j.status, j.source_name, j.model, j.weights, j.device, j.dtype, j.task, j.batch_size,
                     list(j.optimizations or []), dict(j.options or {}), j.total, j.done, j.docs_per_second,
                     j.wall_seconds, j.error, j.owner, j.created_at, j.updated_at, j.started_at, j.heartbeat_at,
                     j.finished_at, j.run_id, dict(j.stages or {}))


def dataset_view(d: DatasetRecord, examples: int) -> Dataset:
    return Dataset(d.id, d.name, d.model, examples, d.created_at, d.updated_at, d.note)


def gold_example_view(g: GoldExampleRecord) -> GoldExample:
    return GoldExample(g.id, g.dataset_id, g.doc_id, g.text, g.schema, g.task, g.labels, list(g.output), g.source,
                       g.run_id, g.document_id, g.created_at, g.updated_at)


def training_run_view(t: TrainingRunRecord) -> TrainingRun:
    return TrainingRun(t.id, t.created_at, t.updated_at, t.source, t.model, t.status, t.base_weights, t.output_dir,
                       t.train_dataset_id, t.eval_dataset_id, dict(t.datasets or {}), list(t.args or []), t.pid,
                       t.host, t.events_path, t.log_path, t.step, t.total_steps, list(t.loss or []),
                       t.evaluation_before, t.evaluation_after, list(t.evaluation_epochs or []), t.error,
                       t.started_at, t.finished_at)
