"""What the store hands out: plain dataclasses, so the UI never holds a session or an ORM object."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.domain import Document
from contracts.runs import RunDetail, RunSummary  # noqa: F401  (the store hands these out)


class NotFound(LookupError):
    """A run or job id that is not (or no longer) in the database."""


class StoreBusy(RuntimeError):
    """Another process held the database's write lock for longer than the store waits (retries included).
    Nothing was written by the call that raised it; trying again later is safe."""


@dataclass(frozen=True)
class CutDocument:
    """A document a model read only partly."""

    run_id: int
    position: int
    doc_id: str
    model: str
    characters: int                  # the length of the text
    unread: int                      # characters not read (whitespace not counted)


JOB_STATUSES = ("queued", "running", "cancelled", "done", "failed")
UNFINISHED = ("queued", "running")
CORPUS_OUTPUT = "corpus_output"          # the options key that marks a corpus job


@dataclass(frozen=True)
class JobStatus:
    id: int
    status: str                      # queued | running | cancelled | done | failed
    source_name: str
    model: str
    weights: str
    device: str
    dtype: str
    task: str | None
    batch_size: int
    optimizations: list[str]
    options: dict[str, Any]
    total: int
    done: int
    docs_per_second: float | None
    wall_seconds: float
    error: str | None
    owner: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    run_id: int | None               # the Run recorded when the job finished
    stages: dict[str, Any] = field(default_factory=dict)   # {"seconds": {stage: s}, "backoffs": [...]}

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    @property
    def finished(self) -> bool:
        return self.status not in UNFINISHED

    @property
    def corpus_output(self) -> str | None:
        """A corpus job (`launcher.py corpus`): the directory its results go to. Such a job has no items;
        the corpus command runs and resumes it, never the JobRunner."""
        return self.options.get(CORPUS_OUTPUT)


@dataclass(frozen=True)
class Dataset:
    id: int
    name: str
    model: str
    examples: int
    created_at: datetime
    updated_at: datetime
    note: str | None = None


@dataclass(frozen=True)
class GoldExample:
    id: int
    dataset_id: int
    doc_id: str
    text: str
    schema: dict[str, Any] | None
    task: str | None
    labels: list[str] | None
    output: list[list[dict[str, Any]]]     # [[{"type", "span", "offset": [start, end] | None}, ...], ...]
    source: str                            # 'history' | 'jsonl' | 'label-studio' | 'doccano'
    run_id: int | None                     # the run and stored document it was corrected from, if any
    document_id: int | None
    created_at: datetime
    updated_at: datetime

    def document(self) -> Document:
        return Document(self.doc_id, self.text, self.schema, self.task, self.labels)

    def gold_line(self) -> dict[str, Any]:
        """The line `launcher.py finetune --train` reads: {id, text, schema, output} or {id, text, task, labels, output}."""
        line: dict[str, Any] = {"id": self.doc_id, "text": self.text}
        if self.schema is not None:
            line["schema"] = self.schema
        if self.task is not None or self.labels is not None:
            line["task"], line["labels"] = self.task, self.labels
        line["output"] = self.output
        return line


TRAINING_STATUSES = ("running", "cancelling", "completed", "cancelled", "failed")
TRAINING_UNFINISHED = ("running", "cancelling")


@dataclass(frozen=True)
class TrainingRun:
    id: int
    created_at: datetime
    updated_at: datetime
    source: str                            # 'ui' | 'cli'
    model: str
    status: str                            # running | cancelling | completed | cancelled | failed
    base_weights: str
    output_dir: str
    train_dataset_id: int | None
    eval_dataset_id: int | None
    datasets: dict[str, Any]
    args: list[str]
    pid: int | None
    host: str | None
    events_path: str | None
    log_path: str | None
    step: int | None
    total_steps: int | None
    loss: list[list[float]]                # [[step, loss], ...]
    evaluation_before: dict[str, Any] | None
    evaluation_after: dict[str, Any] | None
    evaluation_epochs: list[dict[str, Any]]
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.status not in TRAINING_UNFINISHED

    @property
    def train_name(self) -> str:
        train = self.datasets.get("train") or {}
        return str(train.get("name") or train.get("path") or "?")
