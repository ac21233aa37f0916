"""`launcher.py finetune`: fine-tune a model on gold JSONL and write a checkpoint in its official layout.

One loop for every model. The model plugin supplies `model.training()` (contracts.model.Training):
the examples of a gold document, the loss of a micro-batch, the network, the official layout.

Training: AdamW, linear warm-up then linear decay (transformers' schedule), gradient accumulation, gradient clipping at 1.0
(the HF Trainer default the reference ran with), bf16 autocast on CUDA, dropout as the checkpoint's
config.json sets it. A checkpoint (model, optimizer, scheduler, RNG state, position in the epoch)
is written after every epoch and every --save-every optimizer steps; --resume continues from the
newest. OUTPUT must be new or empty (the run records itself there first, in RUN_FILE); --resume
continues only a run of the same model, base weights and schedule: anything else is refused before
a byte is written. A step whose loss or gradient is not a finite number stops the run before its update. The order of examples in epoch e depends only on (seed, e) and the RNG state (dropout
masks) travels in the checkpoint, so a resumed run, also one stopped mid-epoch, ends with the same
weights as an uninterrupted one.

SIGTERM or SIGINT: the current optimizer step finishes, a checkpoint is written at that step, and
the process exits with 130 (`--resume` continues). Evaluation runs the normal `extract` (span-level
P/R/F1 per type) before training, after every epoch, and on the saved checkpoint reloaded strictly.
--events PATH writes progress as JSON lines for the UI (the contract: workstation/finetune/events.py).
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import random
import re
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

import torch

from contracts.domain import Document, InputError, WeightsError
from contracts.names import Reads
from contracts.torch.memory import is_out_of_memory
from contracts.words import plural
from workstation import engine, plugins
from workstation.finetune.events import Cancelled, StopRequest, TrainingEvents
from workstation.inputs import json_line, require_file

CANCELLED_EXIT = 130


class Diverged(Exception):
    """The loss or the weights stopped being finite numbers: the run stops and writes nothing more."""


def _names(value: str) -> list[str]:
    """One --optimizations word: names separated by commas, as `extract` takes them; "none" is none."""
    return [n for n in (x.strip() for x in value.split(",")) if n and n != "none"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launcher.py finetune", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="an installed model (default: the first, as the UI offers them)")
    p.add_argument("--weights", required=True, type=Path, help="checkpoint directory to start from")
    p.add_argument("--train", required=True, type=Path,
                   help="JSONL: {id, text, output} plus what the model reads (a schema, or a task and labels)")
    p.add_argument("--eval", type=Path, help="JSONL in the same format (default: the training file)")
    p.add_argument("--output", required=True, type=Path, help="directory for the fine-tuned checkpoint")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8, help="examples (windows, prompts) per micro-batch")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--warmup", type=float, default=0.1, help="share of steps for linear warm-up")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--optimizations", nargs="*", default=[],
                   help="comma- or space-separated; those that declare they act in training")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in OUTPUT")
    p.add_argument("--save-every", type=int, default=0, help="also checkpoint every N optimizer steps (0: per epoch)")
    p.add_argument("--keep-checkpoints", type=int, default=2, help="checkpoints kept (the newest)")
    p.add_argument("--no-eval", action="store_true", help="skip every evaluation")
    p.add_argument("--events", type=Path, help="append progress events (JSON lines) to this file")
    p.add_argument("--num-beams", type=int, help="seqgpt evaluation: beams (default: the model's, 4)")
    p.add_argument("--max-new-tokens", type=int, help="seqgpt evaluation: new tokens per prompt (default 256)")
    return p


# ---------------------------------------------------------------- data

def read_gold(path: Path, family) -> list[tuple[Document, list]]:
    """Gold documents, each checked by its model family; every problem names its line."""
    require_file(Path(path), "gold file")
    out = []
    with open(path, encoding="utf-8-sig") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            obj = json_line(raw, n, str(path))
            if not isinstance(obj, dict) or "text" not in obj or "output" not in obj:
                raise InputError(f"{path}: each line needs \"text\" and \"output\", and what {family.name} reads: "
                                 f"{family.reads.fields()}", n)
            doc = Document(str(obj.get("id", n)), obj["text"], obj.get("schema"), obj.get("task"),
                           obj.get("labels"), line=n)
            family.check_reads(doc)
            family.validate(doc)
            if not isinstance(doc.text, str) or not doc.text.strip():
                raise InputError(f"{path}: empty text has nothing to learn from", n)
            out.append((doc, family.validate_gold(doc, obj["output"])))
    if not out:
        raise InputError(f"{path} holds no examples")
    return out


# ---------------------------------------------------------------- evaluation

OUTSIDE = "(not asked for)"       # per-type bucket of predictions under a type the document did not ask for


def _key(info, asked: set[str]) -> tuple:
    return tuple((s.type if s.type in asked else OUTSIDE, s.span, tuple(s.offset) if s.offset is not None else None)
                 for s in info)


def _asked_types(doc: Document, reads: Reads) -> set[str]:
    """Every type the document asks for: schema keys at any level, or the label set (as the model reads it)."""
    if reads == Reads.SCHEMA:
        found, stack = set(), [doc.schema]
        while stack:
            node = stack.pop()
            found |= set(node)
            stack += [sub for sub in node.values() if isinstance(sub, dict)]
        return found
    labels = [doc.labels] if isinstance(doc.labels, str) else list(doc.labels or [])
    return {part.strip() for label in labels for part in re.split("[,，]", label)}


def _gold_key(info) -> tuple:
    return tuple((e["type"], e["span"], tuple(e["offset"]) if e["offset"] is not None else None) for e in info)


def evaluate(model, gold_docs, batch_size: int, options: dict | None = None,
             stop: StopRequest | None = None) -> dict:
    """Tuple-level P/R/F1 per type path: a tuple is right when every element's type, span and offset
    match (a classification label has no offset). Duplicates (overlapping windows) count once.
    A generative model can write types nobody asked for: they count as wrong predictions, under one
    OUTSIDE bucket. Runs on its own copy of the RNG state, so evaluating never changes what
    training draws."""
    counts = defaultdict(lambda: [0, 0, 0])              # path -> [correct, predicted, gold]
    device = str(model.device)
    with torch.random.fork_rng(devices=[device] if device.startswith("cuda") else []):
        results = engine.extract(model, [d for d, _ in gold_docs], batch_size, **(options or {}))
        for (doc, gold), result in zip(gold_docs, results):
            if stop is not None:
                stop.check()
            asked = _asked_types(doc, model.family.reads)
            pred, true = {_key(t, asked) for t in result.tuples}, {_gold_key(t) for t in gold}
            for k in pred | true:
                c = counts["/".join(t for t, _, _ in k)]
                c[0] += k in pred and k in true
                c[1] += k in pred
                c[2] += k in true
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    return {"overall": _prf(total), "per_type": {t: _prf(c) for t, c in sorted(counts.items())}}


def _prf(c) -> dict:
    p = c[0] / c[1] if c[1] else 0.0
    r = c[0] / c[2] if c[2] else 0.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / (p + r) if p + r else 0.0, 4),
            "correct": c[0], "predicted": c[1], "gold": c[2]}


# ---------------------------------------------------------------- checkpoints

# Arguments a resumed run must share with the run it continues (they fix the schedule and the order).
RUN_SHAPE = ("model", "train", "epochs", "batch_size", "grad_accum", "lr", "warmup", "weight_decay", "seed")


def run_shape(args) -> dict:
    return {k: str(getattr(args, k)) for k in RUN_SHAPE}


# Written into OUTPUT before anything else: the folder holds this run, and only a run like it may --resume there.
RUN_FILE = "finetune-run.json"


def _owner(output: Path) -> dict | None:
    """Who wrote OUTPUT: its run file, else (a folder of an older version) the newest checkpoint's run shape."""
    try:
        return json.loads((output / RUN_FILE).read_text("utf-8"))
    except FileNotFoundError:
        pass
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{output / RUN_FILE} is not readable JSON ({e}); choose a new --output") from None
    ck = last_checkpoint(output)
    if ck is None:
        return None
    return {"run": torch.load(ck / "state.pt", map_location="cpu", weights_only=True).get("run", {})}


