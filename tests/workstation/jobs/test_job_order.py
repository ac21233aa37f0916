"""Which job runs next: a dead runner's job goes back to the queue at start, and queued jobs run in the order
they were submitted (issue #28)."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading

from contracts.domain import Document
from tests.workstation.jobs.test_job_runner import wait_for
from workstation.jobs import JobRunner


def job(store, weights, name: str, n: int = 4) -> int:
    docs = [Document(f"{name}-{i}", f"{name}文本{i}", line=i + 1) for i in range(n)]
    return store.create_job(docs, "fake", str(weights), 2, [], {}, f"{name}.jsonl", device="cpu")


def dead_owner() -> str:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return f"{socket.gethostname()}:{gone.pid}:killed-server"


def jobs_in_processing_order(fake) -> list[str]:
    order: list[str] = []
    for _, doc in fake.PROCESSED:
        name = doc.split("-")[0]
        if not order or order[-1] != name:
            order.append(name)
    return order


def test_a_dead_runners_job_shows_as_queued_while_an_older_job_runs(store, fake, weights):
    older, orphan = job(store, weights, "older"), job(store, weights, "orphan")
    owner = dead_owner()
    # The killed server had taken the newer job and claimed its first slice.
    assert store.take_job(orphan, owner, lambda *_: True)
    assert len(store.claim_items(orphan, f"{owner}:cpu:0", 2, owner=owner)) == 2
    fake.GATES["older-0"] = gate = threading.Event()
    runner = JobRunner(store, slice_size=2)
    assert runner.resume_unfinished() == [older, orphan]
    wait_for(lambda: "older-0" in [doc for _, doc in fake.PROCESSED], what="the older job to start")
    left = store.get_job(orphan)
    assert (left.status, left.owner) == ("queued", None)                     # not "running", frozen
    assert [p for p, _ in store.job_items_pending(orphan)] == [0, 1, 2, 3]   # its claims are free again
    gate.set()
    assert runner.wait(timeout=60)
    assert [store.get_job(j).status for j in (older, orphan)] == ["done", "done"]
    assert jobs_in_processing_order(fake) == ["older", "orphan"]


def test_queued_jobs_run_in_the_order_they_were_submitted(store, fake, weights):
    first, second, third = (job(store, weights, name) for name in ("first", "second", "third"))
    fake.GATES["first-0"] = gate = threading.Event()
    runner = JobRunner(store, slice_size=2)
    runner.submit(first)
    wait_for(lambda: "first-0" in [doc for _, doc in fake.PROCESSED], what="the first job to start")
    runner.submit(third)             # handed over out of order (an older job resumed after a newer one)
    runner.submit(second)
    gate.set()
    assert runner.wait(timeout=60)
    assert jobs_in_processing_order(fake) == ["first", "second", "third"]
