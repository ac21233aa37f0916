"""A throwaway model plugin for the job tests, and the child process a test kills mid-job.

The fake model is deterministic (one span: the first character) and can be made to block on a document:
in-process through `GATES` (a threading.Event per document id), in a child process through the
environment variable FAKE_MODEL_STALL_ON (the child hangs there until it is killed).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from contracts.domain import Document, InputError, Result, Span
from contracts.hookspecs import hookimpl
from contracts.model import DEMO_MARKER, Knobs, LoadedModel, ModelFamily
from tests.registered import plugin_registered

PROCESSED: list[tuple[int, str]] = []           # (id of the model instance, document id), in processing order
LOADS: list[str] = []                           # devices a model was loaded on
GATES: dict[str, threading.Event] = {}


class FakeModel(LoadedModel):
    def __init__(self, family: ModelFamily, weights: Path, device: str, dtype: str):
        self.family, self.weights, self.device, self.is_demo = family, Path(weights), device, True
        self.knobs = Knobs(dtype=dtype)
        self._tokens = 0

    def extract(self, documents: Sequence[Document], batch_size: int = 8,
                on_progress: Callable[[int], None] | None = None, **options) -> Iterator[Result]:
        if options.get("backoff"):
            self.clock.backoff(options["backoff"])      # as a model that ran out of GPU memory and halved its batch
        for doc in documents:
            PROCESSED.append((id(self), doc.id))
            if doc.id in GATES:
                GATES[doc.id].wait(30)
            if os.environ.get("FAKE_MODEL_STALL_ON") == doc.id:
                time.sleep(3600)                # the test kills the process here, mid-slice
            if options.get("fail_on") == doc.id:
                raise RuntimeError(f"fake model cannot read {doc.id}")
            time.sleep(options.get("delay", 0.0))
            self._tokens += len(doc.text)
            # option "tuples": that many copies of the one tuple (a document that yields too many)
            yield Result(doc.id, [[Span("first", doc.text[0], (0, 1), 1.0)] for _ in range(options.get("tuples", 1))])

    def set_dtype(self, dtype: str) -> None:
        self.knobs.dtype = dtype

    def tokens_processed(self) -> int:
        return self._tokens


class FakeFamily(ModelFamily):
    name = "fake"
    title = "Fake model (tests)"
    tasks: dict = {}

    def validate(self, document: Document) -> None:
        if not document.text:
            raise InputError(f"document {document.id!r} has no text", document.line)

    def load(self, weights: Path, device: str = "cpu", dtype: str = "fp32") -> LoadedModel:
        LOADS.append(device)
        return FakeModel(self, weights, device, dtype)

    def write_demo_weights(self, out_dir: Path, size: str = "full") -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / DEMO_MARKER).write_text("random")
        (out_dir / "config.json").write_text("{}")
        return out_dir


class FakeModelPlugin:
    __name__ = "FakeModelPlugin"

    @hookimpl
    def register_models(self, register):
        register(FakeFamily())


def registered():
    return plugin_registered(FakeModelPlugin(), "undo-fake-model")


def main() -> None:
    """Child process: run one job with the fake model (argv: db path, job id, slice size)."""
    os.environ.setdefault("IEW_LOAD_PLUGINS", "")        # the built-in plugins only, as in the tests
    from storage import open_store
    from workstation.jobs import JobRunner

    db, job_id, slice_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with registered():
        JobRunner(open_store(db), devices=["cpu"], slice_size=slice_size).run_job(job_id)


if __name__ == "__main__":
    main()
