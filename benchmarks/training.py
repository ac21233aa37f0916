"""Training-step benchmark: gradient checkpointing off vs on, per model, in one run on one device.

  python3 launcher.py bench train-step [--weights DIR] [--device cuda] [--train-batch N] [--train-len L]

One step = forward, backward, gradient clipping, AdamW update, exactly as `launcher.py finetune`
runs it (fp32 master weights, bf16 autocast on CUDA, fp32 on CPU, SDPA attention, dropout as
config.json sets it). Shapes: RexUniNLU 16 windows x 512 tokens, SeqGPT 8 prompt+answer rows x
1,024 tokens (an extraction answer at the end, as in training). Per variant: the median step
time of several steps after warm-up (CUDA events), peak allocated and reserved memory over those
steps (optimizer state included), and whether checkpointing changes the gradients (same weights,
same batch, same RNG seed, so the same dropout masks).

"Largest batch that fits in 24 GB (RTX 4090)": batch sizes are tried doubling, then bisecting; a
batch fits when two full steps (the second with the optimizer state already allocated) run
without running out of memory and the second step's peak allocated memory stays within the
budget: 24 GiB minus 1.5 GiB kept for the CUDA context, cuBLAS workspaces and allocator
fragmentation. Measured on the GPU at hand, so an H200 can answer for a 4090. CUDA only.

Without --weights both models run on full-size demo weights; --weights DIR runs the model whose
checkpoint DIR holds (model_type in config.json).
"""
from __future__ import annotations

import dataclasses
import gc
import json
import random
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from benchmarks.common import SENTENCES, demo_weights, environment, sync
from contracts.domain import Document, InputError
from contracts.names import Kernel
from workstation import engine

SHAPES = {"rexuninlu": (16, 512), "seqgpt": (8, 1024)}          # (batch, tokens per row)
MODEL_TYPES = {"deberta-v2": "rexuninlu", "bloom": "seqgpt"}
GPU_GIB, RESERVE_GIB = 24.0, 1.5                                 # RTX 4090; context + fragmentation
FIT_RULE = (f"a batch fits when two full training steps run without OOM and the second step's peak allocated "
            f"memory (weights, gradients, AdamW state, activations) is at most {GPU_GIB:g} GiB - {RESERVE_GIB:g} GiB "
            f"(CUDA context, cuBLAS workspace, fragmentation) = {GPU_GIB - RESERVE_GIB:g} GiB; sizes tried doubling "
            "from 1, then bisected")
MAX_FIT_BATCH = 1024
# Entities of the benchmark sentences, so training rows carry gold spans.
ENTITIES = {"人物": ["雅各布·格林", "威廉·格林"], "地理位置": ["西班牙", "巴塞罗那", "山东省", "潍坊", "龙口", "德国"],
            "组织机构": ["北大西洋议会", "中央电视台", "中国电视剧制作中心", "天津泰达", "天津天海"]}
LABELS = list(ENTITIES)


def model_of(weights: Path) -> str:
    try:
        model_type = json.loads((Path(weights) / "config.json").read_text("utf-8")).get("model_type")
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{weights}: no readable config.json ({e})") from None
    if model_type not in MODEL_TYPES:
        raise InputError(f"{weights}: model_type {model_type!r} is neither RexUniNLU nor SeqGPT")
    return MODEL_TYPES[model_type]


def text_of(rng: random.Random, chars: int) -> str:
    text = ""
    while len(text) < chars:
        text += rng.choice(SENTENCES)
    return text[:chars]


def gold_of(text: str) -> list:
    return [[{"type": t, "span": e, "offset": [i, i + len(e)]}]
            for t, names in ENTITIES.items() for e in names
            for i in range(len(text)) if text.startswith(e, i)]


def rex_rows(training, batch: int, length: int, seed: int) -> list:
    """`batch` windows of exactly `length` tokens (at most the 512 of a window), with gold spans."""
    schema = {t: None for t in LABELS}
    rng, rows = random.Random(seed), []
    while len(rows) < batch:
        base = text_of(rng, 4 * length)
        chars = length
        for _ in range(50):                      # characters are not tokens one for one: home in
            text = base[:chars]
            ex = training.examples(Document("b", text, schema), gold_of(text))[0]
            if len(ex.window.ids) == length or chars > len(base):
                break
            chars += length - len(ex.window.ids)
        rows.append(ex)
    return rows


def seqgpt_rows(training, batch: int, length: int, seed: int) -> list:
    """`batch` extraction prompt + answer rows of exactly `length` tokens: the prompt is cut on the
    left, as the reference tokenizer truncates."""
    rng, rows = random.Random(seed), []
    while len(rows) < batch:
        text = text_of(rng, 2 * length)
        ex = training.examples(Document("b", text, task="ext", labels=LABELS), gold_of(text))[0]
        keep = length - len(ex.answer)
        if keep < 1:
            raise InputError(f"--train-len {length} leaves no room for the prompt (the answer is {len(ex.answer)} tokens)")
        rows.append(dataclasses.replace(ex, prompt=ex.prompt[-keep:]))
    return rows


def free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def one_step(training, params, optimizer, rows, autocast) -> None:
    optimizer.zero_grad(set_to_none=True)
    training.loss(rows, autocast).backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()


def gradients(model, training, rows, checkpointing: bool, autocast) -> dict:
    model.knobs.checkpointing = checkpointing
    training.begin()
    training.network.zero_grad(set_to_none=True)
    torch.manual_seed(0)                                     # the same dropout masks with and without
    training.loss(rows, autocast).backward()
    grads = {n: q.grad.detach().float().cpu() for n, q in training.network.named_parameters() if q.grad is not None}
    training.network.zero_grad(set_to_none=True)
    return grads


