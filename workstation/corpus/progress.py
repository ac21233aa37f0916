"""A corpus job's progress: counts from the workers, the terminal's bar, the store's jobs table.

The parsing tasks and workers report to a `Tally` actor without waiting; the driver's `Watcher` reads it
twice a second, draws the bar (documents done, documents/s per worker while busy) and copies the counts
to the workstation's store through `Progress`, where a Cancel on the Batch page stops the run as Ctrl-C does.
The counts are live estimates (a retried batch may count twice); the manifest counts the written parts.
"""
from __future__ import annotations

import _thread
import logging
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import ray

from workstation.corpus.layout import Shard

if TYPE_CHECKING:
    from workstation.corpus.runner import CorpusJob

log = logging.getLogger(__name__)
TALLY_PREFIX = "iew-corpus-tally-"


@ray.remote(num_cpus=0)
class Tally:
    """Counts from the parsing tasks (entries per shard) and the workers (documents, errors, busy seconds)."""

    def __init__(self):
        self.totals: dict[str, int] = {}
        self.workers: dict[str, dict] = {}

    def record(self, kind: str, *args) -> None:
        if kind == "parsed":
            key, total = args
            self.totals[key] = total
            return
        name, device, documents, errors, seconds = args
        w = self.workers.setdefault(name, {"device": device, "documents": 0, "errors": 0, "busy_seconds": 0.0})
        w["documents"] += documents
        w["errors"] += errors
        w["busy_seconds"] += seconds

    def snapshot(self) -> dict:
        return {"totals": dict(self.totals), "workers": {k: dict(v) for k, v in self.workers.items()}}


class Reporter:
    """Picklable: parsers and workers call it; it forwards to the Tally without waiting."""

    def __init__(self, tally):
        self.tally = tally

    def __call__(self, kind: str, *args) -> None:
        self.tally.record.remote(kind, *args)


REINTERRUPT_SECONDS = 2.0
SNAPSHOT_SECONDS = 1.0          # the tally's counts are for display: a poll does not wait longer for them


class Watcher:
    """Follows the Tally once a second: the terminal's progress bar, the store's counts, a cancel from the UI."""

    def __init__(self, tally, manifest: dict, pending: list[Shard], done_lines: dict, store: "Progress",
                 show: bool):
        self.tally, self.manifest, self.pending, self.store = tally, manifest, pending, store
        self.staged_before = {k: len(v) for k, v in done_lines.items()}
        self.last: dict = {"totals": {}, "workers": {}}
        self._asked = None                                 # a snapshot asked of the tally and not answered yet
        self.cancelled = False
        self._interrupted = float("-inf")                  # the first interrupt goes at once
        self.started = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="corpus-progress", daemon=True)
        self.bar = None
        if show:
            from tqdm import tqdm
            # On a terminal a live bar; into a log file a line every half minute.
            self.bar = tqdm(total=None, unit="doc", desc="documents", file=sys.stderr, dynamic_ncols=True,
                            mininterval=0.5 if sys.stderr.isatty() else 30.0)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join(timeout=10)
            self._poll()
            if self.bar is not None:
                self.bar.close()

    def processed(self) -> int:
        return sum(w["documents"] for w in self.last["workers"].values())

    def totals(self) -> tuple[int, int | None]:
        """(documents done in all, documents in all or None while some shard is not parsed yet)."""
        entries = self.manifest["shards"].values()
        done_shards = sum(e.get("documents", 0) for e in entries if e["status"] == "done")
        known = self.last["totals"]
        todo = [known.get(s.key) for s in self.pending]
        done = done_shards + sum(self.staged_before.values()) + self.processed()
        total = None if None in todo else done_shards + sum(todo)
        return done, total

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self._poll()

    def _read_tally(self) -> None:
        """Take the tally's counts once it has answered, asking one snapshot at a time. On a loaded 2-core
        machine the tally, queued behind the workers' reports, answered later than any poll waited, poll after
        poll: answers were dropped, the counts stayed at 0 and the questions piled up. Now a late answer is
        used by the poll that finds it, and a poll that finds none keeps the counts it had."""
        try:
            if self._asked is None:
                self._asked = self.tally.snapshot.remote()
            ready, _ = ray.wait([self._asked], timeout=SNAPSHOT_SECONDS)
            if ready:
                answered, self._asked = self._asked, None
                self.last = ray.get(answered)
        except Exception:                                 # noqa: BLE001 - counts as last seen; the next poll asks again
            self._asked = None

    def _poll(self) -> None:
        # The tally first, but a cancel is looked for whether it answered or not: a cancelled run once wrote
        # every row while the tally did not answer.
        self._read_tally()
        done, total = self.totals()
        rates = [w["documents"] / w["busy_seconds"] for w in self.last["workers"].values() if w["busy_seconds"]]
        if self.bar is not None:
            self.bar.total = total
            if rates:
                self.bar.set_postfix_str(f"{len(rates)} worker(s), {min(rates):.1f}–{max(rates):.1f} docs/s each",
                                         refresh=False)
            self.bar.update(max(0, (min(done, total) if total is not None else done) - self.bar.n))
        elapsed = time.perf_counter() - self.started
        if self.store.update(total if total is not None else done, done, elapsed,
                             self.processed() / elapsed if elapsed else None) == "cancelled" and not self.cancelled:
            self.cancelled = True
            print("\ncancelled from the Batch page: stopping (run the command again to resume)", file=sys.stderr)
        if self.cancelled and not self._stop.is_set() and time.monotonic() - self._interrupted > REINTERRUPT_SECONDS:
            # Sent again every REINTERRUPT_SECONDS while the run goes on: on a loaded 2-core machine a cancelled
            # run went on to write every row. Once the run has stopped, runner.execute checks `cancelled` itself.
            self._interrupted = time.monotonic()
            _thread.interrupt_main()

    def summary(self, run_entry: dict) -> None:
        workers = run_entry.get("workers") or {}
        for name, w in sorted(workers.items()):
            rate = f"{w['docs_per_second']:.1f} docs/s" if w["docs_per_second"] else "-"
            print(f"  worker {name} ({w['device']}): {w['documents']} documents, {rate} while busy",
                  file=sys.stderr)


