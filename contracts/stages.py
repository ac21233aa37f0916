"""Where a run's time went: host preparation, device work, decoding, writing.

A model plugin brackets its work with `clock.stage("prepare" | "decode")` and its forward passes
with `clock.device()`; the engine brackets writing. Stages run on several threads (a prefetch
thread prepares the next batches while the device runs), so they overlap and their sum can exceed
the wall time: each stage is the seconds spent in it, not a slice of the wall.

Device time is measured with CUDA events on the current stream (what the GPU itself spent), and
read only at the end of the run so measuring never makes the host wait for the GPU. On the CPU it is
the wall time of the forward calls.

The clock is also how a run is watched and stopped while it is inside the model: a plugin counts its
prompts (`count`), every `device()` bracket counts a step, and a set `cancel` event raises `Cancelled`
at the next bracket, so one long document (SeqGPT on the CPU) stops between decoding steps, not at its end.

torch is imported only by a clock for a CUDA device (whose model has imported it already), so `contracts` stays
free of it for plugins that run no network.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

STAGES = ("prepare", "device", "decode", "write")


class Cancelled(Exception):
    """A run was asked to stop (its cancel event was set)."""


class StageClock:
    def __init__(self, device: str = "cpu", cancel: threading.Event | None = None):
        self.cuda = str(device).startswith("cuda") and _cuda_available()
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._events: list[tuple] = []       # (begin, end) torch.cuda.Events of the device brackets
        self._lock = threading.Lock()
        self.backoffs: list[dict] = []       # OOM back-offs: when (seconds into the run) and to what
        self.started = time.perf_counter()
        self.cancel = cancel
        self.steps = 0                       # device brackets entered: forward passes, decoding steps
        self.prompts_planned = self.prompts_done = self.tokens_generated = 0

    def check(self) -> None:
        """Raise Cancelled if the run was asked to stop."""
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled()

    def count(self, planned: int = 0, done: int = 0, tokens: int = 0) -> None:
        """A plugin's progress: prompts planned, prompts finished, tokens generated."""
        with self._lock:
            self.prompts_planned += planned
            self.prompts_done += done
            self.tokens_generated += tokens

    def progress(self) -> dict[str, int | float]:
        """What the run has done so far; safe to read from another thread while it runs."""
        with self._lock:
            return {"seconds": time.perf_counter() - self.started, "steps": self.steps,
                    "prompts_planned": self.prompts_planned, "prompts_done": self.prompts_done,
                    "tokens_generated": self.tokens_generated}

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
        """Bracket work queued on the device; its GPU time is summed at `finish()`. A cancel is honoured
        here, before the work is queued."""
        self.check()
        with self._lock:
            self.steps += 1
        if not self.cuda:
            with self.stage("device"):
                yield
            return
        import torch
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

    def device_seconds(self) -> float:
        """Device seconds so far, of the brackets the GPU has already finished: read mid-run without waiting for it
        (the events of one stream finish in order, so the first unfinished one ends the count). On the CPU it is the
        forward calls' wall, as at finish()."""
        with self._lock:
            done = 0
            for begin, end in self._events:
                if not end.query():
                    break
                self.seconds["device"] += begin.elapsed_time(end) / 1000.0
                done += 1
            del self._events[:done]
            return self.seconds["device"]

    def finish(self) -> dict[str, float]:
        """Resolve the CUDA events (one sync, at the end) and return seconds per stage."""
        if self._events:
            import torch
            torch.cuda.synchronize()
            with self._lock:
                self.seconds["device"] += sum(b.elapsed_time(e) for b, e in self._events) / 1000.0
                self._events.clear()
        return {k: round(v, 4) for k, v in self.seconds.items()}


def _cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


class IdleClock(StageClock):
    """A clock that keeps nothing: what a model measures into outside engine.run (evaluation, direct calls). It
    lives as long as the process, so anything it kept (back-offs, steps, seconds) would grow for ever."""

    def count(self, planned: int = 0, done: int = 0, tokens: int = 0) -> None:
        pass

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        yield

    def add(self, name: str, seconds: float) -> None:
        pass

    @contextmanager
    def device(self) -> Iterator[None]:
        yield                               # no cancel event to honour, no step to count

    def backoff(self, rows: int) -> None:
        pass


IDLE = IdleClock()


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
