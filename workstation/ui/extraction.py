"""The Extract page's run on a thread of its own, so the page can show how far it got and stop it.

A SeqGPT run on the CPU takes a minute for one document; the page's script cannot sit in it. The run goes
on a thread (holding the shelf's model as any run does), the page polls it from a fragment, and Cancel sets
the event that the engine and the run's StageClock check between slices and device steps.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from contracts.stages import Cancelled, StageClock
from contracts.words import plural

# How long the page waits for a run before it shows progress instead: a quick run's result comes with the
# click, without a flash of progress. The UI tests raise it, so a click on Run still shows its result.
wait_s = 1.5


class BackgroundRun:
    def __init__(self, work: Callable[[threading.Event, Callable[[StageClock], None]], int], what: str,
                 form: dict | None = None):
        self.work, self.what = work, what
        self.form = form or {}          # what the page's form held when the run started (a stale result says so)
        self.cancel = threading.Event()
        self.clock: StageClock | None = None
        self.run_id: int | None = None
        self.error: BaseException | None = None
        self.cancelled = False
        self.started = time.monotonic()
        self.ended: float | None = None
        self._thread = threading.Thread(target=self._main, name="extract-run", daemon=True)

    def start(self) -> "BackgroundRun":
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self.run_id = self.work(self.cancel, self._clocked)
        except Cancelled:
            self.cancelled = True
        except BaseException as e:          # shown on the page; a thread's exception would otherwise vanish
            self.error = e
        finally:
            self.ended = time.monotonic()

    def _clocked(self, clock: StageClock) -> None:
        self.clock = clock

    def wait(self, seconds: float) -> bool:
        self._thread.join(seconds)
        return self.done

    @property
    def done(self) -> bool:
        return self.ended is not None

    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def describe(self) -> str:
        """One line: elapsed time and what the model has done so far."""
        parts = [f"{self.elapsed():.1f} s"]
        if self.cancel.is_set() and not self.done:
            parts.append("stopping at the model's next step")
        if self.clock is None:
            parts.append("loading the model, or waiting for another run on it")
            return " · ".join(parts)
        p = self.clock.progress()
        if p["prompts_planned"]:
            parts.append(f"prompts {p['prompts_done']:,} of {p['prompts_planned']:,}")
        if p["tokens_generated"]:
            parts.append(plural(p["tokens_generated"], "token") + " generated")
        parts.append(plural(p["steps"], "model step"))
        return " · ".join(parts)
