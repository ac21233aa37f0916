"""The tables of the run history, the batch-job queue, gold datasets and fine-tuning runs (SQLAlchemy 2.0).

These classes describe the schema at head; `storage.migrations` creates and upgrades it with plain
SQL, and a test checks the two agree. The UI never sees these objects: the repository turns them
into plain dataclasses so no session outlives a query.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Text, TypeDecorator
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class UTCDateTime(TypeDecorator):
    """Stored as naive UTC text (SQLite has no time zones); read back as aware UTC.

    A naive datetime passed in is taken as local time, which is what a date picker in the UI means.
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        return None if value is None else value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=timezone.utc)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    # none_as_null: a Python None is SQL NULL, not the JSON text 'null' (which the search index would see).
    type_annotation_map = {dict[str, Any]: JSON(none_as_null=True), list[Any]: JSON(none_as_null=True),
                           datetime: UTCDateTime}


class RunRecord(Base):
    __tablename__ = "runs"
    __table_args__ = {"sqlite_autoincrement": True}       # ids are never reused (m004_never_reused_run_ids)

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    source: Mapped[str]                                   # 'ui' | 'batch' | 'cli' | 'api'
    model: Mapped[str]
    task: Mapped[str | None]
    weights: Mapped[str]
    weights_checksum: Mapped[str | None]
    demo: Mapped[bool]
    device: Mapped[str]
    dtype: Mapped[str]
    attention: Mapped[str]
    optimizations: Mapped[dict[str, Any]]                 # name -> what ran (kernel chosen, ...)
    batch_size: Mapped[int]
    options: Mapped[dict[str, Any]]
    settings: Mapped[dict[str, Any] | None]
    documents_count: Mapped[int] = mapped_column("documents")
    wall_seconds: Mapped[float]
    docs_per_second: Mapped[float | None]
    tokens: Mapped[int]
    peak_memory_bytes: Mapped[int | None]
    label: Mapped[str | None] = mapped_column(Text)
    note: Mapped[str | None] = mapped_column(Text)
    # {"seconds": {stage: s}, "device_busy": share, "backoffs": [...]}: contracts/stages.py
    stages: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    # NULL while the run's documents are still being written (in short transactions): hidden from History.
    finished_at: Mapped[datetime | None] = mapped_column(index=True)

    documents: Mapped[list[DocumentRecord]] = relationship(
        back_populates="run", order_by="DocumentRecord.position", cascade="all, delete-orphan",
        passive_deletes=True)


class DocumentRecord(Base):
    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    position: Mapped[int]
    doc_id: Mapped[str]
    text: Mapped[str] = mapped_column(Text)
    schema: Mapped[dict[str, Any] | None]
    task: Mapped[str | None]
    labels: Mapped[list[Any] | None]

    run: Mapped[RunRecord] = relationship(back_populates="documents")
    result: Mapped[ResultRecord | None] = relationship(
        back_populates="document", cascade="all, delete-orphan", passive_deletes=True)


class ResultRecord(Base):
    __tablename__ = "results"

    id: Mapped[int] = mapped_column(primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"), unique=True)
    output: Mapped[list[Any]]                             # Result.to_json()["output"]
    raw: Mapped[list[Any] | None]
    warnings: Mapped[list[Any]]
    coverage: Mapped[list[Any] | None]                    # Result.coverage: [[start, end], ...] read
    unread_chars: Mapped[int | None]                      # characters not read (domain.unread_chars)

    document: Mapped[DocumentRecord] = relationship(back_populates="result")


class JobRecord(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    source_name: Mapped[str]                              # the uploaded file's name, for the person
    model: Mapped[str]
    weights: Mapped[str]
    device: Mapped[str]
    dtype: Mapped[str]
    task: Mapped[str | None]
    batch_size: Mapped[int]
    optimizations: Mapped[list[Any]]
    options: Mapped[dict[str, Any]]
    settings: Mapped[dict[str, Any] | None]
    status: Mapped[str]                                   # queued | running | cancelled | done | failed
    total: Mapped[int]
    done: Mapped[int]
    docs_per_second: Mapped[float | None]
    wall_seconds: Mapped[float]                           # extraction time summed over resumed sessions
    tokens: Mapped[int]
    peak_memory_bytes: Mapped[int | None]
    # {"seconds": {stage: s}, "backoffs": [...]} summed over the job's slices (contracts/stages.py)
    stages: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text)
    owner: Mapped[str | None]                             # "host:pid" of the process running it
    heartbeat_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))

    items: Mapped[list[JobItemRecord]] = relationship(
        back_populates="job", order_by="JobItemRecord.position", cascade="all, delete-orphan",
        passive_deletes=True)


