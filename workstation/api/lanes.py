"""Micro-batching: concurrent extraction requests for one model on one device share forward passes.

Each (model, device) has a lane: a bounded queue and one worker thread. The worker takes the oldest
waiting request, waits up to `wait_s` for more to arrive (up to `max_documents` in all), and runs the
requests that agree on everything that can change an output (weights, dtype, optimizations, options,
batch size) as ONE pass: their documents go through the model's own batcher together, so small
requests fill each other's batches. Results go back to each request in its own input order.

Requests that disagree wait for the next pass; a pass that fails is retried one request at a time, so
one request's bad option fails that request alone. A full queue refuses at once (`QueueFull`, the API's
429); a request whose client gave up before its pass started is dropped without running.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from contracts.domain import Document
from workstation.run_config import RunConfig  # what must be equal for two requests to share a pass

log = logging.getLogger(__name__)


@dataclass
class LaneRequest:
    config: RunConfig
    documents: list[Document]
    future: Future = field(default_factory=Future)
    enqueued: float = field(default_factory=time.perf_counter)

    def abandon(self) -> None:
        """The client is gone: a request not yet running is skipped (running ones finish and are recorded)."""
        self.future.cancel()


class QueueFull(Exception):
    def __init__(self, waiting: int, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(f"{waiting} requests are already waiting for this model and device; "
                         f"retry in {retry_after_s}s or send fewer requests at once")


# execute(config, [request documents...]) -> one outcome per request, in order (a result or an exception)
Execute = Callable[[RunConfig, Sequence[LaneRequest]], Sequence[Any]]


class Lane:
    def __init__(self, name: str, execute: Execute, queue_size: int, wait_s: float, max_documents: int):
        self.name = name
        self._execute = execute
        self._queue: queue.Queue[LaneRequest] = queue.Queue(maxsize=max(queue_size, 1))
        self._wait_s = max(wait_s, 0.0)
        self._max_documents = max(max_documents, 1)
        self._held: list[LaneRequest] = []          # taken from the queue, waiting for a pass of their config
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lane-{name}", daemon=True)
        self._thread.start()

    def submit(self, request: LaneRequest) -> Future:
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            raise QueueFull(self._queue.qsize(), retry_after_s=1) from None
        return request.future

    def waiting(self) -> int:
        return self._queue.qsize() + len(self._held)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            if not self._held:
                try:
                    self._held.append(self._queue.get(timeout=0.2))
                except queue.Empty:
                    continue
            self._gather()
            batch = self._take_batch()
            if batch:
                self._run(batch)

    def _gather(self) -> None:
        """Wait a little for requests that can share the oldest one's pass."""
        deadline = time.perf_counter() + self._wait_s
        while sum(len(r.documents) for r in self._held) < self._max_documents:
            left = deadline - time.perf_counter()
            try:
                self._held.append(self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait())
            except queue.Empty:
                return

    def _take_batch(self) -> list[LaneRequest]:
        self._held = [r for r in self._held if not r.future.cancelled()]
        if not self._held:
            return []
        config, batch, rest, documents = self._held[0].config, [], [], 0
        for r in self._held:
            fits = not batch or documents + len(r.documents) <= self._max_documents
            if r.config == config and fits:
                batch.append(r)
                documents += len(r.documents)
            else:
                rest.append(r)
        self._held = rest
        # A request whose client has gone is not run; the others cannot be cancelled from now on.
        return [r for r in batch if r.future.set_running_or_notify_cancel()]

    def _run(self, batch: list[LaneRequest]) -> None:
        try:
            outcomes = list(self._execute(batch[0].config, batch))
        except Exception as e:                       # noqa: BLE001 - isolated below, or handed to the caller
            if len(batch) == 1:
                outcomes = [e]
            else:
                log.info("lane %s: a shared pass of %d requests failed (%s); running them one by one",
                         self.name, len(batch), e)
                outcomes = [self._alone(r) for r in batch]
        for request, outcome in zip(batch, outcomes):
            if isinstance(outcome, BaseException):
                request.future.set_exception(outcome)
            else:
                request.future.set_result(outcome)

    def _alone(self, request: LaneRequest) -> Any:
        try:
            return self._execute(request.config, [request])[0]
        except Exception as e:                       # noqa: BLE001 - this request's own failure
            return e


class Lanes:
    """One lane per (model, device), made on first use."""

    def __init__(self, execute: Execute, queue_size: int = 64, wait_s: float = 0.005, max_documents: int = 64):
        self._execute, self._queue_size, self._wait_s, self._max_documents = execute, queue_size, wait_s, max_documents
        self._lanes: dict[tuple[str, str], Lane] = {}
        self._lock = threading.Lock()

    def submit(self, request: LaneRequest) -> Future:
        key = (request.config.model, request.config.device)
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = Lane(f"{key[0]}@{key[1]}", self._execute, self._queue_size,
                                               self._wait_s, self._max_documents)
        return lane.submit(request)

    def lanes(self) -> dict[tuple[str, str], Lane]:
        with self._lock:
            return dict(self._lanes)

    def stop(self) -> None:
        for lane in self.lanes().values():
            lane.stop()