def check_output(args) -> None:
    """Refuse an OUTPUT that holds anything but this run, before a byte is written there: a new run needs an
    empty (or new) folder, and --resume continues only a run of the same model and shape."""
    out = args.output
    if out.exists() and not out.is_dir():
        raise InputError(f"--output {out} is a file; give a directory for the checkpoint")
    if not out.exists() or not any(out.iterdir()):
        return
    if not args.resume:
        raise InputError(f"--output {out} is not empty: choose a new directory (or --resume the run that wrote it)")
    owner = _owner(out)
    if owner is None:
        raise InputError(f"cannot --resume in {out}: it holds no fine-tuning run (no {RUN_FILE}, no checkpoints); "
                         "choose a new --output")
    run, shape = owner.get("run", {}), run_shape(args)
    if run.get("model", args.model) != args.model:
        raise InputError(f"cannot --resume in {out}: it holds a {run['model']} run, not {args.model}; "
                         "choose a new --output")
    changed = [k for k in RUN_SHAPE if run.get(k, shape[k]) != shape[k]]
    if "weights" in owner and owner["weights"] != str(Path(args.weights).resolve()):
        changed.insert(1, "weights")
    if changed:
        raise InputError(f"cannot resume in {out}: {', '.join('--' + k.replace('_', '-') for k in changed)} "
                         "differ from the run that wrote it; use the same values or a new --output")


