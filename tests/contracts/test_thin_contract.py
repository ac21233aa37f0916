"""The contracts floor stays light: importing it costs a plugin no torch, and its idle clock keeps nothing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from contracts import IDLE
from contracts.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]


def test_importing_contracts_does_not_import_torch(tmp_path):
    # A rule-based plugin's view: every module of the floor it may use, and only `contracts` on the path.
    (tmp_path / "contracts").symlink_to(ROOT / "contracts")
    code = ("import sys, contracts, contracts.batching, contracts.domain, contracts.exporter, contracts.hookspecs,"
            " contracts.model, contracts.names, contracts.optimization, contracts.report, contracts.runs,"
            " contracts.stages, contracts.words;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_idle_clock_keeps_nothing_it_is_given():
    # Models measure into IDLE outside engine.run for as long as the process lives (evaluation, direct calls).
    for _ in range(3):
        with IDLE.stage("decode"), IDLE.device():
            IDLE.count(planned=2, done=1, tokens=5)
            IDLE.add("prepare", 1.5)
            IDLE.add("warm-up", 0.5)
            IDLE.backoff(4)
    assert IDLE.backoffs == [] and IDLE.steps == 0
    assert IDLE.seconds == dict.fromkeys(STAGES, 0.0) and IDLE.finish() == dict.fromkeys(STAGES, 0.0)
    assert (IDLE.prompts_planned, IDLE.prompts_done, IDLE.tokens_generated) == (0, 0, 0)


class FakeEvent:
    """A CUDA event as the clock reads it: finished or not, and the milliseconds since the one before it."""

    def __init__(self, done: bool, ms: float = 0.0):
        self.done, self.ms = done, ms

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.ms


def test_the_device_seconds_mid_run_count_the_brackets_the_gpu_has_finished_without_waiting():
    from contracts.stages import StageClock
    clock = StageClock()
    last = FakeEvent(False, 7.0)
    clock._events = [(FakeEvent(True), FakeEvent(True, 5.0)), (FakeEvent(True), FakeEvent(True, 3.0)),
                     (FakeEvent(True), last), (FakeEvent(True), FakeEvent(True, 11.0))]     # in stream order
    assert clock.device_seconds() == 0.008 and len(clock._events) == 2     # up to the first unfinished one
    last.done = True
    assert clock.device_seconds() == 0.026 and clock._events == []
    with clock.device():                                                    # on the CPU: the forward call's wall
        pass
    assert clock.device_seconds() > 0.026 and clock.finish()["device"] == round(clock.seconds["device"], 4)
