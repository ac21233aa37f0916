"""Host workers: the host's share of a run (tokenising, window layout, decoding, serialising) in processes of
its own, while this process keeps the device fed.

Why processes: dense outputs cost the host about 5 µs of Python per span, in one interpreter, so a run was
as slow as its host however fast the device (docs/performance.md §5). Each worker runs whole groups of
documents through the reference's prompt loop (pipeline.start_group / Group.take) with its own Prompter;
this process only batches the windows the workers hand over, scores them, hands the links back, and yields
the finished Results in input order. Results cross as their JSON bytes (transport.py), so writing them needs
no per-span work here either; the bytes go through a file, not the pipe.

A worker imports neither torch nor transformers (its tokenizer comes as a pickled prompting.Vocabulary, its links
as numpy arrays): with them, each of a dozen workers spent seconds importing, inside the run that waited for it.

A run starts in its own process, with no workers, and starts them only where they gain (HandOver): while its own
thread is the bottleneck, busy decoding and writing, and the device waits for it. It hands its remaining documents
over once they are up. Sparse output keeps the device busy, and there the workers lost to one process
(docs/benchmarks.md, "Host workers that start only where they gain").

Messages, each a tuple (kind, group number, payload):
  to a worker:   ("start", k, documents)  ("links", k, links)  and None to stop
  from a worker: ("ready", 0, None) once, when it can take work; ("windows", k, windows)
                 ("done", k, (headers, outputs, stage seconds))  ("failed", k, exception)
"""
from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import queue
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np

from contracts.domain import Document, Result
from contracts.stages import StageClock
from plugins.rexuninlu.pipeline import AHEAD, Group, start_group, to_result
from plugins.rexuninlu.prompting import Prompter, Vocabulary
from plugins.rexuninlu.transport import spool, unspool

if TYPE_CHECKING:       # the run's process has them; a worker never imports torch (above)
    from plugins.rexuninlu.scoring import Scoring, WindowScorer

# Groups a worker holds at once: one waiting on the device while it prepares or decodes the other.
GROUPS_PER_WORKER = 2
# A group is this share of a batch: many groups, so every worker has work and the last one ends soon after the
# device; the windows of every group that is in are scored together, so batches still fill up. A quarter beat
# a half on dense output (docs/benchmarks.md, host workers).
GROUP_SHARE = 4
# How long the run's process waits for a message while the device works on what it has, before it looks
# whether the oldest set is done (it reads back only what is done, and takes messages meanwhile).
POLL_SECONDS = 0.001
# Beside the spooled results (transport.py), read by every worker as it starts.
VOCABULARY_FILE = "vocabulary.pickle"
# A run hands over to the workers once its own thread spends this share of its time decoding and writing (HandOver)
HOST_BOUND = 1 / 3
# ... while the device waits on it: busy for less than this share of the same interval. From outside on an H100, 10,000
# documents (docs/benchmarks.md, "Host workers that start only where they gain"): sparse output, 83-95 % busy in its
# own process, took 1.14-1.15x the wall with the workers, having crossed HOST_BOUND too; realistic, 64-74 %, 0.80x;
# dense, 27-47 %, 0.65-0.69x.
DEVICE_BOUND = 0.75
# The workers run below the run's own process, which feeds the device: while a dozen of them boot (seconds of
# imports in all), the run's captures and first batches keep their cores (docs/benchmarks.md).
WORKER_NICENESS = 10
# The share is measured over intervals at least this long (at group boundaries), so one slow group decides nothing.
INTERVAL_S = 0.25


