"""Host workers: the host's share of a run in worker processes gives exactly what one process gives, in order."""
import json
import os
import subprocess
import sys
import threading
from multiprocessing import Pipe
from pathlib import Path

import pytest
import torch

from benchmarks.density import DENSITIES, calibrate
from contracts.domain import Document
from plugins.optimizations import host_workers
from plugins.rexuninlu import workers
from plugins.rexuninlu.loading import load_tokenizer
from plugins.rexuninlu.prompting import Prompter, Vocabulary
from plugins.rexuninlu.transport import WrittenResult
from plugins.rexuninlu.workers import VOCABULARY_FILE, serve
from tests.plugins.rexuninlu.test_model import NER, ONE_STEP, assert_same_outputs, mixed_documents
from workstation import engine, plugins
from workstation.run_config import RunConfig


@pytest.fixture(scope="module")
def rex(rex_tiny):
    model = engine.load_model("rexuninlu", rex_tiny, "cpu")
    yield model
    model.knobs.host_workers = 0
    if model.workers is not None:
        model.workers.close()


# The decision's thresholds as committed (the fixture below moves them for most tests).
HOST_BOUND, DEVICE_BOUND = workers.HOST_BOUND, workers.DEVICE_BOUND


@pytest.fixture(autouse=True)
def hand_over_at_once(monkeypatch):
    """The workers take a run over at its second group boundary once they are up, whatever the share (the decision
    itself is tested with its real thresholds below)."""
    monkeypatch.setattr(workers, "HOST_BOUND", 0.0)
    monkeypatch.setattr(workers, "DEVICE_BOUND", float("inf"))
    monkeypatch.setattr(workers, "INTERVAL_S", 0.0)


def written(model, docs, batch_size: int, workers: int, **run):
    model.knobs.host_workers = workers
    if workers:                                   # up before the run: it hands over at its second group boundary
        model.host_workers().start()
        assert model.workers.ready(wait=None)
    lines, progress = [], []
    report = engine.run(model, docs, RunConfig(batch_size=batch_size, options=run), keep_results=False,
                        on_progress=lambda n, _: progress.append(n),
                        on_result=lambda _, r: lines.append(r.to_json_text()))
    assert progress == list(range(1, len(docs) + 1))
    return lines, report


@pytest.mark.parametrize("density", ["sparse", "dense"])
def test_host_workers_write_what_one_process_writes(rex, density):
    """Every task preset (nested schemas take several rounds through the device), five groups of documents
    (two per worker at once), and NER with dense outputs; the same JSON lines, in input order."""
    docs = mixed_documents(60, seed=3)
    if density == "dense":            # NER only: dense relations would send every head on to a second round
        docs = [Document(d.id, d.text.removeprefix("[CLASSIFY]").removeprefix("[MULTICLASSIFY]"), NER) for d in docs]
    head = [rex.network.ffnq.bias.clone(), rex.network.ffnk.bias.clone()]
    shift = calibrate(rex, docs[:12], DENSITIES["dense"], steps=6)["head_shift"] if density == "dense" else None
    try:
        alone, _ = written(rex, docs, 4, workers=0)
        shared, report = written(rex, docs, 4, workers=2)
        results = list(rex.extract(docs, batch_size=4))
    finally:
        with torch.no_grad():
            rex.network.ffnq.bias.copy_(head[0])
            rex.network.ffnk.bias.copy_(head[1])
    # Windows of several workers' groups share batches, other batches than in one process: a confidence may move
    # one rounding step (as between any two batch sizes: tests/plugins/rexuninlu/test_model.py); the tuples may not.
    assert [json.loads(line)["id"] for line in shared] == [d.id for d in docs]
    assert_same_outputs(*([json.loads(line)["output"] for line in lines] for lines in (alone, shared)), ONE_STEP)
    assert [line.count('"type"') for line in alone].count(0) < len(docs)
    if density == "dense":
        assert sum(line.count('"type"') for line in alone) > 20 * len(docs) and shift
    assert report.documents == len(docs) and len(rex.workers.processes) == 2
    assert report.stages["prepare"] > 0 and report.stages["decode"] > 0        # the workers' seconds, added
    assert all(isinstance(r, WrittenResult) and r._tuples is None for r in results)  # crossed as their JSON
    assert os.listdir(rex.workers.folder) == [VOCABULARY_FILE]                  # every group's file read and removed
    assert_same_outputs([r.to_json()["output"] for r in results], [json.loads(line)["output"] for line in alone], ONE_STEP)