def claim_output(args) -> None:
    """Create OUTPUT and record whose run it holds (kept as it is on --resume)."""
    args.output.mkdir(parents=True, exist_ok=True)
    marker = args.output / RUN_FILE
    if not marker.exists():
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps({"model": args.model, "weights": str(Path(args.weights).resolve()),
                                   "run": run_shape(args)}, ensure_ascii=False, indent=2), "utf-8")
        tmp.replace(marker)


def checkpoints(output: Path) -> list[Path]:
    """The complete checkpoints in OUTPUT, oldest first."""
    return sorted((d for d in (output / "checkpoints").glob("step-*") if (d / "state.pt").is_file()),
                  key=lambda d: int(d.name.split("-")[1]))


def last_checkpoint(output: Path) -> Path | None:
    found = checkpoints(output)
    return found[-1] if found else None


def load_resume_state(args) -> dict | None:
    """The newest checkpoint's state, after checking it belongs to a run of the same shape."""
    ck = last_checkpoint(args.output)
    if ck is None:
        print(f"no checkpoint in {args.output / 'checkpoints'}: starting from the beginning")
        return None
    state = torch.load(ck / "state.pt", map_location="cpu", weights_only=True)
    shape = run_shape(args)
    changed = [k for k in RUN_SHAPE if state["run"].get(k, shape[k]) != shape[k]]
    if changed:
        raise InputError(f"cannot resume from {ck}: {', '.join('--' + k.replace('_', '-') for k in changed)} "
                         "differ from the run that wrote it; use the same values or a new --output")
    state["path"] = str(ck)
    return state


def save_checkpoint(output: Path, state: dict, keep: int) -> Path:
    d = output / "checkpoints" / f"step-{state['step']}"
    d.mkdir(parents=True, exist_ok=True)
    # Written under a temporary name first: an interrupted save never looks like a checkpoint.
    torch.save(state, d / "state.pt.tmp")
    (d / "state.pt.tmp").replace(d / "state.pt")
    for old in checkpoints(output)[:-max(keep, 1)]:      # a full-size one is GBs with AdamW state
        shutil.rmtree(old)
    return d


def rng_state(device: str) -> dict:
    state = {"cpu": torch.get_rng_state()}
    if device.startswith("cuda"):
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: str) -> None:
    torch.set_rng_state(state["cpu"])
    if device.startswith("cuda") and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


# ---------------------------------------------------------------- training

