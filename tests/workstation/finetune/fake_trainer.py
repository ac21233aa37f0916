"""A stand-in for `launcher.py finetune` that keeps its event contract, fast and without a model.

Run as a script with the trainer's arguments. It counts the training lines, writes "start", a "before"
evaluation, one "step" per batch (loss 1/step), an "eval" and a "checkpoint" per epoch, then "after",
evaluation.json and "done". SIGTERM: it finishes the step, writes a checkpoint and "done" cancelled, and
exits 130; --resume continues after the step in OUTPUT/fake-checkpoint.json.

FAKE_TRAINER_STEP_S   seconds per step (default 0.02)
FAKE_TRAINER_MODE     "ok" (default) | "die-after:N" (exit 3 after step N, no "done") | "fail" (done failed)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

stop = False


def on_term(signum, frame):
    global stop
    stop = True


def evaluation(f1: float, epoch=None, phase="epoch", step=0) -> dict:
    metrics = {"precision": f1, "recall": f1, "f1": f1, "correct": int(f1 * 10), "predicted": 10, "gold": 10}
    return {"event": "eval", "phase": phase, "epoch": epoch, "step": step, "overall": metrics,
            "per_type": {"人物": metrics, "组织机构/创始人(人物)": {**metrics, "f1": f1 / 2}}}


def main() -> int:
    signal.signal(signal.SIGTERM, on_term)
    p = argparse.ArgumentParser()
    for name in ("--model", "--weights", "--train", "--eval", "--output", "--events", "--dtype", "--device"):
        p.add_argument(name)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--optimizations", nargs="*", default=[])
    p.add_argument("--resume", action="store_true")
    p.add_argument("--no-record", action="store_true")
    args = p.parse_args()
    step_s = float(os.environ.get("FAKE_TRAINER_STEP_S", "0.02"))
    mode = os.environ.get("FAKE_TRAINER_MODE", "ok")
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    examples = sum(1 for line in open(args.train, encoding="utf-8") if line.strip())
    per_epoch = math.ceil(examples / args.batch_size)
    total = per_epoch * args.epochs
    checkpoint = output / "fake-checkpoint.json"
    step = json.loads(checkpoint.read_text())["step"] if args.resume and checkpoint.exists() else 0
    events = open(args.events, "a", encoding="utf-8")

    def emit(event: dict) -> None:
        events.write(json.dumps(event, ensure_ascii=False) + "\n")
        events.flush()

    print(f"fake trainer: {examples} examples, {total} steps, from step {step}", flush=True)
    emit({"event": "start", "time": datetime.now(timezone.utc).isoformat(), "model": args.model,
          "device": args.device, "total_steps": total, "epochs": args.epochs, "examples": examples,
          "documents": examples})
    if step == 0:
        emit(evaluation(0.2, phase="before"))
    if mode == "fail":
        print("RuntimeError: CUDA out of memory (fake)", flush=True)
        emit({"event": "done", "status": "failed", "output": str(output), "error": "CUDA out of memory (fake)",
              "evaluation": None})
        return 1
    started = time.perf_counter()
    while step < total:
        deadline = time.monotonic() + step_s
        while time.monotonic() < deadline and not stop:     # a slow step still hears a cancel at once
            time.sleep(0.005)
        step += 1
        emit({"event": "step", "step": step, "epoch": (step - 1) // per_epoch + 1, "loss": 1.0 / step, "lr": 1e-5,
              "seconds": time.perf_counter() - started, "gpu_allocated_MiB": 100.0 + step, "gpu_peak_MiB": 200.0})
        if mode.startswith("die-after:") and step >= int(mode.split(":")[1]):
            os._exit(3)
        if step % per_epoch == 0:
            emit(evaluation(0.2 + 0.6 * step / total, epoch=step // per_epoch, step=step))
        if stop or step % per_epoch == 0:
            checkpoint.write_text(json.dumps({"step": step}))
            emit({"event": "checkpoint", "step": step, "path": str(checkpoint)})
        if stop:
            emit({"event": "done", "status": "cancelled", "output": str(output), "error": None, "evaluation": None})
            return 130
    after = evaluation(0.8, phase="after", step=step)
    emit(after)
    report = {"before": {k: evaluation(0.2)[k] for k in ("overall", "per_type")},
              "after": {k: after[k] for k in ("overall", "per_type")},
              "training": {"steps": step, "loss_per_step": [1.0 / s for s in range(1, step + 1)]}}
    (output / "evaluation.json").write_text(json.dumps(report, ensure_ascii=False), "utf-8")
    (output / "config.json").write_text("{}")
    emit({"event": "done", "status": "completed", "output": str(output), "error": None,
          "evaluation": str(output / "evaluation.json")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
