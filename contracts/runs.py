"""A run as the history hands it to readers (the UI, exporters, the HTTP API): plain dataclasses.

They live in the contracts layer because an export-format plugin receives them (contracts/exporter.py)
and must not depend on the store that produced them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.domain import Document, Result


@dataclass(frozen=True)
class RunSummary:
    id: int
    created_at: datetime
    source: str                      # 'ui' | 'batch' | 'cli'
    model: str
    task: str | None
    weights: str
    weights_checksum: str | None
    demo: bool
    device: str
    dtype: str
    attention: str
    optimizations: dict[str, str]
    batch_size: int
    options: dict[str, Any]
    documents: int
    wall_seconds: float
    docs_per_second: float | None
    tokens: int
    peak_memory_bytes: int | None
    label: str | None
    note: str | None
    stages: dict[str, Any] = field(default_factory=dict)   # {"seconds", "device_busy", "backoffs", "first_after_load"}
    cut_documents: int | None = None     # documents read only partly; None: the model reports no coverage
    finished_at: datetime | None = None   # when the run was complete in the history (the History order)


@dataclass
class RunDetail:
    summary: RunSummary
    settings: dict[str, Any] | None
    items: list[tuple[Document, Result]]

    @property
    def id(self) -> int:
        return self.summary.id
