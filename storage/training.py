"""Fine-tuning runs in the database: what was trained on what, how it went, and the evaluation before/after.

A UI run's row is written by `workstation.finetune.runs` as the trainer's events arrive; a CLI run is
recorded once it has finished, from its output's evaluation.json. Mixed into `storage.repository.Store`.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select

from storage.records import training_run_view
from storage.tables import TrainingRunRecord, utcnow
from storage.views import TRAINING_STATUSES, NotFound, TrainingRun

TRAINING_SOURCES = ("ui", "cli")
# What `update_training_run` may change (the rest is fixed when the run is created).
UPDATABLE = ("status", "args", "datasets", "pid", "host", "events_path", "log_path", "step", "total_steps", "loss",
             "evaluation_before", "evaluation_after", "evaluation_epochs", "error", "started_at", "finished_at")


class TrainingLog:
    def create_training_run(self, model: str, base_weights: str, output_dir: str, args: list[str], *,
                            source: str = "ui", status: str = "running", datasets: dict | None = None,
                            train_dataset_id: int | None = None, eval_dataset_id: int | None = None,
                            **fields: Any) -> int:
        if source not in TRAINING_SOURCES:
            raise ValueError(f"source must be one of {', '.join(TRAINING_SOURCES)}, not {source!r}")
        _check(status=status, **fields)
        now = utcnow()
        with self._write() as s:
            run = TrainingRunRecord(created_at=now, updated_at=now, source=source, model=model, status=status,
                                    base_weights=str(base_weights), output_dir=str(output_dir), args=list(args),
                                    datasets=dict(datasets or {}), train_dataset_id=train_dataset_id,
                                    eval_dataset_id=eval_dataset_id, **fields)
            s.add(run)
            s.flush()
            return run.id

    def update_training_run(self, run_id: int, **fields: Any) -> TrainingRun:
        _check(**fields)
        with self._write() as s:
            run = _training_run(s, run_id)
            for name, value in fields.items():
                setattr(run, name, value)
            run.updated_at = utcnow()
            s.flush()
            return training_run_view(run)

    def get_training_run(self, run_id: int) -> TrainingRun:
        with self._read() as s:
            return training_run_view(_training_run(s, run_id))

    def list_training_runs(self, model: str | None = None, status: str | None = None,
                           limit: int = 100) -> list[TrainingRun]:
        """Newest first."""
        query = select(TrainingRunRecord).order_by(TrainingRunRecord.id.desc()).limit(limit)
        if model:
            query = query.where(TrainingRunRecord.model == model)
        if status:
            query = query.where(TrainingRunRecord.status == status)
        with self._read() as s:
            return [training_run_view(t) for t in s.scalars(query)]

    def delete_training_run(self, run_id: int) -> bool:
        """Forget the run (its output directory stays on disk)."""
        with self._write() as s:
            run = s.get(TrainingRunRecord, run_id)
            if run is None:
                return False
            if run.status in ("running", "cancelling"):
                raise ValueError(f"training run {run_id} is still running; cancel it first")
            s.execute(delete(TrainingRunRecord).where(TrainingRunRecord.id == run_id))
            return True


def _check(**fields: Any) -> None:
    unknown = sorted(set(fields) - set(UPDATABLE))
    if unknown:
        raise ValueError(f"training runs have no updatable field(s) {', '.join(unknown)}")
    if "status" in fields and fields["status"] not in TRAINING_STATUSES:
        raise ValueError(f"status must be one of {', '.join(TRAINING_STATUSES)}, not {fields['status']!r}")


def _training_run(s, run_id: int) -> TrainingRunRecord:
    run = s.get(TrainingRunRecord, run_id)
    if run is None:
        raise NotFound(f"training run {run_id} is not in the database (deleted?)")
    return run
