"""The user's RTX 4090s (24 GB each) simulated on a larger GPU, every measurement in one call.

  python3 launcher.py bench budget24 --device cuda [--out benchmarks/results/budget24.json] [--time-limit S]

A card of G GB is a memory budget of G GiB less 1.5 GiB (the CUDA context, cuBLAS workspaces and a desktop's
display live outside PyTorch's allocator; the train-step benchmark's rule), set with
`torch.cuda.set_per_process_memory_fraction`: an allocation past it fails as out of memory, as on the card.
What it measures, on full-size demo checkpoints:

  fits         the largest batch that runs without a back-off, per model, dtype, length and card size: the
               rows of each family's batch_table (batch_size = "auto"). RexUniNLU: windows of 512 (and 128)
               tokens, eager attention (its most memory-hungry kernel). SeqGPT: prompts at once, 4 beams.
               Sizes doubled from 8, then bisected to within an eighth.
  runs         at 24 GB: both models end to end at the settings' batch, at the largest "auto" chooses and at
               one far past it, with the optimization combinations the UI offers (fp32, bf16, fp16): no
               out-of-memory error reaches the caller, the back-offs are counted, and the outputs are compared
               with the fp32 eager run without a budget (lossless: the same tuples; reduced precision: agreement).
  finetune     at 24 GB: `launcher.py finetune` for both models with and without gradient checkpointing, at
               its default micro-batch and a large one: it finishes, and says when it had to slice.
  two_lanes    two processes at 24 GB each on the one GPU, each a lane running the same documents: both
               finish with every document, and the GPU monitor's sampler (NVML) sees both processes.

Sections past their share of --time-limit are skipped and say so; the JSON is rewritten after each step.
"""
from __future__ import annotations

import contextlib
import gc
import io
import json
import multiprocessing
import os
import random
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import demo_weights, environment, mixed_texts, same_tuples, span_agreement, tuple_keys
from benchmarks.seqgpt_e2e import e2e_documents
from benchmarks.training import ENTITIES, LABELS, gold_of, text_of
from contracts.batching import auto_batch_size
from contracts.domain import Document, InputError
from workstation import engine
from workstation.run_config import RunConfig

GIB = 1 << 30
RESERVE_GIB = 1.5
USER_CARD = 24
RTX_4090_BYTES = 25_757_220_864
NER = {"人物": None, "地理位置": None, "组织机构": None, "时间": None, "作品": None}
NEW_TOKENS = 64                        # SeqGPT: new tokens per prompt in these runs (the random model writes all)
LOSSLESS = ("sparse-mask", "flash-attention", "memory-pool")
COMBOS = [("fp32", ()), ("fp32", ("sparse-mask",)), ("fp32", ("flash-attention",)), ("fp32", ("memory-pool",)),
          ("fp32", LOSSLESS), ("bf16", ("precision",)), ("fp16", ("precision",)),
          ("bf16", ("precision", *LOSSLESS)), ("fp16", ("precision", *LOSSLESS))]


class Clock:
    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


