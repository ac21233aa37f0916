"""What Ray runs for a corpus job, free of Ray itself: shards into document rows, document rows into results.

`parse_shards` reads a shard's bytes with the CLI's parser (workstation/inputs.py); `ExtractionWorker` loads
the model once and runs each batch through engine.run, the CLI's run path (each document checked once, the
optimizations and the dtype rule set). A line or document that fails becomes a row with its reason in
`error`; it never fails the job.
"""
from __future__ import annotations

import io
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from contracts.domain import Document, InputError
from workstation.corpus.layout import DOCUMENT_SCHEMA, EMPTY, RESULT_SCHEMA

Report = Callable[..., None]


def parse_shards(batch: dict[str, Any], keys: dict[str, str], default: Any, done: dict[str, list[int]],
                 report: Report | None = None) -> pa.Table:
    """Files (`bytes`, `path` columns, as ray.data.read_binary_files gives them) -> document rows, in line
    order, without the lines already staged by an earlier run (`done`, by shard key)."""
    from workstation.inputs import parse_documents
    rows: list[dict] = []
    for data, path in zip(batch["bytes"], batch["path"]):
        key = keys[_local(path)]
        try:
            docs, errors = parse_documents(io.BytesIO(data), Path(path).suffix, path, default, skip_invalid=True)
            entries = [_document_row(key, d) for d in docs] + [_error_row(key, e.line, str(e)) for e in errors]
        except InputError as e:                          # the whole file: not UTF-8, no text column, ...
            entries = [_error_row(key, 0, str(e))]
        except Exception as e:                           # noqa: BLE001 - e.g. csv.Error: one error row, not a failed job
            entries = [_error_row(key, 0, f"{path} could not be read ({type(e).__name__}: {e})")]
        if not entries:                                  # an empty file: one marker row, so it completes too
            entries = [_error_row(key, EMPTY, None)]
        for entry in entries:
            entry["total"] = len(entries)
        if report is not None:
            report("parsed", key, sum(1 for e in entries if e["line"] != EMPTY))
        skip = set(done.get(key, ()))
        rows.extend(sorted((e for e in entries if e["line"] not in skip), key=lambda e: e["line"]))
    return pa.Table.from_pylist(rows, schema=DOCUMENT_SCHEMA)


def _local(path: str) -> str:
    return str(Path(path).resolve())


def _document_row(key: str, d: Document) -> dict:
    for name in ("text", "task"):                  # the model's checks come later; Arrow needs strings now
        value = getattr(d, name)
        if value is not None and not isinstance(value, str):
            return _error_row(key, d.line, str(InputError(f"\"{name}\" must be a string, got {type(value).__name__}",
                                                          d.line)))
    return {"shard": key, "line": d.line, "id": d.id, "text": d.text,
            "schema": None if d.schema is None else json.dumps(d.schema, ensure_ascii=False),
            "task": d.task, "labels": None if d.labels is None else json.dumps(d.labels, ensure_ascii=False),
            "error": None}


def _error_row(key: str, line: int | None, message: str | None) -> dict:
    return {"shard": key, "line": line if line is not None else 0, "id": None, "text": None, "schema": None, "task": None,
            "labels": None, "error": message}


class ExtractionWorker:
    """One model per worker (a GPU, a fraction of one, or the CPUs), loaded once, for every batch it is given."""

    def __init__(self, job: dict, report: Report | None = None):
        from workstation import engine  # imported here: the parsing tasks need no torch
        self.engine = engine
        self.job, self.report = job, report
        self.config = worker_config(job)
        # Loaded in fp32: engine.run sets the job's optimizations and dtype (a change only at the first batch).
        self.model = engine.load_model(job["model"], self.config.weights, self.config.device, "fp32")
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        rows = batch.to_pylist()
        out: list[dict | None] = [None] * len(rows)
        documents, where = [], []
        for i, row in enumerate(rows):
            if row["error"] is not None or row["line"] == EMPTY:
                out[i] = _result_row(row, error=row["error"])
                continue
            documents.append(Document(row["id"], row["text"], _json(row["schema"]), row["task"],
                                      _json(row["labels"]), row["line"]))
            where.append(i)
        for i, (result, error) in zip(where, self.extract(documents)):
            out[i] = _result_row(rows[i], error=error) if error else _result_row(
                rows[i], output=result.to_json_text(), warnings=result.warnings)
        if self.report is not None:
            self.report("batch", self.name, self.model.device, sum(1 for r in rows if r["line"] != EMPTY),
                        sum(1 for r in out if r["error"] is not None), time.perf_counter() - started)
        return pa.Table.from_pylist(out, schema=RESULT_SCHEMA)

    def extract(self, documents: list[Document]) -> list[tuple[Any, str | None]]:
        """(Result, None) or (None, why) per document. The batch runs as one (OOM halves it inside the model,
        contracts/batching.py); if it fails anyway, each document runs alone so only the bad one fails."""
        if not documents:
            return []
        try:
            return self._run(documents)
        except Exception as e:               # noqa: BLE001 - narrowed to the document below
            if len(documents) == 1:
                return [(None, f"{type(e).__name__}: {e}")]
        return [pair for doc in documents for pair in self.extract([doc])]

    def _run(self, documents: list[Document]) -> list[tuple[Any, str | None]]:
        """One engine.run: a document that fails its checks is its own error, the others run."""
        outcome: dict[int, tuple[Any, str | None]] = {}
        self.engine.run(self.model, documents, self.config, keep_results=False,
                        on_invalid=lambda doc, e: outcome.__setitem__(id(doc), (None, str(e))),
                        on_result=lambda doc, result: outcome.__setitem__(id(doc), (result, None)))
        return [outcome[id(doc)] for doc in documents]


def worker_config(job: dict):
    """The run configuration the driver resolved (CorpusJob.of), on this worker's device. Built from plain
    values: the job crosses to the workers as a dict."""
    from workstation.run_config import MAX_TUPLES, RunConfig
    return RunConfig(job["model"], Path(job["weights"]), job["device"], job["dtype"], job["optimizations"],
                     job["options"], job["batch_size"], job.get("only_applicable", False), job["configured_dtype"],
                     max_tuples=job.get("max_tuples", MAX_TUPLES))


def _json(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _result_row(row: dict, output: str | None = None, warnings: list[str] | None = None,
                error: str | None = None) -> dict:
    return {"shard": row["shard"], "line": row["line"], "total": row["total"], "id": row["id"],
            "output": output, "warnings": list(warnings or []), "error": error}