class HostWorkers:
    """A pool of worker processes for one tokenizer, started when first used and kept for later runs."""

    def __init__(self, vocabulary: Vocabulary, count: int):
        self.vocabulary, self.count = vocabulary, count
        self.pipes: list[Connection] = []
        self.processes: list = []
        self.starting: list[Connection] = []      # workers that have not said they are ready
        self.spool: tempfile.TemporaryDirectory | None = None     # where the workers spool their results' bytes

    def start(self) -> None:
        if self.pipes:
            return
        # Removed by close(), or when this process ends without it. Without one (no writable temporary folder),
        # results cross the pipe whole.
        try:
            self.spool = tempfile.TemporaryDirectory(prefix="iew-results-", ignore_cleanup_errors=True)
        except OSError:
            self.spool = None
        # The tokenizer (some 150 KB pickled) goes by file where it can: among a spawned process's arguments it held
        # this process at each start until that worker had booted and read it (a pipe holds 64 KB), one after another.
        vocabulary: Vocabulary | Path = self.vocabulary
        if self.spool is not None:
            vocabulary = Path(self.spool.name) / VOCABULARY_FILE
            vocabulary.write_bytes(pickle.dumps(self.vocabulary))
        # spawn, not fork: the parent holds CUDA state and threads (the UI's, the monitor's, the prefetch thread).
        context = multiprocessing.get_context("spawn")
        niceness = min(19, os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICENESS) if hasattr(os, "getpriority") else None
        for i in range(self.count):
            mine, theirs = context.Pipe()
            process = context.Process(target=work, args=(theirs, vocabulary, self.folder), daemon=True,
                                      name=f"rexuninlu-host-{i}")
            process.start()
            theirs.close()
            try:
                if niceness is not None:                # None: no such call (Windows)
                    os.setpriority(os.PRIO_PROCESS, process.pid, niceness)
            except OSError:                             # not allowed: they run as they are
                pass
            self.pipes.append(mine)
            self.processes.append(process)
        self.starting = list(self.pipes)

    def ready(self, wait: float | None = 0.0) -> bool:
        """Whether every worker is up and can take work. wait: seconds to wait for them (None: as long as it takes)."""
        deadline = None if wait is None else time.monotonic() + wait
        try:
            while self.starting:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                for pipe in wait_for(self.starting, timeout=left):
                    receive(pipe)                      # ("ready", 0, None): a worker sends nothing else unasked
                    self.starting.remove(pipe)
                if deadline is not None and time.monotonic() >= deadline:
                    break
        except RuntimeError:
            # One died before it took any work: nothing of a run is lost. The pool goes; the run that asked stays in
            # its own process, and a later one starts the workers afresh.
            self.close()
        return bool(self.pipes) and not self.starting

    def close(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:
                pass
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
        self.pipes, self.processes, self.starting = [], [], []
        if self.spool is not None:
            self.spool.cleanup()                # with the files of the groups a run left half way
            self.spool = None

    @property
    def folder(self) -> str:
        return self.spool.name if self.spool else ""

    def run(self, scorer: WindowScorer, documents: Sequence[Document], batch_size: int,
            on_progress: Callable[[int], None] | None = None, clock: StageClock | None = None) -> Iterator[Result]:
        """Every document's Result in input order (each holding its output's JSON: transport.py)."""
        self.start()
        if not self.ready(wait=None):
            raise RuntimeError(STOPPED)
        try:
            scorer.batch_rows = batch_size
            scorer.capture_all()             # which shapes come depends on timing: none is captured mid-run
            for done, result in enumerate(Relay(self.pipes, scorer, documents, batch_size, clock).results(), 1):
                yield result
                if on_progress:
                    on_progress(done)
        except BaseException:
            # A run left half way (an error, a cancel, a closed generator) leaves groups in the workers.
            self.close()
            raise


class HandOver:
    """Whether a run moves on to the workers, asked at its group boundaries (pipeline.run_documents' more()).

    Once per interval of at least INTERVAL_S it measures two shares of the interval: the run's own thread decoding
    and writing (the clock's decode and write stages, both on that thread), and the device busy (the GPU time of the
    brackets it has finished). The first interval where the first reaches HOST_BOUND while the second stays under
    DEVICE_BOUND asks for the workers: they start then, if they are not up already (kept from an earlier run), and
    the rest of the run, later slices included, goes to them once every one is up. So a run that keeps the device
    busy (sparse output) never starts them, and pays nothing; one bound by its own host work pays about 20 ms of
    its thread for the start and goes on in its own process while they boot."""

    def __init__(self, workers: HostWorkers, documents: int | None = None, least: int = 0):
        self.workers = workers
        # A hand-over costs the run a fixed share (the workers' start, the shapes captured first, the queue drained):
        # it needs at least `least` of its documents left. `documents`: the run's own count, when it is known.
        self.documents, self.least = documents, least
        self.wanted = False                  # the run asked for the workers (started then)
        self.done = False                    # decided: the rest of the run goes to the workers
        self.after = 0                       # documents the run's own process did (the family counts them)
        self.share: float | None = None      # of the last interval measured: decoding and writing
        self.busy: float | None = None       # ... and the device
        self._mark: tuple[float, float, float] | None = None

    def stay(self, clock: StageClock, done: int = 0) -> bool:
        """done: documents this run's own process has finished so far."""
        if self.done:
            return False
        now = time.perf_counter()
        if self._mark is not None and now - self._mark[0] < INTERVAL_S:
            return True                      # most boundaries: no reading of the clock's events
        host, device = clock.seconds["decode"] + clock.seconds["write"], clock.device_seconds()
        if self._mark is None:
            self._mark = (now, host, device)
            return True
        span = now - self._mark[0]
        self.share, self.busy = (host - self._mark[1]) / span, (device - self._mark[2]) / span
        self._mark = (now, host, device)
        worth = self.documents is None or self.documents - done >= self.least
        if not self.wanted and worth and self.share >= HOST_BOUND and self.busy < DEVICE_BOUND:
            self.wanted = True
            self.workers.start()
        self.done = self.wanted and self.workers.ready()
        return not self.done

    def describe(self) -> str:
        """For the run's report: what the workers did in this run."""
        if self.share is None:
            return "off for this run: it ended before its first measure (it stayed in its own process)"
        measured = (f"decoding and writing took {self.share:.0%} of the run's own thread, "
                    f"the device was busy {self.busy:.0%}")
        if self.done:
            return f"handed over to the worker processes after {self.after:,} documents ({measured})"
        if self.wanted:
            return f"off for this run: it stayed in its own process (its workers were not up before it ended; {measured})"
        left = f", with {self.least:,} documents or more left" if self.documents is not None else ""
        return (f"off for this run: it stayed in its own process ({measured}; the workers take over from "
                f"{HOST_BOUND:.0%} and under {DEVICE_BOUND:.0%}{left})")


class Relay:
    """One run through the pool, as the run's process sees it: it hands the workers groups of documents, puts the
    windows they send on the device a batch's worth at a time as they come in, hands each set's links back as soon
    as the device is done with it (the workers decode one set while the device scores the next), and gives the
    finished Results out in input order."""

    def __init__(self, pipes: list[Connection], scorer: WindowScorer, documents: Sequence[Document], batch_size: int,
                 clock: StageClock | None):
        self.pipes, self.scorer, self.batch_size, self.clock = pipes, scorer, batch_size, clock
        size = max(1, batch_size // GROUP_SHARE)
        self.groups = [documents[at:at + size] for at in range(0, len(documents), size)]
        self.waiting = deque(range(len(self.groups)))              # groups no worker has started
        self.held = dict.fromkeys(pipes, 0)                         # groups each worker holds
        self.arrived: list[tuple[Connection, int, list]] = []      # windows in, not on the device yet
        self.on_device: deque[tuple[Scoring, list]] = deque()      # sets launched, oldest first, with whose windows
        self.finished: dict[int, list[Result]] = {}                # groups done, by number, until their turn

    def results(self) -> Iterator[Result]:
        for pipe in self.pipes:
            self.hand_out(pipe)
        next_out = 0
        while next_out < len(self.groups):
            # This process is the one that feeds the device, so it never waits while it has something to do:
            # it takes every message that is in, and reads back only a set the device is done with.
            busy = self.can_launch() or self.oldest_done()
            for pipe in wait_for(self.pipes, timeout=0 if busy else POLL_SECONDS if self.on_device else None):
                self.take(pipe)
                while pipe.poll():
                    self.take(pipe)
            if self.can_launch():
                self.launch()
            elif self.oldest_done():
                self.read_back()
            while next_out in self.finished:
                yield from self.finished.pop(next_out)
                next_out += 1

    def hand_out(self, pipe: Connection) -> None:
        while self.waiting and self.held[pipe] < GROUPS_PER_WORKER:
            k = self.waiting.popleft()
            deliver(pipe, ("start", k, list(self.groups[k])))
            self.held[pipe] += 1

    def take(self, pipe: Connection) -> None:
        kind, k, payload = receive(pipe)
        if kind == "windows":
            self.arrived.append((pipe, k, payload))
        elif kind == "done":
            headers, outputs, seconds = payload
            self.finished[k] = unspool(headers, outputs)
            self.held[pipe] -= 1
            self.hand_out(pipe)
            if self.clock is not None:
                for stage, s in seconds.items():
                    self.clock.add(stage, s)
        else:
            raise payload

    def in_flight(self) -> int:
        """Windows launched and not read back."""
        return sum(len(scoring.out) for scoring, _ in self.on_device)

    def can_launch(self) -> bool:
        """A batch's worth has arrived, or anything at all when the device has nothing."""
        return bool(self.arrived) and (not self.on_device or self.in_flight() < AHEAD * self.batch_size and
                                       sum(len(ws) for *_, ws in self.arrived) >= self.batch_size)

    def launch(self) -> None:
        # Whole groups, up to AHEAD batches' worth on the device (each batch holds its [B, L, L] links there).
        room, taken, count = max(self.batch_size, AHEAD * self.batch_size - self.in_flight()), 0, 0
        while taken < len(self.arrived) and count < room:
            count += len(self.arrived[taken][2])
            taken += 1
        members = self.arrived[:taken]
        del self.arrived[:taken]
        windows = [w for *_, ws in members for w in ws]
        self.on_device.append((self.scorer.submit(windows, self.batch_size, ahead=len(windows)), members))

    def oldest_done(self) -> bool:
        return bool(self.on_device) and self.on_device[0][0].finished()

    def read_back(self) -> None:
        scoring, members = self.on_device.popleft()
        links, at = scoring.result(), 0
        for pipe, k, ws in members:
            deliver(pipe, ("links", k, links[at:at + len(ws)]))
            at += len(ws)


STOPPED = ("a RexUniNLU host worker process stopped in the middle of a run (out of memory? killed?); "
           "the run stops here, before any result of the documents it held")


def receive(pipe: Connection):
    try:
        return pipe.recv()
    except (EOFError, OSError) as e:
        raise RuntimeError(STOPPED) from e


def deliver(pipe: Connection, message) -> None:
    try:
        pipe.send(message)
    except OSError as e:
        raise RuntimeError(STOPPED) from e


def work(pipe: Connection, vocabulary: Vocabulary | Path, folder: str) -> None:
    """A worker process: set up for sharing the machine, then serve."""
    if isinstance(vocabulary, Path):
        vocabulary = pickle.loads(vocabulary.read_bytes())
    # The cores are shared by the workers: one thread each for the tokenizer (whose Rust pool would otherwise
    # start a thread per core in every worker; it reads this when its first batch call starts the pool).
    os.environ["RAYON_NUM_THREADS"] = "1"
    # The inbox thread (serve) needs the interpreter for each 64 KiB it reads while this one decodes: at the
    # default 5 ms switch interval, the run's process sending links could wait that long per 64 KiB.
    sys.setswitchinterval(0.0005)
    prompter = Prompter(vocabulary)
    # What exists now (the modules, the tokenizer) is kept out of the cyclic collector, as the run's
    # process does (engine._collector_aside): a full collection over it took a worker about 0.1 s, during which it
    # read no message, so the run's process sending it links waited as long, and the device with it (seen in a trace).
    gc.freeze()
    pipe.send(("ready", 0, None))
    serve(pipe, prompter, folder)


def serve(pipe: Connection, prompter: Prompter, folder: str) -> None:
    """Groups in, windows out, links in, Results out as their JSON (spooled to `folder`: transport.py)."""
    groups: dict[int, tuple[list[Document], Group, StageClock]] = {}     # each with its own clock
    # Messages are read as they come, by a thread of their own: the run's process may send a group while this
    # one sends it windows, and with both sends waiting on full pipes neither would read.
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=read_into, args=(pipe, inbox), daemon=True, name="inbox").start()
    while (message := inbox.get()) is not None:
        kind, k, payload = message
        try:
            if kind == "start":
                clock = StageClock()
                documents, group = payload, start_group(prompter, payload, clock)
                groups[k] = documents, group, clock
            else:
                documents, group, clock = groups[k]
                with clock.stage("decode"):
                    group.take(payload)
            if group.waiting:
                # What scoring reads, the ids as an array (a third of the unpickling); the text, its offsets and
                # the hint stay here for decoding.
                pipe.send(("windows", k, [replace(w, ids=np.asarray(w.ids, np.int32), offsets=(), text="", hint=None)
                                          for w in group.windows()]))
                continue
            del groups[k]
            prompter.forget([d.text for d in documents])
            with clock.stage("write"):
                headers, outputs = spool([to_result(d, group.done[i]).without_empty_spans()
                                          for i, d in enumerate(documents)], folder, k)
            pipe.send(("done", k, (headers, outputs, clock.seconds)))
        except Exception as e:                         # noqa: BLE001 - handed to the run, which raises it
            groups.pop(k, None)
            try:
                pipe.send(("failed", k, e))
            except Exception:                          # noqa: BLE001 - an exception that does not pickle
                pipe.send(("failed", k, RuntimeError(traceback.format_exc())))


def read_into(pipe: Connection, inbox: queue.SimpleQueue) -> None:
    try:
        while (message := pipe.recv()) is not None:
            inbox.put(message)
    except (EOFError, OSError):                      # the run's process is gone
        pass
    inbox.put(None)
