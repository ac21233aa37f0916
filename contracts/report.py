"""What a run reports: the settings it ran with and what it measured. The engine fills it in; storage
records it; every surface shows it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from contracts.domain import Result


@dataclass
class RunReport:
    model: str
    weights: str
    demo: bool
    device: str
    dtype: str
    attention: str
    optimizations: dict[str, str]
    batch_size: int
    options: dict
    started_at: str
    documents: int = 0
    wall_seconds: float = 0.0
    tokens: int = 0
    peak_memory_bytes: int | None = None
    stages: dict[str, float] = field(default_factory=dict)     # seconds per stage (contracts/stages.py)
    backoffs: list[dict] = field(default_factory=list)         # OOM back-offs: when, and to how many rows
    thresholds: dict[str, float] | None = None                 # confidence thresholds applied (type -> t)
    first_after_load: bool = False                             # the first run on a freshly loaded model
    results: list[Result] = field(default_factory=list)

    @property
    def device_busy(self) -> float | None:
        """Share of the wall time the device was working (CUDA-event time on GPUs); a batch job spread over
        several devices ("cuda:0,cuda:1") sums their device time, so it is shared out among them."""
        devices = self.device.count(",") + 1
        return self.stages.get("device", 0.0) / (self.wall_seconds * devices) if self.wall_seconds else None

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("results")
        d["docs_per_second"] = self.documents / self.wall_seconds if self.wall_seconds else None
        d["device_busy"] = self.device_busy
        return d
