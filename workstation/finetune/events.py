"""What a fine-tuning run tells whoever watches it (the UI's Fine-tune page), and how it is stopped.

`--events PATH` appends one JSON object per line, flushed line by line, so a reader can tail the
file while the run goes on. The contract (other tools read it; keep it exactly):

  {"event": "start", "time": ISO-8601, "model", "device", "total_steps", "epochs",
   "examples": training windows (rexuninlu) or prompt chunks (seqgpt), "documents"}
  {"event": "step", "step", "epoch", "loss", "lr", "seconds", "gpu_allocated_MiB", "gpu_peak_MiB"}
      after every optimizer step. step counts from 1 over the whole run; epoch counts from 1; lr is
      the rate that step used; seconds since the start event; GPU memory on CUDA (else null):
      allocated after the step, and the peak *during this step* (the run's peak is their max).
  {"event": "eval", "phase": "before" | "epoch" | "after", "epoch": int | null, "step",
   "overall": {precision, recall, f1, correct, predicted, gold}, "per_type": {type: the same}}
      before training (step 0), after every epoch, and after the run on the saved checkpoint
      reloaded from disk (the last epoch's "epoch" event carries that same evaluation).
  {"event": "checkpoint", "step", "path"}    a resumable checkpoint was written
  {"event": "done", "status": "completed" | "cancelled" | "failed", "output", "error": str | null,
   "evaluation": path of evaluation.json | null}

A resumed run appends to the same file: a new start event, then the before evaluation again (kept
in the checkpoint, not recomputed), then steps from where the checkpoint left off.
"""
from __future__ import annotations

import json
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch


class TrainingEvents:
    """The events file (or nothing, without --events)."""

    def __init__(self, path: Path | None, device: str = "cpu"):
        self.path, self.device = path, device
        self.started = time.monotonic()
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def emit(self, event: str, **fields: Any) -> None:
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n")
            f.flush()

    def start(self, model: str, total_steps: int, epochs: int, examples: int, documents: int) -> None:
        self.started = time.monotonic()
        if self.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(self.device)
        self.emit("start", time=datetime.now(timezone.utc).isoformat(timespec="seconds"), model=model,
                  device=self.device, total_steps=total_steps, epochs=epochs, examples=examples, documents=documents)

    def step(self, step: int, epoch: int, loss: float, lr: float) -> None:
        allocated = peak = None
        if self.device.startswith("cuda"):
            allocated = round(torch.cuda.memory_allocated(self.device) / 2**20, 1)
            peak = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
            torch.cuda.reset_peak_memory_stats(self.device)        # the next step's peak is its own
        self.emit("step", step=step, epoch=epoch, loss=loss, lr=lr,
                  seconds=round(time.monotonic() - self.started, 3), gpu_allocated_MiB=allocated, gpu_peak_MiB=peak)

    def evaluation(self, phase: str, epoch: int | None, step: int, metrics: dict) -> None:
        self.emit("eval", phase=phase, epoch=epoch, step=step, overall=metrics["overall"],
                  per_type=metrics["per_type"])

    def checkpoint(self, step: int, path: Path) -> None:
        self.emit("checkpoint", step=step, path=str(path))

    def done(self, status: str, output: Path, error: str | None = None, evaluation: Path | None = None) -> None:
        self.emit("done", status=status, output=str(output), error=error,
                  evaluation=str(evaluation) if evaluation is not None else None)


class Cancelled(Exception):
    """The run was asked to stop (SIGTERM / SIGINT) and has stopped at a clean point."""


class StopRequest:
    """SIGTERM or SIGINT ask the run to stop: the loop finishes its optimizer step, writes a
    resumable checkpoint and leaves with Cancelled. A second signal stops at once (KeyboardInterrupt).

    Used as a context manager; handlers are installed only in the main thread and restored after."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self._event = threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self._event.is_set():
            raise KeyboardInterrupt
        self._event.set()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise Cancelled if a stop was asked for (at points where stopping needs no checkpoint)."""
        if self._event.is_set():
            raise Cancelled()
