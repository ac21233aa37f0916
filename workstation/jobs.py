"""Background batch jobs: a queued job's documents go through a model slice by slice, resumably.

A `JobRunner` runs jobs one after another in its own thread (never the Streamlit script thread). A job
gets one worker thread and one model per device (every CUDA GPU for device "auto"/"cuda", else one; the
model is loaded by the worker, or borrowed per slice from the model shelf of the process: the UI's and the
API's runners share their shelf, so a job uses the model a page already loaded on that device). Each worker
claims a slice of pending documents from the database, runs it through `engine.run` like every other
surface, and commits the results with the progress counters and the slice's stage timings in one
transaction at the end of the slice, and also inside it every PROGRESS_S (a sign of life in a long slice). So:
- a kill loses at most the claimed, uncommitted documents; the next runner puts them back and redoes them;
- cancel is the job's status in the database, checked before each slice is claimed (any process may set it);
- progress (done/total, docs/s, seconds per stage) is in the database for any page or process to read.
When every document is done the runner records a Run (source 'batch') with all results in input order.

A job runs with the settings it was queued with. Each slice sets the job's optimizations and dtype on the
model it borrows (engine.run, under the model's lock), and a page's run in between sets its own: toggling
optimizations in the UI while a job runs changes the page's next run, never the job's slices. A page that
asks for another model, weights or dtype on the job's device makes the shelf unload the job's model after
the slice in hand, and the job's next slice loads its own again: the two take turns, never two copies.

A job's documents are checked when it is queued (the Batch page and the API queue nothing from a bad
upload) and, like every run's, by engine.run as each slice runs: a queued job may run after a restart, under
another version of its model plugin.
"""
from __future__ import annotations

import gc
import logging
import math
import os
import queue
import socket
import threading
import time
import uuid
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

import psutil
import torch

from contracts.domain import Document, Result
from contracts.model import LoadedModel
from contracts.report import RunReport
from contracts.words import plural
from storage.repository import Store
from storage.views import JobStatus, StoreBusy
from workstation import engine
from workstation.run_config import RunConfig
from workstation.settings import Settings, load_settings

log = logging.getLogger(__name__)
HEARTBEAT_S = 10.0
PROGRESS_S = 2.0
REUSE_MARGIN_S = 5.0                # a process this much younger than the owner's last heartbeat is not the owner
BUSY_DELAYS = (5.0, 15.0, 30.0)     # a job's extra patience with a busy store (workstation/jobs.py _patiently)
Borrow = Callable[[JobStatus, str], AbstractContextManager[LoadedModel]]


def owner_is_dead(owner: str | None, heartbeat_at: datetime | None, stale_after_s: float) -> bool:
    """Is the runner named `owner` ("host:pid:token") gone? Its process has exited or is a zombie (same host),
    its pid now belongs to a process started after the owner's last heartbeat (reused), or it has not sent a
    heartbeat for `stale_after_s` (another host, a hung process)."""
    if not owner:
        return True
    if heartbeat_at is None or datetime.now(timezone.utc) - heartbeat_at > timedelta(seconds=stale_after_s):
        return True
    host, _, rest = owner.partition(":")
    pid = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        process = psutil.Process(int(pid))
        # create_time is only good to about a second (the boot time it counts from is whole seconds): a margin.
        reused = process.create_time() > heartbeat_at.timestamp() + REUSE_MARGIN_S
        return reused or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:         # a zombie whose details cannot be read is one too
        return True
    except psutil.AccessDenied:
        return False                     # alive, run by another user


def job_config(job: JobStatus, settings: Settings | None = None) -> RunConfig:
    """A queued job's run configuration: the settings it was queued with (its optimizations were resolved
    then, so each must apply; its dtype is the configured one, which an optimization may override), and
    today's tuple cap from settings.toml, read once for the job."""
    cap = (settings or load_settings()).max_tuples_per_document
    return RunConfig(job.model, Path(job.weights), job.device, None, tuple(job.optimizations), job.options,
                     job.batch_size, configured_dtype=job.dtype, max_tuples=cap,
                     demo=engine.family(job.model).is_demo(Path(job.weights)))


