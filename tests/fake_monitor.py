"""A scripted GPU monitor for the tests: deterministic samples instead of NVML (shaped like
workstation.monitor.GpuMonitor)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from workstation.monitor import GpuProcess, GpuSample


@dataclass
class FakeMonitor:
    """Scripted samples: each `sample()` returns the next script entry (the last one repeats).

    A script entry of None plays a failing sample (all metrics None), as a lost GPU would.
    """

    script: Sequence[Sequence[GpuSample] | None] = field(default_factory=list)
    available: bool = True
    reason: str = ""
    calls: int = 0

    @classmethod
    def steady(cls, gpus: int = 2, total_gib: int = 24, pid: int | None = None) -> "FakeMonitor":
        """`gpus` boards whose memory climbs 1 GiB per sample; `pid` holds memory on GPU 0."""
        gib = 1 << 30

        def step(k: int) -> list[GpuSample]:
            procs = (GpuProcess(pid, (k + 1) * gib, "python"),) if pid is not None else ()
            return [GpuSample(i, f"Fake GPU {i}", min(k + 1, total_gib) * gib, total_gib * gib,
                              (10 * k + i) % 101, 40 + k % 30, 100.0 + k, 450.0, procs if i == 0 else ())
                    for i in range(gpus)]
        return cls([step(k) for k in range(total_gib)])

    @classmethod
    def without_gpu(cls, reason: str = "no NVIDIA GPU (NVML Shared Library Not Found)") -> "FakeMonitor":
        return cls([], available=False, reason=reason)

    def sample(self) -> list[GpuSample]:
        if not self.available or not self.script:
            return []
        entry = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if entry is None:
            previous = next((e for e in reversed(self.script[:self.calls - 1]) if e), [])
            return [GpuSample(g.index, g.name) for g in previous]
        return [replace(g) for g in entry]

    def close(self) -> None:
        pass
