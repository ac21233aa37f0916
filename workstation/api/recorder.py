"""The API's runs go into the history on a thread of their own, many per transaction.

Recording a run costs several milliseconds of ORM work and a commit; done by the lane's worker it kept
the device waiting after every pass, and one transaction per request made the store the limit of a busy
server. Here the worker hands each request's run over and goes on with the next pass, and this thread
writes whatever has gathered in one transaction (a group commit, `Store.record_runs`). A request's
response still waits for its own run id, so a run is in History when its response arrives.
"""
from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from contracts.domain import Document
from contracts.report import RunReport
from storage.repository import Store

log = logging.getLogger(__name__)
MAX_GROUP = 256                 # runs written in one transaction at most


@dataclass
class _Pending:
    report: RunReport
    documents: list[Document]
    snapshot: dict
    run_id: Future = field(default_factory=Future)


class Recorder:
    def __init__(self, store: Store, source: str = "api"):
        self.store, self.source = store, source
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="api-recorder", daemon=True)
        self._thread.start()

    def record(self, report: RunReport, documents: list[Document], snapshot: dict) -> Future:
        """A future of the run's id (None when the store could not take it: the results stand regardless)."""
        pending = _Pending(report, documents, snapshot)
        self._queue.put(pending)
        return pending.run_id

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < MAX_GROUP:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)            # stop after this group
                    break
                group.append(item)
            self._write(group)

    def _write(self, group: list[_Pending]) -> None:
        try:
            ids = self.store.record_runs([(p.report, p.documents, self.source, p.snapshot) for p in group])
        except Exception as e:                   # noqa: BLE001 - the results stand; the response says so
            log.warning("%d API run(s) were not recorded: %s", len(group), e)
            ids = [None] * len(group)
        for pending, run_id in zip(group, ids):
            pending.run_id.set_result(run_id)