def linear_schedule(optimizer, warmup_steps: int, total_steps: int):
    """transformers' linear schedule: the learning rate climbs from 0 over `warmup_steps`, then falls linearly to
    0 at `total_steps`. A LambdaLR, so its state (the step count) is saved in checkpoints and a resumed run
    continues it exactly. (transformers is imported here: loading this module for its parser stays cheap.)"""
    from transformers import get_linear_schedule_with_warmup
    return get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)


def epoch_groups(n_examples: int, args, epoch: int) -> list[list[list[int]]]:
    """Optimizer steps of an epoch, each a list of micro-batches of example indices. The order
    depends only on (seed, epoch), so a resumed run sees exactly the batches it would have."""
    order = torch.randperm(n_examples, generator=torch.Generator().manual_seed(args.seed * 1000 + epoch)).tolist()
    batches = [order[k:k + args.batch_size] for k in range(0, n_examples, args.batch_size)]
    return [batches[g:g + args.grad_accum] for g in range(0, len(batches), args.grad_accum)]


def steps_per_epoch(n_examples: int, args) -> int:
    return math.ceil(math.ceil(n_examples / args.batch_size) / args.grad_accum)


def backward(training, batches: list[list], autocast, slices: int) -> float:
    """Back-propagate one optimizer step's micro-batches, each cut into `slices` slices weighted by their share
    of its rows: both models' losses are means over rows, so the gradient is the step's own. -> the step's loss."""
    total = 0.0
    for rows in batches:
        size = math.ceil(len(rows) / slices)
        for k in range(0, len(rows), size):
            part = rows[k:k + size]
            loss = training.loss(part, autocast) * (len(part) / len(rows)) / len(batches)
            loss.backward()
            total += loss.item()
    return total