@contextmanager
def optimizing(model, training, checkpointing: bool, device: str):
    """Training switched on with the checkpointing knob and an AdamW over its parameters; the
    optimizer state and gradients are freed afterwards, so the next variant starts from the weights."""
    model.knobs.checkpointing = checkpointing
    training.begin()
    params = [q for q in training.network.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6)
    try:
        yield params, optimizer
    finally:
        optimizer.state.clear()
        training.network.zero_grad(set_to_none=True)
        free(device)


def timed_steps(model, training, rows, checkpointing: bool, autocast, steps: int, device: str) -> dict:
    with optimizing(model, training, checkpointing, device) as (params, optimizer):
        return _timed_steps(training, params, optimizer, rows, autocast, steps, device)


def _timed_steps(training, params, optimizer, rows, autocast, steps: int, device: str) -> dict:
    for _ in range(2):                                       # warm-up; allocates the optimizer state
        one_step(training, params, optimizer, rows, autocast)
    sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(steps):
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            one_step(training, params, optimizer, rows, autocast)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            one_step(training, params, optimizer, rows, autocast)
            times.append((time.perf_counter() - t0) * 1000)
    out = {"step_ms_p50": round(statistics.median(times), 2), "peak_allocated_MiB": None, "peak_reserved_MiB": None}
    if device.startswith("cuda"):
        out["peak_allocated_MiB"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        out["peak_reserved_MiB"] = round(torch.cuda.max_memory_reserved(device) / 2**20, 1)
    return out


def fits(model, training, rows, batch: int, checkpointing: bool, autocast, device: str) -> bool:
    batch_rows = [rows[i % len(rows)] for i in range(batch)]
    with optimizing(model, training, checkpointing, device) as (params, optimizer):
        try:
            one_step(training, params, optimizer, batch_rows, autocast)
            sync(device)
            torch.cuda.reset_peak_memory_stats(device)
            one_step(training, params, optimizer, batch_rows, autocast)
            sync(device)
            return torch.cuda.max_memory_allocated(device) <= (GPU_GIB - RESERVE_GIB) * 2**30
        except torch.cuda.OutOfMemoryError:
            return False


def largest_batch(model, training, rows, checkpointing: bool, autocast, device: str) -> int:
    good, bad, b = 0, None, 1
    while b <= MAX_FIT_BATCH:                                # doubling ...
        if not fits(model, training, rows, b, checkpointing, autocast, device):
            bad = b
            break
        good, b = b, b * 2
    if bad is None:
        return good
    while bad - good > 1:                                    # ... then bisecting
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(model, training, rows, mid, checkpointing, autocast, device) else (good, mid)
    return good


def train_step(args) -> dict:
    device = engine.resolve_device(args.device)
    on_cuda = device.startswith("cuda")
    autocast = torch.bfloat16 if on_cuda else None
    names = [model_of(Path(args.weights))] if args.weights else list(SHAPES)
    rows_out, shapes = [], {}
    for name in names:
        weights = Path(args.weights) if args.weights else demo_weights(args, name)
        batch, length = args.train_batch or SHAPES[name][0], args.train_len or SHAPES[name][1]
        model = engine.load_model(name, weights, device, "fp32")
        model.knobs.attention = Kernel.SDPA
        training = model.training()
        rows = (rex_rows if name == "rexuninlu" else seqgpt_rows)(training, batch, length, args.seed)
        lengths = sorted({len(r.window.ids) if name == "rexuninlu" else len(r.prompt) + len(r.answer) for r in rows})
        shapes[name] = {"batch": batch, "tokens_per_row": lengths, "weights": str(weights), "demo": model.is_demo}

        plain = gradients(model, training, rows, False, autocast)
        ckpt = gradients(model, training, rows, True, autocast)
        scale = max(g.abs().max().item() for g in plain.values()) or 1.0
        diff = max((plain[k] - ckpt[k]).abs().max().item() for k in plain) / scale
        same_keys = plain.keys() == ckpt.keys()
        del plain, ckpt
        free(device)

        measured = {}
        for checkpointing in (False, True):
            m = timed_steps(model, training, rows, checkpointing, autocast, args.train_steps, device)
            m["largest_batch_24GB"] = (largest_batch(model, training, rows, checkpointing, autocast, device)
                                       if on_cuda else "n/a (CUDA only)")
            measured[checkpointing] = m
        off, on = measured[False], measured[True]
        for checkpointing, m in measured.items():
            saved = added = "-"
            if checkpointing:
                if on_cuda:
                    saved = round(100 * (1 - on["peak_allocated_MiB"] / off["peak_allocated_MiB"]), 1)
                added = round(100 * (on["step_ms_p50"] / off["step_ms_p50"] - 1), 1)
            rows_out.append({"model": name, "checkpointing": "on" if checkpointing else "off",
                             "batch_x_tokens": f"{batch} x {lengths[-1]}", **{k: m[k] for k in (
                                 "step_ms_p50", "peak_allocated_MiB", "peak_reserved_MiB")},
                             "memory_saved_%": saved, "time_added_%": added,
                             "grads_max_rel_diff": float(f"{diff:.3g}") if checkpointing else "-",
                             "grads_agree": (same_keys and diff <= 1e-2) if checkpointing else "-",
                             "largest_batch_24GB": m["largest_batch_24GB"]})
        training.end()
        del model, training, rows
        free(device)
    return {"benchmark": "train-step", "env": environment(device), "shapes": shapes,
            "precision": "bf16 autocast, fp32 master weights" if on_cuda else "fp32",
            "attention": "sdpa", "optimizer": "AdamW, gradient clipping at 1.0",
            "timed_steps": args.train_steps, "fit_rule": FIT_RULE if on_cuda else None,
            "rows": rows_out}


BENCHMARKS = {"train-step": train_step}