class JobItemRecord(Base):
    """One document of a job. The status column is the claim: pending -> claimed -> done."""

    __tablename__ = "job_items"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    position: Mapped[int]
    doc: Mapped[dict[str, Any]]
    status: Mapped[str]
    claimed_by: Mapped[str | None]
    claimed_at: Mapped[datetime | None]
    result: Mapped[dict[str, Any] | None]

    job: Mapped[JobRecord] = relationship(back_populates="items")


class DatasetRecord(Base):
    """A named set of gold examples for one model (RexUniNLU examples carry a schema, SeqGPT ones task + labels)."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str]
    model: Mapped[str]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    note: Mapped[str | None] = mapped_column(Text)

    examples: Mapped[list[GoldExampleRecord]] = relationship(
        back_populates="dataset", order_by="GoldExampleRecord.id", cascade="all, delete-orphan",
        passive_deletes=True)


class GoldExampleRecord(Base):
    """One training example: its own copy of the text and the corrected output, never the run's rows.

    run_id / document_id say where it came from; deleting that run leaves the example (the links go NULL).
    """

    __tablename__ = "gold_examples"

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    doc_id: Mapped[str]
    text: Mapped[str] = mapped_column(Text)
    schema: Mapped[dict[str, Any] | None]
    task: Mapped[str | None]
    labels: Mapped[list[Any] | None]
    output: Mapped[list[Any]]                             # gold tuples: [[{"type","span","offset"}, ...], ...]
    source: Mapped[str]                                   # 'history' | 'jsonl' | 'label-studio' | 'doccano'
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    document_id: Mapped[int | None] = mapped_column(ForeignKey("documents.id", ondelete="SET NULL"))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    dataset: Mapped[DatasetRecord] = relationship(back_populates="examples")


class TrainingRunRecord(Base):
    """A fine-tuning run (from the UI or the CLI): what it trained on, how, and how it evaluated."""

    __tablename__ = "training_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    updated_at: Mapped[datetime]
    source: Mapped[str]                                   # 'ui' | 'cli'
    model: Mapped[str]
    status: Mapped[str]                                   # running | cancelling | completed | cancelled | failed
    base_weights: Mapped[str]
    output_dir: Mapped[str]
    train_dataset_id: Mapped[int | None] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"))
    eval_dataset_id: Mapped[int | None] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"))
    datasets: Mapped[dict[str, Any]]                      # {"train": {...}, "eval": {...}} as they were at the start
    args: Mapped[list[Any]]                               # the `launcher.py finetune` arguments
    pid: Mapped[int | None]
    host: Mapped[str | None]
    events_path: Mapped[str | None] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)
    step: Mapped[int | None]
    total_steps: Mapped[int | None]
    loss: Mapped[list[Any] | None]                        # [[step, loss], ...]
    evaluation_before: Mapped[dict[str, Any] | None]
    evaluation_after: Mapped[dict[str, Any] | None]
    evaluation_epochs: Mapped[list[Any] | None]           # the "eval" events of phase "epoch"
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class ThresholdRecord(Base):
    """Confidence thresholds per type, tuned for one model's weights on a gold dataset (the newest applies)."""

    __tablename__ = "thresholds"
    __table_args__ = (Index("ix_thresholds_weights", "model", "weights", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime]
    model: Mapped[str]
    weights: Mapped[str] = mapped_column(Text)
    weights_checksum: Mapped[str | None]
    dataset_id: Mapped[int | None] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"))
    dataset_name: Mapped[str]
    thresholds: Mapped[dict[str, Any]]                   # type -> threshold
    tuning: Mapped[dict[str, Any]]                       # type -> TypeTuning as JSON (scores and the curve)
