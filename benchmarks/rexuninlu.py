"""RexUniNLU benchmarks: batching, the encoder's kernels and precision, end to end, the attention kernel."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from benchmarks.common import (
    NER_SCHEMA,
    demo_weights,
    environment,
    mixed_texts,
    same_tuples,
    span_agreement,
    sync,
    threshold_ties,
    timed_run,
    tuple_keys,
)
from contracts.domain import Document, InputError
from workstation import engine
from workstation.run_config import RunConfig


def rex_batching(args) -> dict:
    """NER documents/s: one window at a time (the reference's way) vs batched, fp32 eager."""
    device = engine.resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False           # the fp32 path is real fp32
    torch.backends.cudnn.allow_tf32 = False
    weights = Path(args.weights) if args.weights else demo_weights(args, "rexuninlu")
    model = engine.load_model("rexuninlu", weights, device, "fp32")
    docs = [Document(str(i), t, NER_SCHEMA) for i, t in enumerate(mixed_texts(args.docs, args.seed))]
    timed_run(model, docs[:32], 8, device)                   # warm-up: allocator, kernels, tokenizer
    rows, baseline = [], None
    for batch_size in [1] + args.batch_sizes:
        tokens0 = model.tokens_processed()
        outputs, seconds, peak = timed_run(model, docs, batch_size, device)
        if baseline is None:
            baseline = (outputs, seconds)
        rows.append({"variant": "one window at a time" if batch_size == 1 else f"batched, batch {batch_size}",
                     "batch_size": batch_size, "seconds": round(seconds, 3),
                     "docs_per_s": round(len(docs) / seconds, 2),
                     "tokens_per_s": round((model.tokens_processed() - tokens0) / seconds),
                     "speedup": round(baseline[1] / seconds, 2),
                     "peak_allocated_MiB": round(peak / 2**20) if peak else None,
                     "outputs_identical": same_tuples(outputs, baseline[0])})
    n_spans = sum(len(o) for o in baseline[0])
    return {"benchmark": "rex-batching", "env": environment(device), "weights": str(weights),
            "demo_weights": model.is_demo, "documents": len(docs),
            "characters": sum(len(d.text) for d in docs), "spans_in_baseline": n_spans, "rows": rows}


TFLOP_PER_512_WINDOW = 0.110          # docs/performance.md §1
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "4090": 165.2, "A100": 312.0}

VARIANTS = {                          # name -> (dtype, attention, cuda_graphs)
    "fp32 eager (traditional)": ("fp32", "eager", False),
    "fp32 sdpa": ("fp32", "sdpa", False),
    "fp32 triton": ("fp32", "triton", False),
    "fp32 eager + cuda graphs": ("fp32", "eager", True),
    "bf16 eager": ("bf16", "eager", False),
    "bf16 sdpa": ("bf16", "sdpa", False),
    "bf16 triton": ("bf16", "triton", False),
    "bf16 triton + cuda graphs (full stack)": ("bf16", "triton", True),
}


def configure(model, dtype, attention, graphs, unpad=False, host_workers=0):
    """Set knobs directly: the benchmark compares kernels the plugins would choose between
    (fp32 + "triton" is forced here, to measure why the model falls back to SDPA in fp32)."""
    if model.knobs.dtype != dtype:
        model.set_dtype(dtype)
    model.knobs.attention, model.knobs.cuda_graphs, model.knobs.unpad = attention, graphs, unpad
    model.knobs.host_workers = host_workers
    model.network.attention_backend = attention
    model.scorer.graphs.clear()