def train(training, examples: Sequence, args, device: str, events: TrainingEvents, stop: StopRequest,
          resume: dict | None = None, evaluate_epoch: Callable[[], dict] | None = None,
          before: dict | None = None, log=print) -> dict:
    """Run the epochs from where `resume` left off. Raises Cancelled (after checkpointing) on a stop.

    Returns the loss per optimizer step and the per-epoch evaluations. `before` (the evaluation of
    the original weights) is kept in the checkpoints so a resumed run does not measure it again."""
    network = training.network
    kernel = training.begin()
    params = [q for q in network.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    per_epoch = steps_per_epoch(len(examples), args)
    total = per_epoch * args.epochs
    scheduler = linear_schedule(optimizer, int(args.warmup * total), total)
    step, first_epoch, skip, history, epoch_evals = 0, 0, 0, [], []
    if resume is not None:
        network.load_state_dict(resume["model"], strict=True)
        optimizer.load_state_dict(resume["optimizer"])
        scheduler.load_state_dict(resume["scheduler"])
        step, first_epoch = resume["step"], resume["epoch"]
        skip = resume.get("epoch_step", per_epoch)       # checkpoints of older runs were per epoch
        if skip >= per_epoch:
            first_epoch, skip = first_epoch + 1, 0
        history, epoch_evals = list(resume.get("history", [])), list(resume.get("epoch_evals", []))
        if "rng" in resume:
            set_rng_state(resume["rng"], device)
        log(f"resumed from {resume['path']} (epoch {first_epoch + 1}, step {step})")
    autocast = torch.bfloat16 if args.dtype == "bf16" else None
    slices = 1                  # each micro-batch's forward and backward in this many slices (out-of-memory back-off)

    def checkpoint(epoch: int, done_in_epoch: int) -> None:
        state = {"model": network.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "step": step, "epoch": epoch, "epoch_step": done_in_epoch,
                 "run": run_shape(args), "rng": rng_state(device), "history": history,
                 "epoch_evals": epoch_evals, "before": before}
        path = save_checkpoint(args.output, state, args.keep_checkpoints)
        events.checkpoint(step, path)

    for epoch in range(first_epoch, args.epochs):
        groups = epoch_groups(len(examples), args, epoch)
        t0 = time.perf_counter()
        for i in range(skip if epoch == first_epoch else 0, len(groups)):
            lr = scheduler.get_last_lr()[0]
            batches = [[examples[j] for j in batch] for batch in groups[i]]
            while True:
                try:
                    step_loss = backward(training, batches, autocast, slices)
                    break
                except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                    if not is_out_of_memory(e) or slices >= args.batch_size:
                        raise
                # A part of the step's gradient may have been added before memory ran out: the step starts
                # again from zero, each micro-batch in twice as many slices, and so do the steps after it.
                optimizer.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                slices *= 2
                log(f"out of GPU memory at step {step + 1}: micro-batches of {args.batch_size} examples now run "
                    f"in slices of {math.ceil(args.batch_size / slices)} (the same gradient, more passes)")
            norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
            if not (math.isfinite(step_loss) and math.isfinite(norm)):
                # Stopped before the update: one more step would spread NaN through every weight.
                what = f"the loss became {step_loss}" if not math.isfinite(step_loss) else f"the gradient norm became {norm}"
                raise Diverged(f"training diverged at step {step + 1}: {what} (a smaller --lr may help); "
                               "no weights were written from this step on")
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            history.append(step_loss)
            events.step(step, epoch + 1, step_loss, lr)
            if stop.is_set():
                checkpoint(epoch, i + 1)
                log(f"stopped at step {step}; --resume continues from here")
                raise Cancelled()
            if args.save_every and step % args.save_every == 0 and i + 1 < len(groups):
                checkpoint(epoch, i + 1)
        done = len(groups) - (skip if epoch == first_epoch else 0)
        log(f"epoch {epoch + 1}/{args.epochs}: step {step}, loss {sum(history[-done:]) / max(done, 1):.4f}, "
            f"{time.perf_counter() - t0:.1f}s")
        cancelled = False
        # The last epoch is evaluated on the saved checkpoint, after the loop (same weights).
        if evaluate_epoch is not None and epoch + 1 < args.epochs:
            training.end()
            try:
                metrics = evaluate_epoch()
                epoch_evals.append({"epoch": epoch + 1, "step": step, **metrics})
                events.evaluation("epoch", epoch + 1, step, metrics)
            except Cancelled:
                cancelled = True
            training.begin()
        checkpoint(epoch, len(groups))
        if cancelled or stop.is_set():
            raise Cancelled()
    training.end()
    return {"steps": step, "attention": kernel, "loss_per_step": history, "epochs": epoch_evals}


# ---------------------------------------------------------------- the command

def _message(e: BaseException) -> str:
    return str(e) if isinstance(e, (InputError, WeightsError)) else f"{type(e).__name__}: {e}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(list(argv or []))
    events = TrainingEvents(args.events)
    with StopRequest() as stop:
        try:
            return run(args, events, stop)
        except Diverged as e:
            events.done("failed", args.output, str(e))
            print(f"error: {e}", file=sys.stderr)
            return 1
        except Cancelled:
            events.done("cancelled", args.output)
            print("cancelled; `--resume` continues from the last checkpoint", file=sys.stderr)
            return CANCELLED_EXIT
        except KeyboardInterrupt:
            events.done("cancelled", args.output, "interrupted again while stopping; the last checkpoint "
                                                  "is the one before this step")
            raise
        except BaseException as e:
            events.done("failed", args.output, _message(e))
            raise


def run(args, events: TrainingEvents, stop: StopRequest) -> int:
    for name, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size), ("--grad-accum", args.grad_accum)):
        if value < 1:
            raise InputError(f"{name} must be at least 1, got {value}")
    # Above 1, AdamW's first update alone dwarfs every weight (and a huge value overflows its float32 step).
    if not 0 < args.lr <= 1:
        raise InputError(f"--lr must be a positive number up to 1 (the default is 2e-5), got {args.lr}")
    if not 0 <= args.warmup <= 1:
        raise InputError(f"--warmup is a share of the steps, from 0 to 1, got {args.warmup}")
    if not (math.isfinite(args.weight_decay) and args.weight_decay >= 0):
        raise InputError(f"--weight-decay must be 0 or a positive number, got {args.weight_decay}")
    if args.save_every < 0:
        raise InputError(f"--save-every must be 0 (off) or a number of steps, got {args.save_every}")
    device = engine.resolve_device(args.device)
    events.device = device
    if args.dtype == "bf16" and not device.startswith("cuda"):
        raise InputError("--dtype bf16 needs a CUDA device; on CPU train in fp32")
    if args.output.resolve() == args.weights.resolve():
        raise InputError("--output must differ from --weights; the original checkpoint is kept")
    args.model = args.model or plugins.default_model()
    check_output(args)
    args.optimizations = [n for item in args.optimizations for n in _names(item)]    # --optimizations a,b c
    # Precision is not among them (training keeps fp32 master weights and autocasts: --dtype bf16), nor are
    # those that change how inference batches are packed: each optimization declares whether it acts here.
    usable = plugins.training_optimizations()
    refused = [o for o in args.optimizations if o not in usable]
    if refused:
        raise InputError(f"optimization(s) {', '.join(refused)} do not apply to fine-tuning; "
                         f"use {' / '.join(usable) or 'none'} (and --dtype bf16 for reduced precision)")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    family = engine.family(args.model)
    train_docs = read_gold(args.train, family)
    eval_docs = read_gold(args.eval, family) if args.eval else train_docs
    eval_options = {k: v for k, v in (("num_beams", args.num_beams), ("max_new_tokens", args.max_new_tokens))
                    if v is not None}
    claim_output(args)
    resume = load_resume_state(args) if args.resume else None

    model = family.load(args.weights, device, "fp32")   # weights stay fp32; bf16 is autocast
    engine.apply_optimizations(model, args.optimizations)
    training = model.training()
    examples = [ex for doc, gold in train_docs for ex in training.examples(doc, gold)]
    if not examples:
        raise InputError(f"{args.train}: the gold documents give no training examples")
    print(f"{plural(len(train_docs), 'document')} -> {plural(len(examples), 'training example')}")
    events.start(args.model, steps_per_epoch(len(examples), args) * args.epochs, args.epochs, len(examples),
                 len(train_docs))
    report: dict = {"model": args.model, "weights": str(args.weights), "train": str(args.train),
                    "eval": str(args.eval or args.train), "args": {k: str(v) for k, v in vars(args).items()}}
    evaluate_epoch = None
    if not args.no_eval:
        if resume is not None and resume.get("before") is not None:
            report["before"] = resume["before"]                 # the original weights, measured once
        else:
            report["before"] = evaluate(model, eval_docs, args.batch_size, eval_options, stop)
        events.evaluation("before", None, 0, report["before"])
        print(f"before: {json.dumps(report['before']['overall'])}")
        evaluate_epoch = functools.partial(evaluate, model, eval_docs, args.batch_size, eval_options, stop)
    report["training"] = train(training, examples, args, device, events, stop, resume, evaluate_epoch,
                               report.get("before"))
    report["epochs"] = report["training"].pop("epochs")
    training.write_official(args.output)
    training = model = evaluate_epoch = None                  # the reloaded copy needs the memory
    if device.startswith("cuda"):
        gc.collect()
        torch.cuda.empty_cache()

    if not args.no_eval:
        tuned = family.load(args.output, device, "fp32")      # reload: proves the saved files load strictly
        after = evaluate(tuned, eval_docs, args.batch_size, eval_options, stop)
        step = report["training"]["steps"]
        report["epochs"].append({"epoch": args.epochs, "step": step, **after})
        report["after"] = after
        events.evaluation("epoch", args.epochs, step, after)
        events.evaluation("after", None, step, after)
        print(f"after:  {json.dumps(after['overall'])}")
        for t, m in after["per_type"].items():
            print(f"  {t}: P {m['precision']:.3f} R {m['recall']:.3f} F1 {m['f1']:.3f}")
    evaluation = args.output / "evaluation.json"
    evaluation.write_text(json.dumps(report, indent=2, ensure_ascii=False), "utf-8")
    events.done("completed", args.output, evaluation=evaluation)
    print(f"wrote {args.output}")
    return 0
