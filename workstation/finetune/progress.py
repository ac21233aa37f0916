"""A fine-tune's progress as its trainer reports it: the events file read as it grows (`EventReader`),
folded into what the events have said so far (`TrainingProgress`), and the evaluations kept and compared.
The events are the contract in workstation/finetune/events.py."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class EventReader:
    """Reads the lines appended to an events file since the last call. A last line without its newline is
    still being written: it waits for the next call. A line that is not JSON is counted and skipped."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.malformed = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        events = []
        for raw in complete.splitlines():
            if not raw.strip():
                continue
            try:
                event = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.malformed += 1
                continue
            if isinstance(event, dict) and "event" in event:
                events.append(event)
            else:
                self.malformed += 1
        return events


@dataclass
class TrainingProgress:
    """Everything the events have said so far, across sessions (a resumed run appends a new "start")."""

    start: dict[str, Any] | None = None
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)     # step -> its event (a redone step replaces)
    evals: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, Any] | None = None
    sessions: int = 0
    session_first_step: int | None = None          # the step count when this session's first step began

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            self.start, self.done = event, None
            self.sessions += 1
            self.session_first_step = None
        elif kind == "resume":                      # written by the launcher when it starts the run again
            self.done = None
        elif kind == "step" and isinstance(event.get("step"), int):
            if self.session_first_step is None:
                self.session_first_step = event["step"] - 1
            self.steps[event["step"]] = event
        elif kind == "eval":
            phase, epoch = event.get("phase"), event.get("epoch")
            self.evals = [e for e in self.evals if (e.get("phase"), e.get("epoch")) != (phase, epoch)] + [event]
        elif kind == "checkpoint":
            self.checkpoints.append(event)
        elif kind == "done":
            self.done = event

    @property
    def total_steps(self) -> int | None:
        return (self.start or {}).get("total_steps")

    @property
    def step(self) -> int:
        return max(self.steps, default=0)

    @property
    def fraction(self) -> float:
        total = self.total_steps
        return min(self.step / total, 1.0) if total else 0.0

    @property
    def last(self) -> dict[str, Any] | None:
        return self.steps[self.step] if self.steps else None

    def elapsed(self) -> float | None:
        """Seconds of this session (the trainer's own clock, from the last step event)."""
        last = self.last
        return float(last["seconds"]) if last and isinstance(last.get("seconds"), (int, float)) else None

    def eta(self) -> float | None:
        """Seconds left at this session's pace so far."""
        elapsed, total, last = self.elapsed(), self.total_steps, self.last
        if not elapsed or not total or last is None or self.session_first_step is None:
            return None
        done = last["step"] - self.session_first_step
        return (total - last["step"]) * elapsed / done if done > 0 else None

    def eval(self, phase: str) -> dict[str, Any] | None:
        found = [e for e in self.evals if e.get("phase") == phase]
        return found[-1] if found else None

    def epoch_evals(self) -> list[dict[str, Any]]:
        return sorted((e for e in self.evals if e.get("phase") == "epoch"), key=lambda e: e.get("epoch") or 0)

    def loss(self) -> list[list[float]]:
        return [[s, round(float(e["loss"]), 6)] for s, e in sorted(self.steps.items())
                if isinstance(e.get("loss"), (int, float)) and math.isfinite(e["loss"])]

    def memory(self) -> list[dict[str, Any]]:
        return [{"step": s, "allocated (MiB)": e.get("gpu_allocated_MiB"), "peak (MiB)": e.get("gpu_peak_MiB")}
                for s, e in sorted(self.steps.items()) if e.get("gpu_allocated_MiB") is not None
                or e.get("gpu_peak_MiB") is not None]


def evaluation_summary(event: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the store keeps of an eval event: overall and per type (plus epoch and step)."""
    if not event:
        return None
    return {k: event.get(k) for k in ("overall", "per_type", "epoch", "step") if event.get(k) is not None}


def compare_rows(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per type path (overall first): P/R/F1 before and after and the change in F1."""
    before, after = before or {}, after or {}
    types = ["(overall)"] + sorted(set(before.get("per_type") or {}) | set(after.get("per_type") or {}))
    rows = []
    for t in types:
        b = before.get("overall") if t == "(overall)" else (before.get("per_type") or {}).get(t)
        a = after.get("overall") if t == "(overall)" else (after.get("per_type") or {}).get(t)
        row: dict[str, Any] = {"type": t}
        for side, m in (("before", b), ("after", a)):
            for k, short in (("precision", "P"), ("recall", "R"), ("f1", "F1")):
                row[f"{short} {side}"] = (m or {}).get(k)
        row["gold"] = (a or b or {}).get("gold")
        row["ΔF1"] = (a["f1"] - b["f1"]) if a and b and a.get("f1") is not None and b.get("f1") is not None else None
        rows.append(row)
    return rows