def full_windows(model, n: int):
    """n windows of 512 tokens: NER over long Chinese text (hint + 505 text tokens)."""
    from plugins.rexuninlu.pipeline import document_run
    text = "".join(mixed_texts(50, seed=11))
    windows = document_run(model.prompter, text, NER_SCHEMA).send(None)
    windows = [w for w in windows if len(w.ids) == 512]
    return (windows * (n // len(windows) + 1))[:n]


def rex_encoder(args) -> dict:
    """Model time per batch of 512-token windows, per variant; logits compared with fp32 eager."""
    device = engine.resolve_device(args.device)
    if not device.startswith("cuda"):
        raise InputError("rex-encoder times CUDA kernels; run it with --device cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    weights = Path(args.weights) if args.weights else demo_weights(args, "rexuninlu")
    model = engine.load_model("rexuninlu", weights, device, "fp32")
    gpu = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    peak_tflops = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in gpu), None)
    rows = []
    for batch in args.batch_sizes:
        rows_ = [[w] for w in full_windows(model, batch)]
        base_logits, base_peak = None, None
        for name, (dtype, attention, graphs) in VARIANTS.items():
            configure(model, dtype, attention, graphs)
            p = model.scorer.pack(rows_)
            pairs = p.valid[:, :, None] & p.valid[:, None, :]
            with torch.inference_mode():
                sync(device)
                torch.cuda.reset_peak_memory_stats(device)   # before warm-up: graph capture allocates then
                before = torch.cuda.memory_allocated(device)
                for _ in range(3):
                    logits = model.scorer.logits(p)          # warm-up (and graph capture)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                iters = max(5, min(50, 400 // batch))
                start.record()
                for _ in range(iters):
                    logits = model.scorer.logits(p)
                end.record()
                sync(device)
                ms = start.elapsed_time(end) / iters
                peak = torch.cuda.max_memory_allocated(device) - before
                got = logits[pairs].float()
            if base_logits is None:
                base_logits, base_peak = got.clone(), peak
            agree = ((got > 0) == (base_logits > 0)).float().mean().item()
            seq_s = batch / (ms / 1000)
            rows.append({"batch": batch, "variant": name, "ms_per_batch": round(ms, 3),
                         "seq_per_s": round(seq_s, 1), "speedup": None,
                         "share_of_bf16_peak_%": round(100 * seq_s * TFLOP_PER_512_WINDOW / peak_tflops, 2)
                         if peak_tflops else None,
                         "peak_alloc_MiB": round(peak / 2**20, 1),
                         "peak_vs_fp32_%": round(100 * peak / base_peak, 1),
                         "max_abs_dlogit": float(f"{(got - base_logits).abs().max().item():.3g}"),
                         "decision_agreement_%": round(100 * agree, 4)})
        base = next(r for r in rows if r["batch"] == batch)
        for r in rows:
            if r["batch"] == batch:
                r["speedup"] = round(base["ms_per_batch"] / r["ms_per_batch"], 2)
    configure(model, "fp32", "eager", False)
    return {"benchmark": "rex-encoder", "env": environment(device), "weights": str(weights),
            "demo_weights": model.is_demo, "window_tokens": 512, "rows": rows}


def rex_e2e(args) -> dict:
    """Documents/s end to end (tokenise -> batch -> forward -> decode -> serialise), where the time
    went, at three output densities; outputs compared with one window at a time in fp32.

    The "before" rows of docs/benchmarks.md (the host path before the end-to-end rebuild) are no longer
    run: the switches that selected that path left the product with #32.
    """
    from benchmarks import save
    from benchmarks.density import DENSITIES, calibrate
    from plugins.optimizations.host_workers import default_workers
    device = engine.resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    weights = Path(args.weights) if args.weights else demo_weights(args, "rexuninlu")
    model = engine.load_model("rexuninlu", weights, device, "fp32")
    docs = [Document(str(i), t, NER_SCHEMA) for i, t in enumerate(mixed_texts(args.docs, args.seed))]
    sample = [Document(f"c{i}", t, NER_SCHEMA) for i, t in enumerate(mixed_texts(min(48, args.docs), args.seed + 1))]
    big = max(args.batch_sizes)
    workers = args.host_workers or default_workers()
    plan = [("fp32 eager, one window at a time (traditional)", 1, ("fp32", "eager", False, False)),
            (f"fp32 eager, batch {big}", big, ("fp32", "eager", False, False)),
            (f"lossless stack fp32: sdpa + sparse mask + cuda graphs, batch {big}", big, ("fp32", "sdpa", True, True)),
            (f"full stack bf16: triton + sparse mask + cuda graphs, batch {big}", big, ("bf16", "triton", True, True)),
            (f"fp32 eager + host workers, batch {big}", big, ("fp32", "eager", False, False, workers)),
            (f"full stack bf16: triton + sparse mask + cuda graphs + host workers, batch {big}", big,
             ("bf16", "triton", True, True, workers))]
    if args.variants:      # the baseline always runs
        plan = [row for i, row in enumerate(plan) if i == 0 or any(v in row[0] for v in args.variants)]
    tables: list[dict] = []
    result = {"benchmark": "rex-e2e", "env": environment(device), "weights": str(weights),
              "demo_weights": model.is_demo, "documents": len(docs), "characters": sum(len(d.text) for d in docs),
              "device_time": "CUDA events on the run's stream", "host_workers": workers, "tables": tables}
    for density in args.densities or list(DENSITIES):
        configure(model, "fp32", "eager", False)
        calibration = calibrate(model, sample, DENSITIES[density])
        rows, baseline = [], None
        tables.append({"density": density, **calibration, "rows": rows})
        for name, batch, knobs in plan:
            configure(model, *knobs)
            # Warm-up: kernels compiled, with CUDA graphs every shape the run meets captured (a workstation
            # captures each once per session; 64 documents left some to the timed run), host workers started.
            engine.run(model, docs if knobs[2] or knobs[4:] else docs[:64], RunConfig(batch_size=batch),
                       keep_results=False)
            sink: list[bytes] = []
            report = engine.run(model, docs, RunConfig(batch_size=batch), keep_results=False,
                                on_result=lambda _, r: sink.append(r.to_json_line()))
            outputs = [json.loads(line)["output"] for line in sink]
            if baseline is None:
                baseline = (outputs, report.wall_seconds)
            rows.append({"variant": name, "seconds": round(report.wall_seconds, 3),
                         "docs_per_s": round(len(docs) / report.wall_seconds, 1),
                         "vs_one_window": round(baseline[1] / report.wall_seconds, 2),
                         "stages_s": report.stages, "device_busy_%": round(100 * report.device_busy, 1),
                         "peak_alloc_MiB": round(report.peak_memory_bytes / 2**20) if report.peak_memory_bytes else None,
                         "outputs_identical": same_tuples(outputs, baseline[0]),
                         "tuples_differing_vs_one_window": tuples_differing(outputs, baseline[0]),
                         "of_them_at_the_threshold": threshold_ties(outputs, baseline[0]),
                         "span_agreement_%": round(100 * span_agreement(outputs, baseline[0]), 2)})
            # fp32 rows may differ from one window only by ties at the threshold (threshold_ties): not a loss.
            differing = rows[-1]["tuples_differing_vs_one_window"]
            rows[-1]["differences_are_fp32_rounding"] = 0 < differing == rows[-1]["of_them_at_the_threshold"]
            tables[-1]["tuples_per_doc"] = round(sum(len(o) for o in baseline[0]) / len(docs), 1)
            ref = next((r for r in rows if r["variant"] == f"fp32 eager, batch {big}"), None)
            for r in rows:
                r["vs_batched_fp32"] = round(r["docs_per_s"] / ref["docs_per_s"], 2) if ref else None
            if args.out:
                save(result, args.out)
    configure(model, "fp32", "eager", False)
    return result


def tuples_differing(a: list, b: list) -> int:
    """(document, tuple) pairs in one run and not the other (fp32 runs of different batch shapes can
    differ where a logit lies within rounding of 0: GEMMs of other shapes sum in another order)."""
    return len(tuple_keys(a) ^ tuple_keys(b))


def rex_kernel(args) -> dict:
    """One attention call (B=64, H=12, L=512, d=64, bf16): Triton tile configs vs SDPA, checked."""
    from plugins.rexuninlu.modeling import Structure, attend
    from plugins.rexuninlu.triton_attention import disentangled_attention, kernel_codes
    device = engine.resolve_device(args.device)
    if not device.startswith("cuda"):
        raise InputError("rex-kernel times CUDA kernels; run it with --device cuda")
    g = torch.Generator(device=device).manual_seed(0)
    B, H, L, D, S = 64, 12, 512, 64, 256
    q, k, v = (torch.randn(B, H, L, D, device=device, generator=g, dtype=torch.bfloat16) for _ in range(3))
    c2p, p2c = (torch.randn(B, H, L, 2 * S, device=device, generator=g, dtype=torch.bfloat16) for _ in range(2))
    pos = torch.arange(L, device=device).expand(B, L).contiguous()
    grp = torch.full((B, L), -1, device=device)
    zero = torch.zeros((B, L), dtype=torch.long, device=device)
    st = Structure(pos, (pos[:, :, None] - pos[:, None, :] + S).clamp(0, 2 * S - 1),
                   torch.ones(B, L, L, dtype=torch.bool, device=device), (grp, zero, zero))
    scale = 1 / (3 * D) ** 0.5
    reference = attend(q.float(), k.float(), v.float(), c2p.float(), p2c.float(), st, scale, "eager")

    def time_it(fn):
        for _ in range(3):
            out = fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            out = fn()
        end.record()
        sync(device)
        return start.elapsed_time(end) / 20, (out.float() - reference).abs().max().item()
    candidates = {"sdpa with materialised bias": lambda: attend(q, k, v, c2p, p2c, st, scale, "sdpa"),
                  "flash sdpa, no bias (lower bound, not equivalent)":
                      lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)}
    codes = kernel_codes(pos, grp, zero, zero)
    for bm, bn, warps in [(64, 32, 4), (64, 16, 4), (64, 16, 2), (128, 16, 4), (128, 16, 8), (32, 16, 2),
                          (32, 32, 2), (128, 32, 4), (64, 64, 4)]:
        candidates[f"triton BLOCK_M={bm} BLOCK_N={bn} warps={warps}"] = (lambda bm=bm, bn=bn, w=warps: disentangled_attention(
            q, k, v, c2p, p2c, codes, scale, block_m=bm, block_n=bn, num_warps=w))
    rows = []
    for name, fn in candidates.items():
        ms, err = time_it(fn)
        rows.append({"kernel": name, "ms_per_layer_call": round(ms, 3), "max_abs_err_vs_fp32": float(f"{err:.3g}")})
    return {"benchmark": "rex-kernel", "env": environment(device), "shape": [B, H, L, D], "rows": rows}


BENCHMARKS = {"rex-batching": rex_batching, "rex-encoder": rex_encoder, "rex-e2e": rex_e2e,
              "rex-kernel": rex_kernel}