def test_a_run_of_one_batch_stays_in_the_runs_process(rex):
    rex.knobs.host_workers = 2
    results = list(rex.extract(mixed_documents(4, seed=4), batch_size=4))
    assert not any(isinstance(r, WrittenResult) for r in results)
    rex.knobs.host_workers = 0


def test_a_worker_that_dies_fails_the_run_clearly_and_the_next_run_starts_afresh(rex):
    docs = mixed_documents(60, seed=5)
    alone, _ = written(rex, docs, 4, workers=0)
    rex.knobs.host_workers = 2
    rex.host_workers().start()
    assert rex.workers.ready(wait=None)
    doomed = rex.workers.processes[0]

    def kill(done, _):
        if done == 1:                 # before the run hands over: worker 0 is handed groups it cannot do
            doomed.kill()
    folder = rex.workers.folder
    with pytest.raises(RuntimeError, match="host worker process stopped"):
        engine.run(rex, docs, RunConfig(batch_size=4), keep_results=False, on_progress=kill)
    assert rex.workers.processes == [] and not doomed.is_alive()
    assert not os.path.exists(folder)                             # with the files of the groups it left
    again, _ = written(rex, docs, 4, workers=2)
    assert_same_outputs(*([json.loads(line)["output"] for line in lines] for lines in (alone, again)), ONE_STEP)


def test_a_failure_inside_a_worker_comes_back_as_the_exception(rex_tiny, tmp_path):
    ours, theirs = Pipe()
    worker = threading.Thread(target=serve, args=(theirs, Prompter(Vocabulary.of(load_tokenizer(rex_tiny))), str(tmp_path)),
                              daemon=True)
    worker.start()
    ours.send(("links", 99, []))                          # links for a group it never started
    kind, k, error = ours.recv()
    assert (kind, k) == ("failed", 99) and isinstance(error, KeyError)
    ours.send(None)
    worker.join(timeout=30)
    assert not worker.is_alive()


def test_a_pool_without_a_temporary_folder_sends_its_results_through_the_pipe(rex, monkeypatch):
    def unwritable(**_):
        raise PermissionError("no temporary folder here")
    docs = mixed_documents(24, seed=6)
    alone, _ = written(rex, docs, 4, workers=0)
    rex.host_workers().close()                               # the next run starts a pool afresh
    monkeypatch.setattr(workers.tempfile, "TemporaryDirectory", unwritable)
    try:
        shared, _ = written(rex, docs, 4, workers=2)
        assert rex.workers.spool is None and rex.workers.folder == ""
    finally:
        rex.workers.close()
    assert_same_outputs(*([json.loads(line)["output"] for line in lines] for lines in (alone, shared)), ONE_STEP)


def test_the_host_workers_optimization_switches_the_knob_and_applies_to_rexuninlu_only(rex, monkeypatch):
    monkeypatch.setattr(host_workers, "default_workers", lambda: host_workers.MIN_WORKERS)     # a machine of 9 cores
    opt = plugins.optimizations()["host-workers"]
    assert opt.lossless and opt.switch == "live" and opt.applies_to(rex)[0]
    assert "host worker process(es)" in engine.apply_optimizations(rex, ["host-workers"])["host-workers"]
    assert (rex.knobs.host_workers, rex.knobs.host_workers_from) == (host_workers.MIN_WORKERS, host_workers.MIN_DOCUMENTS)
    engine.apply_optimizations(rex, [])
    assert (rex.knobs.host_workers, rex.knobs.host_workers_from) == (0, 0)


def test_host_workers_switch_themselves_off_on_a_machine_of_few_cores(rex, monkeypatch):
    monkeypatch.setattr(host_workers, "default_workers", lambda: host_workers.MIN_WORKERS - 1)
    what = engine.apply_optimizations(rex, ["host-workers"])["host-workers"]
    assert what.startswith("off: ") and f"fewer than {host_workers.MIN_WORKERS} gain nothing" in what
    assert rex.knobs.host_workers == 0
    engine.apply_optimizations(rex, [])


