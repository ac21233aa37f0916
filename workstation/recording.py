"""`extract`'s run kept in the history database as it goes, on a thread of its own.

Documents and results go to storage's RunWriter in short transactions as they arrive, and the run's measurements
at the end. Most of recording is SQLite's own work (dense outputs: the search index over every span), which
releases the interpreter: on its own thread it overlaps the run instead of adding to it. The queue between them
is bounded, so a run that outpaces the store waits for it rather than holding its results. A failure to record
only warns: the output file is what the command is for.
"""
from __future__ import annotations

import queue
import sys
import threading
import time

WAITING = 256        # documents queued for the store at most


class History:
    def __init__(self, settings):
        self.settings, self.writer = settings, None
        self.queue: queue.Queue | None = None
        self.thread: threading.Thread | None = None
        self.error: Exception | None = None
        self.dropping = False                  # abandoned: what is still queued is not written
        self.waited = 0.0                       # seconds `finish` waited for the queue after the run

    def start(self, report) -> None:
        self._try(lambda: self._open(report))

    def _open(self, report) -> None:
        from storage.repository import open_store
        self.writer = open_store(self.settings.path(self.settings.database)).run_writer("cli")
        self.writer.start(report)
        self.queue = queue.Queue(WAITING)
        self.thread = threading.Thread(target=self._record, name="history-writer", daemon=True)
        self.thread.start()

    def _record(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.error is None and not self.dropping:
                try:
                    self.writer.add(*item)
                except Exception as e:          # noqa: BLE001 - reported by finish; the run goes on
                    self.error = e

    def add(self, document, result) -> None:
        if self.queue is not None and self.error is None:
            self.queue.put((document, result))

    def finish(self, report, settings_snapshot: dict) -> None:
        if self.writer is None:
            return
        start = time.perf_counter()
        self._stop()
        self.waited = time.perf_counter() - start
        if self.error is not None:
            self._warn(self.error)
            self.abandon()
            return
        self._try(lambda: self.writer.finish(report, settings_snapshot))
        self._close()

    def abandon(self) -> None:
        self.dropping = True
        self._stop()
        if self.writer is not None:
            try:
                self.writer.abandon()
            except Exception:           # noqa: BLE001 - the run failed already; its error is the one to show
                pass
        self._close()

    def _stop(self) -> None:
        """The thread ends after what is queued (skipped when dropping)."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = self.queue = None

    def _close(self) -> None:
        if self.writer is not None:
            self.writer.store.close()
            self.writer = None

    def _try(self, write) -> None:
        try:
            write()
        except Exception as e:          # noqa: BLE001 - reported, the run itself goes on
            self._warn(e)
            self.abandon()

    @staticmethod
    def _warn(error: Exception) -> None:
        print(f"warning: the run was not recorded in the history ({type(error).__name__}: {error})", file=sys.stderr)
