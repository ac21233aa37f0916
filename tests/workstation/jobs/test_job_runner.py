"""The batch worker: every document exactly once and in order, across kills, cancels and several workers."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

from contracts.domain import Document, Result, Span
from workstation.jobs import JobRunner, owner_is_dead

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def documents(n: int) -> list[Document]:
    return [Document(f"doc-{i}", f"{'甲乙丙丁'[i % 4]}文本 {i} 🙂", line=i + 1) for i in range(n)]


def create(store, weights, n=16, batch_size=4, options=None, docs=None):
    return store.create_job(docs or documents(n), "fake", str(weights), batch_size, [], options or {}, "input.jsonl",
                            device="cpu", task="first-char")


def wait_for(condition, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def assert_each_document_once_in_order(store, job_id, docs):
    job = store.get_job(job_id)
    assert (job.status, job.done, job.total) == ("done", len(docs), len(docs)), job.error
    run = store.get_run(job.run_id)
    assert [d.id for d, _ in run.items] == [d.id for d in docs]
    assert [r.document_id for _, r in run.items] == [d.id for d in docs]
    assert all(r.tuples[0][0].span == d.text[0] for d, r in run.items)
    assert run.summary.source == "batch" and run.summary.documents == len(docs)
    return job, run


def test_job_runs_in_the_background_and_records_a_batch_run(store, fake, weights):
    docs = documents(10)
    job_id = create(store, weights, docs=docs, options={"delay": 0.001})
    runner = JobRunner(store, slice_size=4)
    runner.submit(job_id)
    assert runner.wait(job_id, timeout=60)
    job, run = assert_each_document_once_in_order(store, job_id, docs)
    assert job.docs_per_second > 0 and job.wall_seconds > 0 and job.finished_at is not None
    s = run.summary
    assert (s.model, s.task, s.device, s.demo, s.label) == ("fake", "first-char", "cpu", True, "input.jsonl")
    assert s.tokens == sum(len(d.text) for d in docs) and s.batch_size == 4
    assert [d for d, _ in run.items] == [Document(d.id, d.text) for d in docs]
    assert fake.LOADS == ["cpu"] and [doc for _, doc in fake.PROCESSED] == [d.id for d in docs]
    assert store.search_runs("甲文本")[0].id == job.run_id


def test_killed_worker_process_resumes_with_every_document_exactly_once(store, fake, weights):
    docs = documents(40)
    job_id = create(store, weights, docs=docs)
    env = {**os.environ, "FAKE_MODEL_STALL_ON": "doc-21", "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, str(HERE / "fake_model.py"), str(store.path), str(job_id), "8"],
                             env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        # Two slices committed, the third (positions 16..23) claimed and stuck at doc-21.
        wait_for(lambda: child.poll() is not None or (
            store.get_job(job_id).done == 16 and store.job_items_pending(job_id, 1)[0][0] == 24),
            what="the child to commit two slices and claim the third")
        assert child.poll() is None, child.stderr.read()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    left = store.get_job(job_id)
    assert (left.status, left.done, left.owner.split(":")[1]) == ("running", 16, str(child.pid))

    runner = JobRunner(store, slice_size=8)
    assert runner.resume_unfinished() == [job_id]
    assert runner.wait(job_id, timeout=60)
    assert_each_document_once_in_order(store, job_id, docs)
    # Only the lost slice and the rest were redone here; the committed slices were not.
    assert [doc for _, doc in fake.PROCESSED] == [d.id for d in docs[16:]]


def start_held_at_doc_5(store, fake, weights):
    """A 16-document job in slices of 4, running and held inside slice 2 (docs 4..7) at doc-5."""
    docs = documents(16)
    job_id = create(store, weights, docs=docs)
    fake.GATES["doc-5"] = gate = threading.Event()
    runner = JobRunner(store, slice_size=4)
    runner.submit(job_id)
    wait_for(lambda: "doc-5" in [doc for _, doc in fake.PROCESSED], what="slice 2 to start")
    return docs, job_id, gate, runner


def test_cancel_stops_between_slices_and_requeue_finishes_the_rest(store, fake, weights):
    docs, job_id, gate, runner = start_held_at_doc_5(store, fake, weights)
    assert runner.cancel(job_id)
    gate.set()
    assert runner.wait(job_id, timeout=60)
    job = store.get_job(job_id)
    assert (job.status, job.done, job.run_id) == ("cancelled", 8, None)   # the slice in hand was kept
    assert [doc for _, doc in fake.PROCESSED] == [d.id for d in docs[:8]]  # no slice claimed after the cancel
    assert [p for p, _ in store.job_items_pending(job_id)] == list(range(8, 16))
    assert [r is not None for _, r in store.job_results(job_id)] == [True] * 8 + [False] * 8
    assert runner.cancel(job_id) is False

    assert store.requeue_job(job_id)
    runner.submit(job_id)
    assert runner.wait(job_id, timeout=60)
    assert_each_document_once_in_order(store, job_id, docs)
    assert [doc for _, doc in fake.PROCESSED] == [d.id for d in docs]


def test_resume_right_after_cancel_while_the_slice_is_still_in_hand_gets_a_worker(store, fake, weights):
    docs, job_id, gate, runner = start_held_at_doc_5(store, fake, weights)
    assert runner.cancel(job_id)
    assert store.requeue_job(job_id)                  # Resume, before the cancelled session has ended
    runner.submit(job_id)
    gate.set()
    assert runner.wait(job_id, timeout=60)
    assert_each_document_once_in_order(store, job_id, docs)
    assert [doc for _, doc in fake.PROCESSED] == [d.id for d in docs]


def test_documents_done_inside_a_long_slice_show_in_the_job_progress(store, fake, weights):
    docs = documents(8)
    job_id = create(store, weights, docs=docs)
    fake.GATES["doc-5"] = gate = threading.Event()                     # the one slice blocks at doc-5
    runner = JobRunner(store, slice_size=8, progress_s=0.0)
    runner.submit(job_id)
    try:
        wait_for(lambda: store.get_job(job_id).done == 5, timeout=30, what="docs 0..4 to be committed mid-slice")
        assert [r is not None for _, r in store.job_results(job_id)] == [True] * 5 + [False] * 3
    finally:
        gate.set()
    assert runner.wait(job_id, timeout=60)
    assert_each_document_once_in_order(store, job_id, docs)


def test_a_slice_whose_commit_meets_a_busy_store_is_committed_once_the_store_frees(store, fake, weights,
                                                                                   monkeypatch):
    from storage.views import StoreBusy
    docs = documents(6)
    job_id = create(store, weights, docs=docs)
    real, calls = store.complete_items, []

    def busy_at_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise StoreBusy("locked by another process")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "complete_items", busy_at_first)
    runner = JobRunner(store, slice_size=4)
    runner.busy_delays = (0.01,)
    runner.run_job(job_id)
    assert_each_document_once_in_order(store, job_id, docs)
    assert [doc for _, doc in fake.PROCESSED] == [d.id for d in docs]      # nothing computed twice


def test_cancelled_queued_job_never_runs(store, fake, weights):
    job_id = create(store, weights)
    assert store.cancel_job(job_id)
    runner = JobRunner(store)
    runner.submit(job_id)
    assert runner.wait(job_id, timeout=30)
    assert store.get_job(job_id).status == "cancelled" and fake.LOADS == []


def test_two_workers_claim_slices_atomically_and_each_document_is_done_once(store, fake, weights):
    docs = documents(64)
    job_id = create(store, weights, docs=docs, options={"delay": 0.005})
    runner = JobRunner(store, devices=["cpu", "cpu"], slice_size=4)
    runner.submit(job_id)
    assert runner.wait(job_id, timeout=60)
    job, run = assert_each_document_once_in_order(store, job_id, docs)
    processed = [doc for _, doc in fake.PROCESSED]
    assert sorted(processed) == sorted(d.id for d in docs)               # nobody processed a document twice
    assert len({model for model, _ in fake.PROCESSED}) == 2 and fake.LOADS == ["cpu", "cpu"]
    assert run.summary.device == "cpu,cpu"


def test_model_error_fails_the_job_with_the_reason_and_keeps_committed_work(store, fake, weights):
    job_id = create(store, weights, options={"fail_on": "doc-6"})
    runner = JobRunner(store, slice_size=4)
    job = runner.run_job(job_id)
    assert job.status == "failed" and "cannot read doc-6" in job.error and job.done == 4
    assert [p for p, _ in store.job_items_pending(job_id)] == list(range(4, 16))   # its claims were released
    assert store.requeue_job(job_id) and store.get_job(job_id).error is None


def test_invalid_document_fails_the_job_naming_its_line(store, fake, weights):
    docs = documents(3) + [Document("empty", "", line=4)]
    job = JobRunner(store).run_job(create(store, weights, docs=docs))
    assert job.status == "failed" and "line 4" in job.error


def test_unknown_model_fails_the_job_with_an_actionable_message(store, fake, weights):
    job_id = store.create_job(documents(2), "no-such-model", str(weights), 4, [], {}, "x.txt", device="cpu")
    job = JobRunner(store).run_job(job_id)
    assert job.status == "failed" and "unknown model 'no-such-model'" in job.error


def test_a_job_run_by_a_live_process_is_left_alone(store, fake, weights):
    job_id = create(store, weights)
    live_owner = f"{socket.gethostname()}:{os.getpid()}:another-runner"
    assert store.take_job(job_id, live_owner, lambda owner, beat: False)
    runner = JobRunner(store)
    assert runner.resume_unfinished() == []
    assert runner.run_job(job_id).owner == live_owner and fake.LOADS == []


def test_owner_is_dead_when_its_process_is_gone_or_its_heartbeat_is_stale():
    now, host = datetime.now(timezone.utc), socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert owner_is_dead(f"{host}:{gone.pid}:x", now, 60)
    assert not owner_is_dead(f"{host}:{os.getpid()}:x", now, 60)
    assert owner_is_dead(f"{host}:{os.getpid()}:x", now - timedelta(seconds=120), 60)
    assert not owner_is_dead("other-host:1:x", now, 60) and owner_is_dead(None, now, 60)


def test_complete_items_is_idempotent_on_position(store, fake, weights):
    job_id = create(store, weights, n=4)
    assert store.take_job(job_id, "me:1:x", lambda owner, beat: False)
    claimed = store.claim_items(job_id, "me:1:x:cpu", 2)
    first = [(p, Result(d.id, [[Span("a", d.text[0], (0, 1))]])) for p, d in claimed]
    assert store.complete_items(job_id, first) == 2
    again = [(p, Result(d.id, [[Span("b", "?", None)]])) for p, d in claimed]
    assert store.complete_items(job_id, again) == 0
    results = store.job_results(job_id)
    assert store.get_job(job_id).done == 2 and results[0][1].tuples[0][0].type == "a"
    assert store.claim_items(job_id, "me:1:x:cpu", 10) == [(2, documents(4)[2]), (3, documents(4)[3])]


def test_runner_can_borrow_a_shared_model_for_each_slice(store, fake, weights):
    shared = fake.FakeFamily().load(weights, "cpu", "fp32")
    fake.LOADS.clear()
    borrowed: list[tuple[int, str]] = []

    @contextmanager
    def borrow(job, device):
        borrowed.append((job.id, device))
        yield shared
    docs = documents(12)
    job_id = create(store, weights, docs=docs)
    job = JobRunner(store, slice_size=4, borrow=borrow).run_job(job_id)
    assert_each_document_once_in_order(store, job_id, docs)
    assert borrowed == [(job_id, "cpu")] * 3 and fake.LOADS == []          # one borrow per slice, no own model
    assert {model for model, _ in fake.PROCESSED} == {id(shared)} and job.status == "done"


def test_a_job_records_its_stage_timings_back_offs_and_kernel_like_any_run(store, fake, weights):
    docs = documents(10)
    job_id = create(store, weights, docs=docs, options={"backoff": 2})
    job = JobRunner(store, slice_size=4).run_job(job_id)
    assert job.status == "done" and set(job.stages["seconds"]) == {"prepare", "device", "decode", "write"}
    assert [b["rows"] for b in job.stages["backoffs"]] == [2, 2, 2]        # one per slice, in job time
    times = [b["at_seconds"] for b in job.stages["backoffs"]]
    assert times == sorted(times) and times[-1] <= job.wall_seconds + 1
    s = store.get_run(job.run_id).summary
    assert s.stages["seconds"] == job.stages["seconds"] and s.stages["backoffs"] == job.stages["backoffs"]
    assert s.stages["device_busy"] is not None and s.attention == "eager"


def test_a_job_on_a_shelf_runs_on_the_model_a_page_already_loaded(store, fake, weights):
    from workstation.shelf import ModelShelf
    shelf = ModelShelf()
    with shelf.borrow(ModelShelf.key("fake", weights, "auto", "fp32")) as page_model:   # a page ran on "auto"
        pass
    docs = documents(12)
    job = JobRunner(store, slice_size=4, borrow=shelf.borrow_for_job).run_job(create(store, weights, docs=docs))
    assert_each_document_once_in_order(store, job.id, docs)
    assert {model for model, _ in fake.PROCESSED} == {id(page_model)} and fake.LOADS == ["cpu"]  # no second copy