def test_a_run_of_few_documents_goes_without_host_workers_and_its_report_says_so(rex, monkeypatch):
    monkeypatch.setattr(host_workers, "default_workers", lambda: host_workers.MIN_WORKERS)
    if rex.workers is not None:
        rex.workers.close()
    report = engine.run(rex, mixed_documents(12, seed=6), RunConfig(batch_size=4, optimizations=["host-workers"]),
                        keep_results=False)
    assert report.documents == 12 and (rex.workers is None or not rex.workers.pipes)      # no process was started
    assert report.optimizations["host-workers"].startswith(
        f"off for this run: 12 documents, fewer than {host_workers.MIN_DOCUMENTS:,}")
    engine.apply_optimizations(rex, [])


def test_a_run_starts_its_workers_only_once_its_host_work_holds_the_device_back(rex, monkeypatch):
    """Started before the first batch, a dozen booting workers slowed every run's captures, the sparse runs that
    never used them too (docs/benchmarks.md): a run that keeps the device busy starts none; one whose host work
    holds the device back starts them at that group boundary and hands the rest over once they are up."""
    rex.knobs.host_workers, rex.knobs.host_workers_from = 2, 0
    if rex.workers is not None:
        rex.workers.close()
    docs = mixed_documents(60, seed=7)
    monkeypatch.setattr(workers, "DEVICE_BOUND", 0.0)             # the device never waits: no hand-over is worth it
    kinds: list[bool] = []
    report = engine.run(rex, docs, RunConfig(batch_size=4), keep_results=False,
                        on_result=lambda _, r: kinds.append(isinstance(r, WrittenResult)))
    assert kinds == [False] * 60 and (rex.workers is None or rex.workers.pipes == [])     # no process was started
    assert report.optimizations["host-workers"].startswith("off for this run: it stayed in its own process")
    monkeypatch.setattr(workers, "DEVICE_BOUND", float("inf"))    # now it waits on the run's host work
    start = workers.HostWorkers.start

    def start_and_wait(pool):                                     # up by the next boundary, however slow this box
        start(pool)
        pool.ready(wait=None)
    monkeypatch.setattr(workers.HostWorkers, "start", start_and_wait)
    kinds.clear()
    report = engine.run(rex, docs, RunConfig(batch_size=4), keep_results=False,
                        on_result=lambda _, r: kinds.append(isinstance(r, WrittenResult)))
    assert len(rex.workers.pipes) == 2 and kinds[0] is False and kinds[-1] is True          # started, then given the rest
    assert report.optimizations["host-workers"].startswith("handed over to the worker processes after")
    rex.knobs.host_workers = 0


def test_the_workers_run_below_the_runs_own_process(rex):
    if not hasattr(os, "getpriority"):
        pytest.skip("no process priorities here")
    rex.knobs.host_workers = 2
    pool = rex.host_workers()
    pool.start()
    try:
        assert pool.ready(wait=None)
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert [os.getpriority(os.PRIO_PROCESS, p.pid) for p in pool.processes] == \
            [min(19, mine + workers.WORKER_NICENESS)] * 2
    finally:
        pool.close()
        rex.knobs.host_workers = 0


def test_a_worker_starts_without_torch_or_transformers(rex):
    """Each of a dozen workers importing torch took seconds inside the run that waited for it (docs/benchmarks.md):
    the worker's imports stop short of both, and a running worker maps no libtorch."""
    probe = ("import sys, plugins.rexuninlu.workers, plugins.rexuninlu.transport; "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[3])
    assert imported.stdout.strip() == "[]"
    lines, _ = written(rex, mixed_documents(12, seed=8), 4, workers=2)
    assert len(lines) == 12
    for process in rex.workers.processes:
        maps = Path(f"/proc/{process.pid}/maps")
        if maps.exists():                                   # Linux
            assert "libtorch" not in maps.read_text()
    rex.knobs.host_workers = 0


