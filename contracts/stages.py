"""Where a run's time went: host preparation, device work, decoding, writing.

A model plugin brackets its work with `clock.stage("prepare" | "decode")` and its forward passes
with `clock.device()`; the engine brackets writing. Stages run on several threads (a prefetch
thread prepares the next batches while the device runs), so they overlap and their sum can exceed
the wall time: each stage is the seconds spent in it, not a slice of the wall.

Device time is measured with CUDA events on the current stream (what the GPU itself spent), and
read only at the end of the run so measuring never makes the host wait for the GPU. On the CPU it is
the wall time of the forward calls.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

import torch

STAGES = ("prepare", "device", "decode", "write")


class StageClock:
    def __init__(self, device: str = "cpu"):
        self.cuda = str(device).startswith("cuda") and torch.cuda.is_available()
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._lock = threading.Lock()
        self.backoffs: list[dict] = []       # OOM back-offs: when (seconds into the run) and to what
        self.started = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        """Seconds spent in a stage elsewhere (a host worker process measures its own)."""
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextmanager
    def device(self) -> Iterator[None]:
        """Bracket work queued on the device; its GPU time is summed at `finish()`."""
        if not self.cuda:
            with self.stage("device"):
                yield
            return
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        try:
            yield
        finally:
            end.record()
            with self._lock:
                self._events.append((begin, end))

    def backoff(self, rows: int) -> None:
        """An out-of-memory back-off: the batch shrank to `rows` (kept in the run report)."""
        with self._lock:
            self.backoffs.append({"at_seconds": round(time.perf_counter() - self.started, 3), "rows": rows})

    def finish(self) -> dict[str, float]:
        """Resolve the CUDA events (one sync, at the end) and return seconds per stage."""
        if self._events:
            torch.cuda.synchronize()
            with self._lock:
                self.seconds["device"] += sum(b.elapsed_time(e) for b, e in self._events) / 1000.0
                self._events.clear()
        return {k: round(v, 4) for k, v in self.seconds.items()}


IDLE = StageClock()     # what a model measures into outside engine.run (evaluation, direct calls)


def describe(seconds: dict[str, float], wall: float, device_busy: float | None = None,
             backoffs: list[dict] | None = None) -> str:
    """One line for people: documents' time per stage, and what the device did with the wall time."""
    parts = [f"{name} {seconds[name]:.2f}s" for name in STAGES if name in seconds]
    if device_busy is not None:
        parts.append(f"device busy {100 * device_busy:.0f}% of {wall:.2f}s")
    line = "time: " + " · ".join(parts)
    if backoffs:
        smallest = min(b["rows"] for b in backoffs)
        line += (f" · out of GPU memory {len(backoffs)}×: batches shrank to {smallest} row(s) "
                 f"(first at {backoffs[0]['at_seconds']:.1f}s)")
    return line