@dataclass
class _JobRun:
    """What a job's device workers share during one session of the job."""

    job: JobStatus
    slice_size: int
    config: RunConfig                     # what every slice runs with: the job's settings, resolved once
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    model_info: dict | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: float | None = None
    last_commit: float = 0.0
    docs: int = 0

    def ready(self, report: RunReport) -> float:
        """A slice's run has its model set up (engine.run's on_start). Returns the seconds of the job so far
        (earlier sessions' wall time included), where the slice's back-offs are placed."""
        with self.lock:
            now = time.perf_counter()
            if self.started is None:             # time counts from the first model ready, as in engine.run
                self.started = self.last_commit = now
            if self.model_info is None:
                self.model_info = {"demo": report.demo, "dtype": report.dtype, "attention": report.attention,
                                   "optimizations": dict(report.optimizations)}
            return self.job.wall_seconds + now - self.started

    def committed(self, n: int) -> tuple[float, float]:
        """(wall seconds since the previous commit of any worker, docs/s of this session). Intervals between
        commits do not overlap, so with several GPUs the job's wall time is not counted twice."""
        with self.lock:
            now = time.perf_counter()
            seconds, self.last_commit = now - self.last_commit, now
            self.docs += n
            return seconds, self.docs / max(now - (self.started or now), 1e-9)

    def fail(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)
        self.stop.set()


