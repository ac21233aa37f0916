"""Fine-tuning runs from the UI's side, without Streamlit: launch, poll, cancel, resume, a trainer that dies.

The trainer is tests/workstation/finetune/fake_trainer.py, which keeps the real trainer's event contract.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from contracts.domain import Document, InputError
from workstation.finetune import runs
from workstation.finetune.outputs import default_output, slug, weight_choices
from workstation.finetune.progress import EventReader, TrainingProgress, compare_rows
from workstation.finetune.request import FinetuneRequest
from workstation.settings import Settings

FAKE = Path(__file__).with_name("fake_trainer.py")
GOLD = [[{"type": "人物", "span": "张三", "offset": [0, 2]}]]


@pytest.fixture
def dataset(store):
    dataset_id, _ = store.add_gold_examples("people", "rexuninlu", [
        (Document(f"d{i}", "张三在北京", {"人物": None}), GOLD) for i in range(4)], "jsonl")
    return dataset_id


def launcher(store, tmp_path, **env) -> runs.TrainingLauncher:
    return runs.TrainingLauncher(store, tmp_path / "training-runs", [sys.executable, str(FAKE)],
                               env={**os.environ, **env})


def request(tmp_path, dataset, **kw) -> FinetuneRequest:
    weights = tmp_path / "base"
    weights.mkdir(exist_ok=True)
    return FinetuneRequest(**{"model": "rexuninlu", "weights": weights, "train_dataset": dataset,
                                 "output": tmp_path / "out", "epochs": 2, "batch_size": 1, "device": "cpu", **kw})


def wait(launch: runs.TrainingLauncher, run_id: int, until, timeout: float = 30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        run, progress = launch.poll(run_id)
        if until(run, progress):
            return run, progress
        time.sleep(0.02)
    raise AssertionError(f"timed out: {launch.poll(run_id)}")


def test_a_run_is_launched_followed_and_recorded_with_its_evaluation(store, dataset, tmp_path):
    launch = launcher(store, tmp_path)
    run_id = launch.start(request(tmp_path, dataset, dev_ratio=0.25, split_seed=1,
                                  optimizations=("gradient-checkpointing",)))
    run = store.get_training_run(run_id)
    assert run.status == "running" and run.pid and run.source == "ui"
    args = run.args
    assert args[args.index("--optimizations") + 1:args.index("--optimizations") + 2] == ["gradient-checkpointing"]
    folder = tmp_path / "training-runs" / str(run_id)
    assert len((folder / "train.jsonl").read_text("utf-8").splitlines()) == 3
    assert args[args.index("--eval") + 1] == str(folder / "dev.jsonl")
    run, progress = wait(launch, run_id, lambda r, p: r.finished)
    assert run.status == "completed" and run.error is None
    assert (run.step, run.total_steps, progress.fraction) == (6, 6, 1.0)
    assert run.loss[0] == [1, 1.0] and len(run.loss) == 6
    assert run.evaluation_before["overall"]["f1"] == 0.2 and run.evaluation_after["overall"]["f1"] == 0.8
    assert [e["epoch"] for e in run.evaluation_epochs] == [1, 2]
    assert run.datasets["train"] == {"id": dataset, "name": "people", "examples": 3}
    assert run.datasets["eval"]["examples"] == 1 and run.finished_at is not None
    rows = compare_rows(run.evaluation_before, run.evaluation_after)
    assert rows[0]["type"] == "(overall)" and rows[0]["ΔF1"] == pytest.approx(0.6)
    assert "fake trainer: 3 examples" in (folder / "trainer.log").read_text()


def test_cancel_stops_after_a_checkpoint_and_resume_finishes_the_run(store, dataset, tmp_path):
    launch = launcher(store, tmp_path, FAKE_TRAINER_STEP_S="0.5")
    run_id = launch.start(request(tmp_path, dataset, epochs=3))
    wait(launch, run_id, lambda r, p: p.step >= 2)
    assert launch.cancel(run_id)
    assert store.get_training_run(run_id).status == "cancelling"
    run, progress = wait(launch, run_id, lambda r, p: r.finished)
    assert run.status == "cancelled" and progress.checkpoints
    stopped_at = progress.checkpoints[-1]["step"]
    assert launch._processes == {} and not launch.cancel(run_id)

    launch.env["FAKE_TRAINER_STEP_S"] = "0.01"
    assert launch.resume(run_id)
    run = store.get_training_run(run_id)
    assert run.status == "running" and run.args.count("--resume") == 0
    run, progress = wait(launch, run_id, lambda r, p: r.finished)
    assert run.status == "completed" and progress.sessions == 2
    assert run.step == run.total_steps == 12 and sorted(progress.steps) == list(range(1, 13))
    log = (tmp_path / "training-runs" / str(run_id) / "trainer.log").read_text()
    assert f"from step {stopped_at}" in log


def test_a_trainer_that_dies_without_done_is_marked_failed_with_its_log(store, dataset, tmp_path):
    launch = launcher(store, tmp_path, FAKE_TRAINER_MODE="die-after:2")
    run_id = launch.start(request(tmp_path, dataset))
    run, _ = wait(launch, run_id, lambda r, p: r.finished)
    assert run.status == "failed" and run.step == 2
    assert "exited with exit code 3 without finishing" in run.error and "fake trainer: 4 examples" in run.error
    assert launch.resume(run_id)                       # a failed run may be tried again from its checkpoint


def test_a_reported_failure_keeps_the_trainers_message(store, dataset, tmp_path):
    launch = launcher(store, tmp_path, FAKE_TRAINER_MODE="fail")
    run_id = launch.start(request(tmp_path, dataset))
    run, _ = wait(launch, run_id, lambda r, p: r.finished)
    assert (run.status, run.error) == ("failed", "CUDA out of memory (fake)")


def test_another_ui_process_picks_up_a_run_by_its_pid_and_events(store, dataset, tmp_path):
    first = launcher(store, tmp_path, FAKE_TRAINER_STEP_S="0.05")
    run_id = first.start(request(tmp_path, dataset))
    second = launcher(store, tmp_path)                 # a restarted UI: no process handle, reads from line 1
    run, progress = wait(second, run_id, lambda r, p: r.finished)
    assert run.status == "completed" and progress.step == 8
    first._processes[run_id].wait()


def test_a_dead_pid_found_by_another_process_is_failed(store, dataset, tmp_path):
    run_id = store.create_training_run("rexuninlu", "/w", "/out", ["--x"], pid=2 ** 22 + 12345, host=None,
                                       events_path=str(tmp_path / "none.jsonl"))
    run, _ = launcher(store, tmp_path).poll(run_id)
    assert run.status == "failed" and "exit code unknown" in run.error


def test_events_are_read_incrementally_and_a_half_written_line_waits(tmp_path):
    path = tmp_path / "events.jsonl"
    reader = EventReader(path)
    assert reader.read() == []                          # no file yet
    path.write_text('{"event": "start", "total_steps": 4}\n{"event": "step", "step": 1, "lo')
    progress = TrainingProgress()
    first = reader.read()
    assert [e["event"] for e in first] == ["start"]
    with open(path, "a") as f:
        f.write('ss": 0.5, "seconds": 2.0}\nnot json\n{"event": "step", "step": 2, "loss": 0.25, "seconds": 4.0}\n')
    for event in first + reader.read():
        progress.feed(event)
    assert reader.malformed == 1 and progress.step == 2 and progress.loss() == [[1, 0.5], [2, 0.25]]
    assert progress.eta() == pytest.approx(4.0)        # 2 steps in 4 s, 2 to go
    assert reader.read() == []


@pytest.mark.parametrize("change, message", [
    (dict(epochs=0), "epochs must be at least 1"),
    (dict(dtype="bf16"), "bf16 training needs a CUDA device"),
    (dict(optimizations=("memory-pool",)), "do not apply to fine-tuning"),
    (dict(lr=0), "learning rate"),
    (dict(lr=float("nan")), "learning rate"),
    (dict(lr=5.0), "learning rate must be a positive number up to 1"),
    (dict(eval_dataset=1, dev_ratio=0.2), "not both"),
])
def test_bad_requests_start_nothing(store, dataset, tmp_path, change, message):
    with pytest.raises(InputError, match=message):
        launcher(store, tmp_path).start(request(tmp_path, dataset, **change))
    assert store.list_training_runs() == []


def test_a_used_output_directory_or_an_empty_dataset_is_refused(store, dataset, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(InputError, match="not empty"):
        launcher(store, tmp_path).start(request(tmp_path, dataset))
    empty = store.create_dataset("empty", "rexuninlu")
    with pytest.raises(InputError, match="no examples"):
        launcher(store, tmp_path).start(request(tmp_path, empty, output=tmp_path / "new"))


def test_weight_choices_list_settings_demo_and_completed_finetunes(store, tmp_path):
    settings = Settings(database=str(tmp_path / "runs.db"), demo_weights_dir=str(tmp_path / "demo"),
                        demo_size_setting="tiny")
    (tmp_path / "tuned").mkdir()
    done = store.create_training_run("rexuninlu", "/w", str(tmp_path / "tuned"), [], status="completed",
                                     datasets={"train": {"name": "people"}})
    store.create_training_run("rexuninlu", "/w", str(tmp_path / "gone"), [], status="completed")
    store.create_training_run("rexuninlu", "/w", str(tmp_path / "tuned"), [], status="cancelled")
    choices = weight_choices(settings, store, "rexuninlu")
    assert [(c.kind, c.path) for c in choices] == [("demo", tmp_path / "demo" / "rexuninlu-tiny"),
                                                   ("finetuned", tmp_path / "tuned")]
    assert choices[1].training_run == done and "on people" in choices[1].title
    assert default_output(settings, "rexuninlu", "新闻/people v2").parent == tmp_path / "finetuned"
    assert slug("新闻/people v2") == "新闻-people-v2"


def test_the_cli_args_match_the_trainers_parser(tmp_path):
    req = request(tmp_path, 1, optimizations=("gradient-checkpointing", "flash-attention"), lr=3e-5)
    args = req.argv(Path("t.jsonl"), Path("d.jsonl"), Path("e.jsonl"))
    assert args[args.index("--optimizations"):] == ["--optimizations", "gradient-checkpointing", "flash-attention"]
    assert args[args.index("--lr") + 1] == "3e-05" and args[args.index("--events") + 1] == "e.jsonl"
    json.dumps(args)
    from workstation.finetune.trainer import parser  # the trainer's own parser takes every argument
    parsed = parser().parse_args(args)
    assert (parsed.lr, parsed.events, parsed.eval) == (3e-5, Path("e.jsonl"), Path("d.jsonl"))
    assert [n for item in parsed.optimizations for n in ([item] if isinstance(item, str) else item)] == \
        ["gradient-checkpointing", "flash-attention"]


def test_the_final_state_is_recorded_with_no_one_polling_even_through_a_busy_store(store, dataset, tmp_path,
                                                                                    monkeypatch):
    import sqlite3
    import threading

    from storage.repository import Store
    monkeypatch.setattr(runs, "FOLLOW_S", 0.05)
    quick = Store(store.path, busy_timeout_ms=20, retry_delays=())          # gives up on a lock at once
    launch = launcher(quick, tmp_path, FAKE_TRAINER_STEP_S="0.05")
    run_id = launch.start(request(tmp_path, dataset))
    other = sqlite3.connect(store.path, timeout=5, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")                                        # locked while the trainer finishes
    threading.Timer(1.5, lambda: other.execute("ROLLBACK")).start()
    deadline = time.time() + 30
    while store.get_training_run(run_id).status == "running" and time.time() < deadline:
        time.sleep(0.05)
    run = store.get_training_run(run_id)
    assert run.status == "completed" and run.finished_at is not None and run.step == run.total_steps == 8
    other.close()
    quick.close()