def test_a_slow_device_never_holds_more_than_AHEAD_batches_of_windows(rex, monkeypatch):
    """Windows that come in while the device is busy wait on the host: what is launched and not read back stays
    within AHEAD batches' worth, plus the last whole group. (Launching every window that was in once held whole
    runs on the device.) The device is made slow by saying a set is finished only at every third look."""
    from plugins.rexuninlu import scoring
    from plugins.rexuninlu.pipeline import AHEAD
    looks, real_finished = [0], scoring.Scoring.finished

    def slow(self):
        looks[0] += 1
        return looks[0] % 3 == 0 and real_finished(self)
    monkeypatch.setattr(scoring.Scoring, "finished", slow)
    on_device, real_submit, real_result = [], rex.scorer.submit, scoring.Scoring.result
    peak = [0]

    def submit(windows, *args, **kwargs):
        on_device.append(len(windows))
        if rex.handover.done:         # the workers' part: this process's groups were all read back before it
            peak[0] = max(peak[0], sum(on_device))
        return real_submit(windows, *args, **kwargs)

    def result(self):
        on_device.remove(len(self.out))
        return real_result(self)
    monkeypatch.setattr(rex.scorer, "submit", submit)
    monkeypatch.setattr(scoring.Scoring, "result", result)
    long_docs = [Document(str(i), "北大西洋议会春季会议在西班牙巴塞罗那闭幕" * 150, NER) for i in range(24)]
    lines, _ = written(rex, long_docs, 4, workers=2)
    windows_per_doc = len(rex.prompter.encode(next(iter(rex.prompter.hints({(): NER}))).text,
                                              long_docs[0].text, "no_cls").ids)
    assert len(lines) == len(long_docs) and windows_per_doc > 4
    assert 0 < peak[0] <= AHEAD * 4 + windows_per_doc          # a group is one document at batch 4


def test_a_run_hands_over_once_its_host_work_holds_it_back_and_its_later_slices_follow(rex, monkeypatch):
    """In its own process until the decision, then the workers, later slices included: the same outputs in order, and
    the report says after how many documents. (A slice is 256 documents at batch 4: engine.slice_size.)"""
    docs = mixed_documents(300, seed=9)
    alone, _ = written(rex, docs, 4, workers=0)
    rex.knobs.host_workers = 2
    rex.host_workers().start()
    assert rex.workers.ready(wait=None)
    kinds: list[bool] = []
    report = engine.run(rex, docs, RunConfig(batch_size=4), keep_results=False,
                        on_result=lambda _, r: kinds.append(isinstance(r, WrittenResult)))
    moved = kinds.index(True)
    assert moved == 12 and kinds == [False] * 12 + [True] * (len(docs) - 12)   # groups of 4 and 8, then the workers
    assert report.optimizations["host-workers"].startswith("handed over to the worker processes after 12 documents")
    shared, _ = written(rex, docs, 4, workers=2)
    assert_same_outputs(*([json.loads(line)["output"] for line in lines] for lines in (alone, shared)), ONE_STEP)
    rex.knobs.host_workers = 0


def test_a_run_whose_host_work_keeps_up_stays_in_its_own_process(rex, monkeypatch):
    monkeypatch.setattr(workers, "HOST_BOUND", 1.01)            # a share no run reaches
    rex.knobs.host_workers = 2
    rex.host_workers().start()
    assert rex.workers.ready(wait=None)
    kinds: list[bool] = []
    report = engine.run(rex, mixed_documents(60, seed=10), RunConfig(batch_size=4), keep_results=False,
                        on_result=lambda _, r: kinds.append(isinstance(r, WrittenResult)))
    assert kinds == [False] * 60
    assert report.optimizations["host-workers"].startswith("off for this run: it stayed in its own process")
    rex.knobs.host_workers = 0


class FakePool:
    def __init__(self):
        self.up, self.started = False, 0

    def start(self):
        self.started += 1

    def ready(self):
        return self.up


def test_the_hand_over_measures_the_share_of_each_interval_and_waits_for_the_workers(monkeypatch):
    from contracts.stages import StageClock
    monkeypatch.setattr(workers, "HOST_BOUND", 0.5)
    monkeypatch.setattr(workers, "DEVICE_BOUND", float("inf"))
    monkeypatch.setattr(workers, "INTERVAL_S", 0.25)
    now = [100.0]
    monkeypatch.setattr(workers.time, "perf_counter", lambda: now[0])
    pool, clock = FakePool(), StageClock()
    h = workers.HandOver(pool)
    assert h.stay(clock) and h.share is None                     # the first boundary only marks the start
    now[0] += 0.1
    clock.add("decode", 0.1)
    assert h.stay(clock) and h.share is None                     # an interval shorter than INTERVAL_S decides nothing
    now[0] += 0.9
    clock.add("write", 0.1)
    assert h.stay(clock) and h.share == pytest.approx(0.2)       # 0.2 s of decoding and writing in 1 s
    now[0] += 1.0
    clock.add("decode", 0.7)                                     # host-bound: the workers are asked for, not up yet
    assert h.stay(clock) and h.share == pytest.approx(0.7) and h.wanted and pool.started == 1 and not h.done
    now[0] += 1.0
    clock.add("decode", 0.6)
    clock.add("device", 0.5)                                     # device time is no host work
    pool.up = True
    assert not h.stay(clock) and h.done and pool.started == 1
    assert not h.stay(clock) and h.share == pytest.approx(0.6)   # decided for the rest of the run
    h.after = 40
    assert h.describe() == ("handed over to the worker processes after 40 documents "
                            "(decoding and writing took 60% of the run's own thread, the device was busy 50%)")