class JobRunner:
    """Runs queued jobs in a background thread, one job at a time, each spread over the available devices.

    devices:    overrides the choice of devices (["cpu", "cpu"]: two workers on the CPU)
    slice_size: documents per claim (default 4 x batch size, at least 16)
    progress_s: inside a slice, the documents done so far are committed (and counted in the job's progress)
                when this many seconds have passed since the last commit; the rest at the end of the slice
    borrow:     borrow(job, device) -> a context manager lending a loaded model for one slice (the model
                shelf of the UI or the API, so a job and the pages share one model per GPU and take turns
                between slices). Without it each device worker loads its own model for the job.
    """

    def __init__(self, store: Store, devices: Sequence[str] | None = None, slice_size: int | None = None,
                 heartbeat_s: float = HEARTBEAT_S, borrow: Borrow | None = None, progress_s: float = PROGRESS_S):
        self.store = store
        self.progress_s = progress_s
        self.busy_delays = BUSY_DELAYS
        self.borrow = borrow
        self.devices = list(devices) if devices else None
        self.slice_size = slice_size
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = max(6 * heartbeat_s, 30.0)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # Job ids are given in submission order: the oldest waiting job runs next, also when an older one comes
        # back (a dead runner's job requeued at start, a cancelled one resumed) after newer ones were queued.
        self._queue: queue.PriorityQueue[int] = queue.PriorityQueue()
        self._waiting: set[int] = set()
        self._current: int | None = None
        self._thread: threading.Thread | None = None
        self._changed = threading.Condition()

    # ---- the UI's side --------------------------------------------------------------------------------

    def submit(self, job_id: int) -> None:
        """Queue a job to run in the background (no-op if it is already waiting). A job that is the current
        one is queued again: it was cancelled and resumed while its session was still ending, and that
        session stops at its next claim (the job is no longer 'running'), so it needs a new one."""
        with self._changed:
            if job_id in self._waiting:
                return
            self._waiting.add(job_id)
            self._queue.put(job_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._dispatch, name="ie-workstation-jobs", daemon=True)
                self._thread.start()

    def cancel(self, job_id: int) -> bool:
        """Stop the job after the slice in hand; its status becomes 'cancelled'."""
        return self.store.cancel_job(job_id)

    def resume_unfinished(self) -> list[int]:
        """On app start: the jobs a process that is gone left running go back to the queue (so they show as
        queued while older ones run), then every queued job is submitted, oldest first."""
        self.store.requeue_orphans(self._is_dead)
        resumed = []
        for job in self.store.unfinished_jobs():
            if job.corpus_output:
                continue                          # its corpus command runs it (launcher.py corpus)
            if job.status == "queued" or job.owner == self.owner:
                self.submit(job.id)
                resumed.append(job.id)
        return resumed

    def is_busy(self, job_id: int | None = None) -> bool:
        """Is the job (or any job) waiting or running in this runner?"""
        with self._changed:
            return self._busy(job_id)

    def wait(self, job_id: int | None = None, timeout: float | None = None) -> bool:
        """Block until the job (or every job) submitted here has stopped running. False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._busy(job_id), timeout)

    def _busy(self, job_id: int | None) -> bool:
        if job_id is None:
            return bool(self._waiting) or self._current is not None
        return job_id in self._waiting or job_id == self._current

    def _dispatch(self) -> None:
        while True:
            with self._changed:
                if self._queue.empty():
                    self._thread = None
                    return
                job_id = self._queue.get()
                self._waiting.discard(job_id)
                self._current = job_id
            try:
                self.run_job(job_id)
            except Exception:                                    # run_job records failures; this is a bug
                log.exception("job %s: runner error", job_id)
            finally:
                with self._changed:
                    self._current = None
                    self._changed.notify_all()

    # ---- running a job (blocking; a process of its own may call this directly) -------------------------

    def run_job(self, job_id: int) -> JobStatus:
        if not self.store.take_job(job_id, self.owner, self._is_dead):
            return self.store.get_job(job_id)                 # finished, cancelled, or run by a live process
        job = self.store.get_job(job_id)
        beat_stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(job_id, beat_stop), daemon=True)
        beat.start()
        try:
            devices = self._devices(job)
            run = _JobRun(job, self.slice_size or max(4 * job.batch_size, 16), job_config(job))
            slices_left = math.ceil((job.total - job.done) / run.slice_size)
            devices = devices[:max(slices_left, 1)]             # no GPU loads a model for nothing
            workers = [threading.Thread(target=self._work, args=(run, device, i), name=f"job-{job_id}-{device}")
                       for i, device in enumerate(devices[:slices_left])]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            self._patiently(lambda: self._conclude(run, devices))      # finish_job resumes where it stopped
        except Exception as e:
            log.exception("job %s failed", job_id)
            self.store.fail_job(job_id, f"{type(e).__name__}: {e}", self.owner)
        finally:
            beat_stop.set()
        return self.store.get_job(job_id)

    def _conclude(self, run: _JobRun, devices: list[str]) -> None:
        job_id = run.job.id
        if run.errors:
            self.store.fail_job(job_id, "; ".join(run.errors), self.owner)
            return
        state = self.store.get_job(job_id)
        if state.status == "cancelled":
            self.store.release_items(job_id)               # claims a failed slice left; requeue redoes them
            return
        if state.status != "running" or state.owner != self.owner:
            return                                         # taken over by another runner: leave it alone
        if state.done < state.total:                       # nothing left to claim yet not all done: say so
            self.store.fail_job(job_id, f"stopped with {plural(state.total - state.done, 'document')} not done", self.owner)
            return
        info = run.model_info or {"demo": engine.family(run.job.model).is_demo(Path(run.job.weights)),
                                  "dtype": run.job.dtype, "attention": "", "optimizations": {
                                      name: "" for name in run.job.optimizations}}
        self.store.finish_job(job_id, self.owner, device=",".join(devices), **info)

    def _work(self, run: _JobRun, device: str, index: int) -> None:
        job, claimer = run.job, f"{self.owner}:{device}:{index}"
        try:
            with self._models(job, device) as lend:
                while not run.stop.is_set():
                    claimed = self.store.claim_items(job.id, claimer, run.slice_size, owner=self.owner)
                    if not claimed:
                        break                               # all claimed, cancelled, or taken over
                    self._run_slice(run, lend, claimed)
        except Exception as e:
            log.exception("job %s on %s", job.id, device)
            run.fail(f"{device}: {type(e).__name__}: {e}")

    def _run_slice(self, run: _JobRun, lend: engine.Lend, claimed: list[tuple[int, Document]]) -> None:
        """One claimed slice through engine.run, as every surface runs documents: the job's optimizations and
        dtype set on the model, each document checked, stage timings measured. The documents done are
        committed every `progress_s` (a sign of life inside a long slice), the rest with the slice's
        measurements at its end."""
        job, positions = run.job, [p for p, _ in claimed]
        done: list[tuple[int, Result]] = []
        last_commit, began, produced = time.monotonic(), 0.0, 0

        def started(report: RunReport) -> None:
            nonlocal began
            began = run.ready(report)

        def finished(document: Document, result: Result) -> None:
            nonlocal done, last_commit, produced
            done.append((positions[produced], result))
            produced += 1
            if produced < len(claimed) and time.monotonic() - last_commit >= self.progress_s:
                self._commit(run, done)
                done, last_commit = [], time.monotonic()

        report = engine.run(lend, [d for _, d in claimed], run.config, family=engine.family(job.model),
                            on_start=started, on_result=finished, keep_results=False)
        backoffs = [{**b, "at_seconds": round(began + b["at_seconds"], 3)} for b in report.backoffs]
        self._commit(run, done, tokens=report.tokens, peak=report.peak_memory_bytes, stages=report.stages,
                     backoffs=backoffs)

    def _commit(self, run: _JobRun, done: list[tuple[int, Result]], tokens: int = 0, peak: int | None = None,
                stages: dict[str, float] | None = None, backoffs: list[dict] | None = None) -> None:
        seconds, rate = run.committed(len(done))
        self._patiently(lambda: self.store.complete_items(run.job.id, done, seconds=seconds, tokens=tokens,
                                                          peak_memory_bytes=peak, docs_per_second=rate,
                                                          stages=stages, backoffs=backoffs))

    def _patiently(self, write: Callable[[], object]) -> object:
        """A write the job cannot do without (its results, its run): a busy store is waited out a while
        longer than the store itself waits, since the results in hand would otherwise be computed again."""
        for delay in (*self.busy_delays, None):
            try:
                return write()
            except StoreBusy:
                if delay is None:
                    raise
                log.warning("the history database is busy; the job retries in %.0f s", delay)
                time.sleep(delay)

    @contextmanager
    def _models(self, job: JobStatus, device: str) -> Iterator[engine.Lend]:
        """Yields the Lend each slice's engine.run takes its model from: `self.borrow` (the shelf's model for
        this device, taken in turns with the pages between slices), or a model this worker loads at its
        first slice and frees at the end of the job."""
        if self.borrow is not None:
            yield lambda: self.borrow(job, device)
            return
        own: list[LoadedModel] = []

        @contextmanager
        def lend() -> Iterator[LoadedModel]:
            if not own:
                own.append(engine.load_model(job.model, Path(job.weights), device, job.dtype))
            yield own[0]
        try:
            yield lend
        finally:
            on_cuda = bool(own) and own[0].device.startswith("cuda")
            own.clear()                                     # drop the last reference before freeing GPU memory
            gc.collect()
            if on_cuda:
                torch.cuda.empty_cache()

    def _devices(self, job: JobStatus) -> list[str]:
        if self.devices:
            return self.devices
        if job.device in ("auto", "cuda", "") and torch.cuda.is_available():
            return [f"cuda:{i}" for i in range(torch.cuda.device_count())]     # one model per GPU
        return [engine.resolve_device(job.device)]

    def _heartbeat(self, job_id: int, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat_s):
            try:
                self.store.heartbeat(job_id, self.owner)
            except Exception:                                # a busy database must not kill the job
                log.warning("job %s: heartbeat failed", job_id, exc_info=True)

    def _is_dead(self, owner: str | None, heartbeat_at: datetime | None) -> bool:
        return owner != self.owner and owner_is_dead(owner, heartbeat_at, self.stale_after_s)

