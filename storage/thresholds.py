"""Confidence thresholds saved for a model's weights (tuned on a gold dataset); mixed into `storage.repository.Store`.

Thresholds belong to the weights they were tuned on: a row is keyed by the model and the weights
directory, with the checksum of the checkpoint as it was, so a checkpoint replaced in the same
directory is noticed (`SavedThresholds.stale`). Saving again adds a row; the newest one applies.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select

from storage.records import weights_checksum
from storage.tables import ThresholdRecord, utcnow
from storage.views import NotFound


@dataclass(frozen=True)
class SavedThresholds:
    id: int
    created_at: datetime
    model: str
    weights: str
    weights_checksum: str | None
    dataset_id: int | None
    dataset_name: str
    thresholds: dict[str, float]                  # type -> threshold
    tuning: dict[str, Any]                        # type -> TypeTuning as JSON

    def stale(self) -> bool:
        """The checkpoint in the weights directory is no longer the one these were tuned on."""
        return self.weights_checksum is not None and weights_checksum(self.weights) != self.weights_checksum


def _view(r: ThresholdRecord) -> SavedThresholds:
    return SavedThresholds(r.id, r.created_at, r.model, r.weights, r.weights_checksum, r.dataset_id, r.dataset_name,
                           {k: float(v) for k, v in (r.thresholds or {}).items()}, dict(r.tuning or {}))


class ThresholdSettings:
    def save_thresholds(self, model: str, weights: str | Path, thresholds: dict[str, float], tuning: dict[str, Any],
                        dataset_name: str, dataset_id: int | None = None) -> int:
        with self._write() as s:
            row = ThresholdRecord(created_at=utcnow(), model=model, weights=str(weights),
                                  weights_checksum=weights_checksum(weights), dataset_id=dataset_id,
                                  dataset_name=dataset_name, thresholds=dict(thresholds), tuning=dict(tuning))
            s.add(row)
            s.flush()
            return row.id

    def thresholds_for(self, model: str, weights: str | Path) -> SavedThresholds | None:
        """The newest thresholds saved for these weights, or None."""
        query = (select(ThresholdRecord).where(ThresholdRecord.model == model, ThresholdRecord.weights == str(weights))
                 .order_by(ThresholdRecord.id.desc()).limit(1))
        with self._read() as s:
            row = s.scalar(query)
            return _view(row) if row is not None else None

    def get_thresholds(self, thresholds_id: int) -> SavedThresholds:
        with self._read() as s:
            row = s.get(ThresholdRecord, thresholds_id)
            if row is None:
                raise NotFound(f"thresholds {thresholds_id} are not in the database (deleted?)")
            return _view(row)

    def delete_thresholds(self, model: str, weights: str | Path) -> int:
        """Forget every threshold saved for these weights (later runs apply none). Returns how many rows went."""
        with self._write() as s:
            return s.execute(delete(ThresholdRecord).where(ThresholdRecord.model == model,
                                                           ThresholdRecord.weights == str(weights))).rowcount