def test_a_busy_device_or_a_run_near_its_end_keeps_the_run_in_its_own_process(monkeypatch):
    """Sparse output crossed the host share too, with the device 83-95 % busy, and lost to the workers; a hand-over
    with few documents left lost to its own fixed cost (docs/benchmarks.md). Neither starts the workers."""
    from contracts.stages import StageClock
    monkeypatch.setattr(workers, "HOST_BOUND", HOST_BOUND)
    monkeypatch.setattr(workers, "DEVICE_BOUND", DEVICE_BOUND)
    monkeypatch.setattr(workers, "INTERVAL_S", 0.25)
    now = [0.0]
    monkeypatch.setattr(workers.time, "perf_counter", lambda: now[0])

    def interval(h, clock, host, device, done=0):
        now[0] += 1.0
        clock.add("decode", host)
        clock.add("device", device)
        return h.stay(clock, done)
    pool, clock = FakePool(), StageClock()
    busy = workers.HandOver(pool)
    assert busy.stay(clock)
    assert interval(busy, clock, 0.9, DEVICE_BOUND) and not busy.wanted               # busy at the bound: stays
    assert interval(busy, clock, HOST_BOUND - 0.01, 0.2) and not busy.wanted         # its host work keeps up
    assert interval(busy, clock, HOST_BOUND + 0.01, DEVICE_BOUND - 0.01) and busy.wanted  # both: it asks
    pool, clock = FakePool(), StageClock()
    ending = workers.HandOver(pool, documents=1_400, least=1_000)
    assert ending.stay(clock, 0)
    assert interval(ending, clock, 0.6, 0.2, done=401) and not ending.wanted and pool.started == 0
    assert ending.describe().endswith("with 1,000 documents or more left)")
    pool, clock = FakePool(), StageClock()
    early = workers.HandOver(pool, documents=1_400, least=1_000)
    assert early.stay(clock, 0)
    assert interval(early, clock, 0.6, 0.2, done=400) and early.wanted and pool.started == 1


def test_a_worker_that_dies_before_any_work_leaves_the_run_in_its_own_process(rex):
    docs = mixed_documents(40, seed=11)
    alone, _ = written(rex, docs, 4, workers=0)
    rex.knobs.host_workers = 2
    rex.host_workers().start()
    rex.workers.processes[0].kill()
    rex.workers.processes[0].join(timeout=30)
    lines: list[str] = []
    report = engine.run(rex, docs, RunConfig(batch_size=4), keep_results=False,
                        on_result=lambda _, r: lines.append(r.to_json_text()))
    assert rex.workers.pipes == [] and report.documents == len(docs)
    assert report.optimizations["host-workers"].startswith("off for this run: it stayed in its own process")
    assert_same_outputs(*([json.loads(line)["output"] for line in got] for got in (alone, lines)), ONE_STEP)
    rex.knobs.host_workers = 0


def test_a_run_told_to_stop_ends_after_its_groups_and_forgets_the_one_it_prepared(rex):
    from plugins.rexuninlu.pipeline import run_documents
    docs = mixed_documents(60, seed=12)
    asked: list[int] = []

    def more() -> bool:
        asked.append(1)
        return len(asked) < 2                                 # group 1 may start, group 2 may not
    results = list(run_documents(rex.prompter, rex.scorer, docs, 4, more=more))
    assert [r.document_id for r in results] == [d.id for d in docs[:12]]     # groups of 4 and 8, in order
    assert rex.prompter._pieces == {}                            # group 2 was tokenised by the prefetch thread, then let go