def budget(device: str, card_gb: float | None) -> None:
    """Limit this process's allocator to a card of `card_gb` GB (None: no limit)."""
    gc.collect()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = 1.0 if card_gb is None else min(1.0, (card_gb - RESERVE_GIB) * GIB / total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    torch.cuda.reset_peak_memory_stats(device)


def run(model, docs, batch: int, dtype: str, optimizations, **options):
    """engine.run as a surface calls it -> (report, outputs, error or None)."""
    try:
        report = engine.run(model, docs, RunConfig(batch_size=batch, optimizations=list(optimizations), only_applicable=True,
                                                  dtype=dtype, max_tuples=0, options=options))
    except Exception as e:                              # noqa: BLE001 - what reached the caller is the finding
        return None, None, f"{type(e).__name__}: {str(e)[:300]}"
    return report, [r.to_json()["output"] for r in report.results], None


def rex_docs(n: int, tokens: int) -> list[Document]:
    """n documents whose windows are about `tokens` long (1,800 characters: windows of 512 tokens)."""
    chars = 1800 if tokens >= 512 else tokens - 30
    return [Document(f"d{i}", text_of(random.Random(i), chars), NER) for i in range(n)]


def seqgpt_docs(n: int, chars: int) -> list[Document]:
    return [Document(f"d{i}", text_of(random.Random(i), chars), task="ext", labels=LABELS[:5]) for i in range(n)]


def fits(model, docs, batch: int, dtype: str, options: dict) -> tuple[bool, float]:
    report, _, error = run(model, docs, batch, dtype, (), **options)
    if error:
        raise RuntimeError(error)
    return not report.backoffs, (report.peak_memory_bytes or 0) / GIB


def largest(fits_at, cap: int) -> dict:
    """The largest batch for which fits_at(batch) -> (fits, peak GiB) holds: doubled from 8 while it fits, then
    bisected between the last fit and the first that did not, to within an eighth of the answer."""
    lo, hi, peak, probes, size = 0, None, None, 0, 8
    while size <= cap:
        ok, gib = fits_at(size)
        probes += 1
        if not ok:
            hi = size
            break
        lo, peak, size = size, gib, size * 2
    if hi is None:
        return {"largest": lo, "capped": True, "peak_gib": peak and round(peak, 2), "probes": probes}
    while hi - lo > max(lo // 8, 1):
        mid = (lo + hi) // 2
        ok, gib = fits_at(mid)
        probes += 1
        lo, hi, peak = (mid, hi, gib) if ok else (lo, mid, peak)
    return {"largest": lo, "capped": False, "peak_gib": peak and round(peak, 2), "probes": probes}


def fit_tables(device: str, rex, seqgpt, clock: Clock, result: dict, save) -> None:
    rows = result.setdefault("fits", [])
    # The user's card first, for both models; then the other sizes, as far as the time allows. fp16 takes the
    # bytes of bf16, so other sizes measure bf16 only for RexUniNLU and fp16 only for SeqGPT.
    plan = [("rexuninlu", d, 512, USER_CARD) for d in ("fp32", "bf16", "fp16")]
    plan += [("seqgpt", d, 400, USER_CARD) for d in ("fp32", "fp16", "bf16")]
    plan += [("rexuninlu", d, 128, USER_CARD) for d in ("fp32", "bf16")] + [("seqgpt", "fp32", 1000, USER_CARD)]
    for card in (12, 48, 8, 16, 80):
        plan += [("rexuninlu", "fp32", 512, card), ("rexuninlu", "bf16", 512, card)]
        plan += [("seqgpt", "fp32", 400, card), ("seqgpt", "fp16", 400, card)] if card < 80 else []
    for name, dtype, length, card in plan:
        if clock.left() < 0:
            rows.append({"model": name, "dtype": dtype, "length": length, "card_gb": card, "skipped": "time limit"})
            continue
        budget(device, card)
        t0 = time.perf_counter()
        try:
            if name == "rexuninlu":      # a long text gives about 3 windows of 512: two batches of each size probed
                found = largest(lambda b: fits(rex, rex_docs(b if length < 512 else b // 2 + 8, length), b, dtype, {}),
                                1024)
            else:
                found = largest(lambda b: fits(seqgpt, seqgpt_docs(b, length), b, dtype,
                                               {"max_new_tokens": NEW_TOKENS, "num_beams": 4}), 256)
        except RuntimeError as e:
            found = {"error": str(e)}
        rows.append({"model": name, "dtype": dtype, "length": length, "card_gb": card, **found,
                     "seconds": round(time.perf_counter() - t0, 1)})
        print(json.dumps(rows[-1]), flush=True)
        save()
    budget(device, None)


def on_the_card(family, dtype: str) -> int:
    """What batch_size = "auto" picks on an RTX 4090 (it reports 25.76·10⁹ bytes)."""
    return auto_batch_size(family.batch_table, dtype, RTX_4090_BYTES)


def measured(result: dict, name: str, dtype: str, length: int) -> int | None:
    for r in result.get("fits", []):
        if (r["model"], r["dtype"], r["card_gb"], r["length"]) == (name, dtype, USER_CARD, length) and r.get("largest"):
            return r["largest"]
    return None


def end_to_end(device: str, name: str, model, docs, batches: tuple[int, int], options: dict, clock: Clock,
               result: dict, save) -> None:
    """At 24 GB: the combos at the settings' batch, the largest "auto" picks, and one far past it."""
    rows = result.setdefault("runs", [])
    budget(device, None)
    _, reference, error = run(model, docs, batches[0], "fp32", (), **options)
    if error:
        rows.append({"model": name, "error": f"reference: {error}"})
        return
    budget(device, USER_CARD)
    done = set()
    for dtype, combo in COMBOS:
        combo = tuple(engine.applicable(model, combo))          # what the UI would switch on for this model
        if (dtype, combo) in done:
            continue
        done.add((dtype, combo))
        auto = measured(result, name, dtype, 512 if name == "rexuninlu" else 400) or on_the_card(model.family, dtype)
        for label, batch in (("settings", batches[0]), ("auto", auto), ("past auto", batches[1])):
            if clock.left() < 0:
                rows.append({"model": name, "dtype": dtype, "optimizations": list(combo), "batch": label,
                             "skipped": "time limit"})
                continue
            report, outputs, error = run(model, docs, batch, dtype, combo, **options)
            row = {"model": name, "dtype": dtype, "optimizations": list(combo), "batch": label, "batch_size": batch,
                   "error": error}
            if report is not None:
                row.update(documents=len(outputs), seconds=round(report.wall_seconds, 2),
                           peak_gib=round((report.peak_memory_bytes or 0) / GIB, 2), backoffs=len(report.backoffs),
                           smallest_after_backoff=min((b["rows"] for b in report.backoffs), default=None),
                           kernel=report.attention)
                if dtype == "fp32":
                    row.update(same_tuples=same_tuples(outputs, reference),
                               tuples_differing=len(tuple_keys(outputs) ^ tuple_keys(reference)))
                else:
                    row.update(agreement=round(span_agreement(outputs, reference), 4))
            rows.append(row)
            print(json.dumps(row), flush=True)
        save()
    budget(device, None)


def gold_file(name: str, path: Path) -> Path:
    lines = []
    for i in range(48 if name == "rexuninlu" else 32):
        text = text_of(random.Random(100 + i), 1200 if name == "rexuninlu" else 1800)
        line = {"id": str(i), "text": text, "output": gold_of(text)}
        line.update({"schema": {t: None for t in ENTITIES}} if name == "rexuninlu" else
                    {"task": "ext", "labels": list(ENTITIES)})
        lines.append(json.dumps(line, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def finetune_runs(device: str, weights: dict, clock: Clock, result: dict, save) -> None:
    """`launcher.py finetune` at 24 GB, checkpointing off and on, the default micro-batch (8) and a large one."""
    from workstation.finetune import trainer as finetune
    rows = result.setdefault("finetune", [])
    work = Path(tempfile.mkdtemp(prefix="budget24-ft-"))
    for name, big in (("rexuninlu", 64), ("seqgpt", 16)):
        train = gold_file(name, work / f"{name}.jsonl")
        for checkpointing in (False, True):
            for batch in (8, big):
                if clock.left() < 0:
                    rows.append({"model": name, "checkpointing": checkpointing, "batch": batch, "skipped": "time limit"})
                    continue
                budget(device, USER_CARD)
                argv = ["--model", name, "--weights", str(weights[name]), "--train", str(train), "--output",
                        str(work / f"{name}-{checkpointing}-{batch}"), "--epochs", "1", "--batch-size", str(batch),
                        "--dtype", "bf16", "--no-eval", "--device", device, "--keep-checkpoints", "1"]
                if checkpointing:
                    argv += ["--optimizations", "gradient-checkpointing"]
                said = io.StringIO()
                t0 = time.perf_counter()
                try:
                    args = finetune.parser().parse_args(argv)
                    with finetune.StopRequest() as stop, contextlib.redirect_stdout(said):
                        code, error = finetune.run(args, finetune.TrainingEvents(None), stop), None
                except Exception as e:                  # noqa: BLE001 - an error reaching the user is the finding
                    code, error = None, f"{type(e).__name__}: {str(e)[:300]}"
                rows.append({"model": name, "checkpointing": checkpointing, "batch": batch, "exit": code,
                             "error": error, "seconds": round(time.perf_counter() - t0, 1),
                             "peak_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 2),
                             "sliced": [s for s in said.getvalue().splitlines() if "out of GPU memory" in s]})
                print(json.dumps(rows[-1]), flush=True)
                save()
    budget(device, None)


def lane(weights: str, device: str, docs: list, batch: int, out: str, ready, go) -> None:
    """One lane of a batch job in a process of its own, limited to 24 GB."""
    budget(device, USER_CARD)
    model = engine.load_model("rexuninlu", Path(weights), device, "fp32")
    ready.set()
    go.wait(120)
    report = engine.run(model, docs, RunConfig(batch_size=batch, optimizations=[], max_tuples=0))
    Path(out).write_text(json.dumps({"pid": os.getpid(), "outputs": [r.to_json()["output"] for r in report.results],
                                     "backoffs": len(report.backoffs),
                                     "peak_gib": (report.peak_memory_bytes or 0) / GIB}), "utf-8")


def two_lanes(device: str, weights: Path, clock: Clock, result: dict, save) -> None:
    from workstation.monitor import NvmlMonitor
    if clock.left() < 30:
        result["two_lanes"] = {"skipped": "time limit"}
        return
    docs = [Document(f"d{i}", t, NER) for i, t in enumerate(mixed_texts(600, seed=7))]
    batch = measured(result, "rexuninlu", "fp32", 512) or on_the_card(engine.family("rexuninlu"), "fp32")
    ctx = multiprocessing.get_context("spawn")
    work = Path(tempfile.mkdtemp(prefix="budget24-lanes-"))
    go, lanes = ctx.Event(), []
    for k in range(2):
        ready = ctx.Event()
        p = ctx.Process(target=lane, args=(str(weights), device, docs, batch, str(work / f"lane{k}.json"), ready, go))
        p.start()
        lanes.append((p, ready))
    for _, ready in lanes:
        ready.wait(180)
    monitor, seen, most_used = NvmlMonitor(), {}, 0
    t0 = time.perf_counter()
    go.set()
    while any(p.is_alive() for p, _ in lanes) and time.perf_counter() - t0 < 240:
        for gpu in monitor.sample():
            most_used = max(most_used, gpu.memory_used or 0)
            for proc in gpu.processes:
                seen[proc.pid] = max(seen.get(proc.pid, 0), proc.used_bytes or 0)
        time.sleep(0.2)
    for p, _ in lanes:
        p.join(60)
    files = [work / f"lane{k}.json" for k in range(2)]
    outs = [json.loads(f.read_text("utf-8")) if f.exists() else None for f in files]
    result["two_lanes"] = {
        "batch": batch, "documents_each": len(docs), "seconds": round(time.perf_counter() - t0, 1),
        "exit_codes": [p.exitcode for p, _ in lanes], "monitor_available": monitor.available,
        "monitor_reason": monitor.reason, "lane_pids": [p.pid for p, _ in lanes],
        "processes_seen_gib": {str(k): round(v / GIB, 2) for k, v in seen.items()},
        "both_seen": all(p.pid in seen for p, _ in lanes), "gpu_memory_used_most_gib": round(most_used / GIB, 2),
        "documents_written": [len(o["outputs"]) if o else None for o in outs],
        "backoffs": [o["backoffs"] if o else None for o in outs],
        "peak_gib": [round(o["peak_gib"], 2) if o else None for o in outs],
        "lanes_agree": bool(outs[0] and outs[1] and same_tuples(outs[0]["outputs"], outs[1]["outputs"]))}
    monitor.close()
    print(json.dumps(result["two_lanes"]), flush=True)
    save()


def budget24(args) -> dict:
    from benchmarks import save as save_result
    device = engine.resolve_device(args.device)
    if not device.startswith("cuda"):
        raise InputError("budget24 simulates a GPU's memory on a GPU; run it with --device cuda")
    props = torch.cuda.get_device_properties(device)
    result = {"benchmark": "budget24", "env": environment(device), "rows": [],
              "device": {"name": props.name, "capability": list(torch.cuda.get_device_capability(device)),
                         "total_gib": round(props.total_memory / GIB, 2),
                         "shared_memory_per_block_optin": getattr(props, "shared_memory_per_block_optin", None)},
              "rule": f"a card of G GB = an allocator budget of G GiB - {RESERVE_GIB} GiB"}
    out = args.out or Path("benchmarks/results/budget24.json")

    def save() -> None:
        save_result(result, out)
    sections = args.variants or ["fits", "runs", "finetune", "two_lanes"]
    weights = {name: demo_weights(args, name) for name in ("rexuninlu", "seqgpt")}
    rex = engine.load_model("rexuninlu", weights["rexuninlu"], device, "fp32")
    seqgpt = engine.load_model("seqgpt", weights["seqgpt"], device, "fp32")
    limit, start = args.time_limit, time.perf_counter()

    def until(share: float) -> Clock:          # a section may run until this share of the time limit has passed
        return Clock(limit * share - (time.perf_counter() - start))
    if "fits" in sections:
        fit_tables(device, rex, seqgpt, until(0.42), result, save)
    if "runs" in sections:
        end_to_end(device, "rexuninlu", rex, [Document(f"d{i}", t, NER) for i, t in enumerate(mixed_texts(300, 5))],
                   (16, 1024), {}, until(0.55), result, save)
        end_to_end(device, "seqgpt", seqgpt, e2e_documents(40, seed=5), (8, 128), {"max_new_tokens": NEW_TOKENS},
                   until(0.72), result, save)
    del rex, seqgpt
    gc.collect()
    if "finetune" in sections:
        finetune_runs(device, weights, until(0.88), result, save)
    if "two_lanes" in sections:
        two_lanes(device, weights["rexuninlu"], until(1.0), result, save)
    result["rows"] = [{k: r.get(k) for k in ("model", "dtype", "length", "card_gb", "largest", "peak_gib")}
                      for r in result.get("fits", []) if "largest" in r]
    save()
    return result


BENCHMARKS = {"budget24": budget24}
