"""The progress-events contract the Fine-tune page reads, cancel by signal, and mid-epoch resume."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from contracts.domain import WeightsError
from tests.workstation.finetune.conftest import with_dropout
from tests.workstation.finetune.test_seqgpt_finetune import LINES, write_jsonl
from workstation.finetune import trainer as finetune

ROOT = Path(__file__).resolve().parents[3]
METRICS = {"precision", "recall", "f1", "correct", "predicted", "gold"}


@pytest.fixture
def one_thread():
    """Runs compared bit for bit must sum in the same order: one intra-op thread everywhere."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def read_events(path):
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def weights_of(out):
    return torch.load(out / "pytorch_model.bin", weights_only=True)


def same_weights(a, b):
    wa, wb = weights_of(a), weights_of(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_events_file_follows_the_contract(seqgpt_tiny, tmp_path, one_thread):
    train, events, out = write_jsonl(tmp_path / "train.jsonl", LINES), tmp_path / "events.jsonl", tmp_path / "out"
    assert finetune.main(["--model", "seqgpt", "--weights", str(seqgpt_tiny), "--train", str(train),
                          "--output", str(out), "--epochs", "2", "--batch-size", "2", "--save-every", "1",
                          "--device", "cpu", "--num-beams", "1", "--max-new-tokens", "8",
                          "--events", str(events)]) == 0
    log = read_events(events)
    kinds = [e["event"] for e in log]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("start") == kinds.count("done") == 1
    start = log[0]
    assert set(start) == {"event", "time", "model", "device", "total_steps", "epochs", "examples", "documents"}
    assert (start["model"], start["device"], start["total_steps"], start["epochs"], start["examples"],
            start["documents"]) == ("seqgpt", "cpu", 4, 2, 4, 4)

    steps = [e for e in log if e["event"] == "step"]
    assert all(set(e) == {"event", "step", "epoch", "loss", "lr", "seconds", "gpu_allocated_MiB", "gpu_peak_MiB"}
               for e in steps)
    assert [e["step"] for e in steps] == [1, 2, 3, 4] and [e["epoch"] for e in steps] == [1, 1, 2, 2]
    assert all(isinstance(e["loss"], float) and isinstance(e["lr"], float) and e["lr"] > 0 for e in steps)
    assert [e["seconds"] for e in steps] == sorted(e["seconds"] for e in steps)
    assert all(e["gpu_allocated_MiB"] is None and e["gpu_peak_MiB"] is None for e in steps)      # CPU

    evals = [e for e in log if e["event"] == "eval"]
    assert [(e["phase"], e["epoch"], e["step"]) for e in evals] == \
        [("before", None, 0), ("epoch", 1, 2), ("epoch", 2, 4), ("after", None, 4)]
    assert all(set(e["overall"]) == METRICS and all(set(m) == METRICS for m in e["per_type"].values())
               for e in evals)
    assert evals[-1]["overall"] == evals[-2]["overall"]      # the last epoch is measured on the saved checkpoint

    checkpoints = [e for e in log if e["event"] == "checkpoint"]
    assert [e["step"] for e in checkpoints] == [1, 2, 3, 4]
    assert Path(checkpoints[-1]["path"]) == out / "checkpoints" / "step-4"
    # Steps, evaluations and checkpoints come in the order they happen.
    order = [(e["event"], e.get("step")) for e in log if e["event"] in ("step", "checkpoint", "eval")]
    assert order.index(("step", 2)) < order.index(("checkpoint", 2)) and order.index(("eval", 2)) < order.index(("step", 3))

    done = log[-1]
    assert done == {"event": "done", "status": "completed", "output": str(out), "error": None,
                    "evaluation": str(out / "evaluation.json")}
    report = json.loads((out / "evaluation.json").read_text("utf-8"))
    assert [(e["epoch"], e["step"]) for e in report["epochs"]] == [(1, 2), (2, 4)]
    assert report["epochs"][1]["overall"] == report["after"]["overall"] == evals[-1]["overall"]


def test_a_failure_is_reported_in_the_events_before_exiting(tmp_path):
    train, events = write_jsonl(tmp_path / "train.jsonl", LINES), tmp_path / "events.jsonl"
    with pytest.raises(WeightsError):
        finetune.main(["--model", "seqgpt", "--weights", str(tmp_path / "missing"), "--train", str(train),
                       "--output", str(tmp_path / "out"), "--device", "cpu", "--events", str(events)])
    done = read_events(events)[-1]
    assert done["event"] == "done" and done["status"] == "failed" and done["evaluation"] is None
    assert "missing" in done["error"]


def test_resume_from_a_mid_epoch_checkpoint_equals_an_uninterrupted_run(seqgpt_tiny, tmp_path, one_thread):
    # Dropout on: the masks drawn after the resume point must be the ones the full run drew.
    weights = with_dropout(seqgpt_tiny, tmp_path / "dropout", 0.1, 0.1)
    train = write_jsonl(tmp_path / "train.jsonl", LINES)
    common = ["--model", "seqgpt", "--weights", str(weights), "--train", str(train), "--epochs", "2",
              "--batch-size", "1", "--lr", "1e-3", "--save-every", "1", "--keep-checkpoints", "10",
              "--no-eval", "--device", "cpu"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert finetune.main(common + ["--output", str(full)]) == 0
    shutil.copytree(full / "checkpoints" / "step-3", resumed / "checkpoints" / "step-3")   # epoch 1, 3 of 4 steps
    events = resumed / "events.jsonl"
    assert finetune.main(common + ["--output", str(resumed), "--resume", "--events", str(events)]) == 0
    assert [e["step"] for e in read_events(events) if e["event"] == "step"] == [4, 5, 6, 7, 8]
    assert same_weights(full, resumed)


def test_sigterm_stops_after_the_step_and_resume_continues_like_an_uninterrupted_run(seqgpt_tiny, tmp_path,
                                                                                      one_thread):
    train = write_jsonl(tmp_path / "train.jsonl", LINES)
    common = ["--model", "seqgpt", "--weights", str(seqgpt_tiny), "--train", str(train), "--epochs", "40",
              "--batch-size", "1", "--lr", "1e-3", "--no-eval", "--device", "cpu"]
    cancelled, events = tmp_path / "cancelled", tmp_path / "events.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "finetune", *common,
                                 "--output", str(cancelled), "--events", str(events)],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 300          # a safety net only: a loaded machine imports slowly
        while not (events.exists() and '"step"' in events.read_text("utf-8")):
            assert proc.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 130, stderr.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    log = read_events(events)
    last_step = max(e["step"] for e in log if e["event"] == "step")
    assert last_step < 160, "the run ended before the signal arrived"
    assert log[-2] == {"event": "checkpoint", "step": last_step,
                       "path": str(cancelled / "checkpoints" / f"step-{last_step}")}
    assert log[-1] == {"event": "done", "status": "cancelled", "output": str(cancelled), "error": None,
                       "evaluation": None}
    assert not (cancelled / "pytorch_model.bin").exists()

    assert finetune.main(common + ["--output", str(cancelled), "--resume", "--events", str(events)]) == 0
    resumed_steps = [e["step"] for e in read_events(events)[len(log):] if e["event"] == "step"]
    assert resumed_steps == list(range(last_step + 1, 161))
    full = tmp_path / "full"
    assert finetune.main(common + ["--output", str(full)]) == 0
    assert same_weights(full, cancelled)
