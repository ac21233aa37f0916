"""`launcher.py finetune`: fine-tune RexUniNLU on gold JSONL and write a checkpoint in the official layout.

Training loop: AdamW, linear warm-up then linear decay, gradient accumulation, gradient clipping at
1.0 (the HF Trainer default the reference ran with), bf16 autocast on CUDA. A checkpoint
(model, optimizer, scheduler, step) is written after every epoch; --resume continues from the last
one. The order of windows in epoch e is a function of (seed, e), so a resumed run is identical to
an uninterrupted one. Evaluation runs the normal `extract` before and after training.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import torch

from workstation import engine
from workstation.domain import Document, InputError

OFFICIAL_FILES = ("config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
DEMO_MARKER = "RANDOM_DEMO_WEIGHTS.txt"
# Inference optimizations that also make sense for training. precision would cast the weights
# (training keeps fp32 master weights and autocasts: --dtype bf16); sparse-mask and memory-pool
# change how inference batches are packed, which training does not use.
TRAINING_OPTIMIZATIONS = ("gradient-checkpointing", "flash-attention")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launcher.py finetune", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="rexuninlu", help="only rexuninlu can be fine-tuned for now")
    p.add_argument("--weights", required=True, type=Path, help="checkpoint directory to start from")
    p.add_argument("--train", required=True, type=Path, help="JSONL: {id, text, schema, output}")
    p.add_argument("--eval", type=Path, help="JSONL in the same format (default: the training file)")
    p.add_argument("--output", required=True, type=Path, help="directory for the fine-tuned checkpoint")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8, help="windows per micro-batch")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--warmup", type=float, default=0.1, help="share of steps for linear warm-up")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--optimizations", nargs="*", default=[], help="e.g. gradient-checkpointing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="cpu | cuda | auto")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in OUTPUT")
    p.add_argument("--keep-checkpoints", type=int, default=2, help="epoch checkpoints kept (the newest)")
    p.add_argument("--no-eval", action="store_true", help="skip the before/after evaluation")
    return p


# ---------------------------------------------------------------- data

def read_gold(path: Path, family) -> list[tuple[Document, list]]:
    """Gold documents; every problem names its line."""
    from plugins.rexuninlu.training import validate_gold
    if not Path(path).is_file():
        raise InputError(f"gold file {path} does not exist")
    out = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}: malformed JSON ({e.msg} at column {e.colno})", n) from None
            if not isinstance(obj, dict) or "text" not in obj or "output" not in obj:
                raise InputError(f"{path}: each line needs \"text\", \"schema\" and \"output\"", n)
            doc = Document(str(obj.get("id", n)), obj["text"], obj.get("schema"), line=n)
            family.validate(doc)
            if not doc.text:
                raise InputError(f"{path}: empty text has nothing to learn from", n)
            out.append((doc, validate_gold(obj["output"], doc.text, doc.schema, n)))
    if not out:
        raise InputError(f"{path} holds no examples")
    return out


# ---------------------------------------------------------------- evaluation

def _key(info) -> tuple:
    return tuple((s.type, tuple(s.offset)) for s in info)


def _gold_key(info) -> tuple:
    return tuple((e["type"], tuple(e["offset"])) for e in info)


def evaluate(model, gold_docs, batch_size: int) -> dict:
    """Tuple-level P/R/F1 per type path: a tuple is right when every element's type and offset match.
    Duplicates (overlapping windows) count once."""
    counts = defaultdict(lambda: [0, 0, 0])              # path -> [correct, predicted, gold]
    results = model.extract([d for d, _ in gold_docs], batch_size=batch_size)
    for (doc, gold), result in zip(gold_docs, results):
        pred, true = {_key(t) for t in result.tuples}, {_gold_key(t) for t in gold}
        for k in pred | true:
            c = counts["/".join(t for t, _ in k)]
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

def last_checkpoint(output: Path) -> Path | None:
    found = sorted((d for d in (output / "checkpoints").glob("step-*") if (d / "state.pt").is_file()),
                   key=lambda d: int(d.name.split("-")[1]))
    return found[-1] if found else None


# Arguments a resumed run must share with the run it continues (they fix the schedule and the order).
RUN_SHAPE = ("train", "epochs", "batch_size", "grad_accum", "lr", "warmup", "weight_decay", "seed")


def save_checkpoint(output: Path, network, optimizer, scheduler, step: int, epoch: int, keep: int,
                    shape: dict) -> Path:
    d = output / "checkpoints" / f"step-{step}"
    d.mkdir(parents=True, exist_ok=True)
    # Written under a temporary name first: an interrupted save never looks like a checkpoint.
    torch.save({"model": network.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "step": step, "epoch": epoch, "run": shape},
               d / "state.pt.tmp")
    (d / "state.pt.tmp").replace(d / "state.pt")
    done = sorted((c for c in (output / "checkpoints").glob("step-*") if (c / "state.pt").is_file()),
                  key=lambda c: int(c.name.split("-")[1]))
    for old in done[:-max(keep, 1)]:                     # a full-size one is ~1.2 GB with AdamW state
        shutil.rmtree(old)
    return d


def write_official(output: Path, weights: Path, network) -> None:
    """The layout RexUniNLU().load() reads: metadata copied, pytorch_model.bin = the plm.-prefixed state dict."""
    for name in OFFICIAL_FILES + (DEMO_MARKER,):          # a model tuned from random weights is still a demo
        if (weights / name).is_file():
            shutil.copyfile(weights / name, output / name)
    state = {k: v.detach().float().cpu().contiguous() for k, v in network.state_dict().items()}
    torch.save(state, output / "pytorch_model.bin")


# ---------------------------------------------------------------- training

def linear_schedule(optimizer, warmup_steps: int, total_steps: int):
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train(model, examples, args, log=print) -> dict:
    """Run the epochs from where the last checkpoint left off. Returns loss history per optimizer step."""
    from plugins.rexuninlu.training import batch_loss
    network, scorer = model.network, model.scorer
    # The fused Triton kernel has no backward pass; SDPA computes the same attention and has one.
    network.attention_backend = "sdpa" if model.attention_kernel() == "triton" else model.attention_kernel()
    network.plm.encoder.checkpointing = model.knobs.checkpointing
    params = [q for q in network.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    micro = math.ceil(len(examples) / args.batch_size)
    per_epoch = math.ceil(micro / args.grad_accum)
    total = per_epoch * args.epochs
    scheduler = linear_schedule(optimizer, int(args.warmup * total), total)
    step, start_epoch = 0, 0
    shape = {k: str(getattr(args, k)) for k in RUN_SHAPE}
    if args.resume and (ck := last_checkpoint(args.output)):
        state = torch.load(ck / "state.pt", map_location=model.device, weights_only=True)
        changed = [k for k in RUN_SHAPE if state["run"].get(k) != shape[k]]
        if changed:
            raise InputError(f"cannot resume from {ck}: {', '.join('--' + k.replace('_', '-') for k in changed)} "
                             "differ from the run that wrote it; use the same values or a new --output")
        network.load_state_dict(state["model"], strict=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, start_epoch = state["step"], state["epoch"] + 1
        log(f"resumed from {ck} (epoch {start_epoch}, step {step})")
    autocast = torch.bfloat16 if args.dtype == "bf16" else None
    history = []
    network.train()
    for epoch in range(start_epoch, args.epochs):
        # The order depends only on (seed, epoch): resuming at an epoch boundary repeats it exactly.
        order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        batches = [[examples[i] for i in order[k:k + args.batch_size].tolist()]
                   for k in range(0, len(examples), args.batch_size)]
        t0 = time.perf_counter()
        for g in range(0, len(batches), args.grad_accum):
            group = batches[g:g + args.grad_accum]
            total_loss = 0.0
            for batch in group:
                loss = batch_loss(scorer, batch, autocast) / len(group)
                loss.backward()
                total_loss += loss.item()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            history.append(total_loss)
        log(f"epoch {epoch + 1}/{args.epochs}: step {step}, loss {sum(history[-per_epoch:]) / per_epoch:.4f}, "
            f"{time.perf_counter() - t0:.1f}s")
        save_checkpoint(args.output, network, optimizer, scheduler, step, epoch, args.keep_checkpoints, shape)
    network.eval()
    return {"steps": step, "loss_per_step": history}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(list(argv or []))
    if args.model != "rexuninlu":
        raise InputError(f"fine-tuning supports --model rexuninlu only (got {args.model!r})")
    for name, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size), ("--grad-accum", args.grad_accum)):
        if value < 1:
            raise InputError(f"{name} must be at least 1, got {value}")
    device = engine.resolve_device(args.device)
    if args.dtype == "bf16" and not device.startswith("cuda"):
        raise InputError("--dtype bf16 needs a CUDA device; on CPU train in fp32")
    if args.output.resolve() == args.weights.resolve():
        raise InputError("--output must differ from --weights; the original checkpoint is kept")
    refused = [o for o in args.optimizations if o not in TRAINING_OPTIMIZATIONS]
    if refused:
        raise InputError(f"optimization(s) {', '.join(refused)} do not apply to fine-tuning; "
                         f"use {' / '.join(TRAINING_OPTIMIZATIONS)} (and --dtype bf16 for reduced precision)")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    family = engine.family(args.model)
    train_docs = read_gold(args.train, family)
    eval_docs = read_gold(args.eval, family) if args.eval else train_docs
    args.output.mkdir(parents=True, exist_ok=True)

    model = family.load(args.weights, device, "fp32")   # weights stay fp32; bf16 is autocast
    engine.apply_optimizations(model, args.optimizations)
    report: dict = {"weights": str(args.weights), "train": str(args.train),
                    "eval": str(args.eval or args.train), "args": {k: str(v) for k, v in vars(args).items()}}
    if not args.no_eval:
        report["before"] = evaluate(model, eval_docs, args.batch_size)
        print(f"before: {json.dumps(report['before']['overall'])}")

    from plugins.rexuninlu.training import examples as build_examples
    examples = [ex for doc, gold in train_docs for ex in build_examples(model.prompter, doc.text, doc.schema, gold)]
    print(f"{len(train_docs)} documents -> {len(examples)} training windows")
    report["training"] = train(model, examples, args)
    write_official(args.output, args.weights, model.network)

    if not args.no_eval:
        tuned = family.load(args.output, device, "fp32")   # reload: proves the saved files load strictly
        report["after"] = evaluate(tuned, eval_docs, args.batch_size)
        print(f"after:  {json.dumps(report['after']['overall'])}")
        for t, m in report["after"]["per_type"].items():
            print(f"  {t}: P {m['precision']:.3f} R {m['recall']:.3f} F1 {m['f1']:.3f}")
    (args.output / "evaluation.json").write_text(json.dumps(report, indent=2, ensure_ascii=False), "utf-8")
    print(f"wrote {args.output}")
    return 0