class Progress:
    """The job's counts in the workstation's store (the Batch page). Unreachable store: a warning, no more."""

    def __init__(self, store=None, job_id: int | None = None, owner: str = ""):
        self.store, self.job_id, self.owner = store, job_id, owner
        self._last = 0.0

    @classmethod
    def open(cls, job: CorpusJob, manifest: dict) -> "Progress":
        if job.store is None:
            return cls()
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        try:
            from storage.repository import open_store
            store = open_store(job.store)
            job_id = store.begin_corpus_job(
                manifest.get("store_job"), f"corpus: {job.input}", str(Path(job.output).resolve()), job.model,
                str(job.weights), owner=owner, device=job.address or "local", dtype=job.dtype or job.configured_dtype,
                batch_size=job.batch_size, optimizations=job.optimizations, options=job.options)
        except Exception as e:                        # noqa: BLE001 - the corpus job does not need the store
            print(f"warning: the job's progress will not be in the history database ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return cls()
        manifest["store_job"] = job_id
        return cls(store, job_id, owner)

    def update(self, total: int, done: int, seconds: float, rate: float | None) -> str | None:
        if self.store is None or time.perf_counter() - self._last < 1.0:
            return None
        self._last = time.perf_counter()
        try:
            return self.store.corpus_progress(self.job_id, self.owner, total=total, done=done, wall_seconds=seconds,
                                              docs_per_second=rate)
        except Exception:                             # noqa: BLE001 - a busy database must not stop the job
            log.warning("corpus job %s: progress not recorded", self.job_id, exc_info=True)
            return None

    def completed(self, manifest: dict) -> None:
        """A rerun that only turned rows a stopped run had staged into parts: the Batch page's job (cancelled or
        interrupted by that stop) ends done, with the manifest's count and the runs' time."""
        wall = sum(r.get("wall_seconds") or 0.0 for r in manifest["timings"]["runs"])
        documents = manifest["counts"]["documents"]
        self.end(manifest, {"status": "done", "wall_seconds": wall, "docs_per_second": documents / wall if wall else None})

    def end(self, manifest: dict, run_entry: dict, watcher: Watcher | None = None) -> None:
        if self.store is None:
            return
        status = run_entry["status"]
        if status == "done":                          # every part written: the manifest has the exact count
            done = total = manifest["counts"]["documents"]
        else:
            done, total = watcher.totals()
        self._last = 0.0
        self.update(total if total is not None else done, done, run_entry["wall_seconds"], run_entry["docs_per_second"])
        outcome = "done" if status == "done" else "cancelled" if status in ("cancelled", "interrupted") else "failed"
        error = None if outcome == "done" else (
            f"{status}: run the same corpus command again to resume; finished shards are kept")
        try:
            self.store.end_corpus_job(self.job_id, self.owner, outcome, error)
        except Exception:                             # noqa: BLE001
            log.warning("corpus job %s: end not recorded", self.job_id, exc_info=True)
        finally:
            self.store.close()
