"""The benchmark suite: variants compared in one process on one device, outputs checked.

  python3 launcher.py bench rex-batching [--weights DIR] [--docs 2000] [--device cuda] [--out FILE]

Times are wall-clock around whole runs with the device synchronised; speed is only reported for
a variant whose outputs were compared with the baseline's (a mismatch is printed, not hidden).
Results are printed as a table and written as JSON; docs/benchmarks.md records them.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from workstation import engine
from workstation.domain import Document, InputError

NER_SCHEMA = {"人物": None, "地理位置": None, "组织机构": None, "时间": None, "作品": None}
SENTENCES = [
    "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "1987年首播的央视版《红楼梦》是中央电视台和中国电视剧制作中心根据中国古典文学名著《红楼梦》摄制的一部古装连续剧。",
    "7月28日，天津泰达在德比战中以0-1负于天津天海。", "大莱龙铁路位于山东省北部环渤海地区，西起位于益羊铁路的潍坊大家洼车站，东至龙口，与龙烟铁路相连。",
    "很满意，音质很好，发货速度快，值得购买。", "《格林童话》是德国民间故事集，由德国的雅各布·格林和威廉·格林兄弟根据民间口述材料改写而成。",
    "学校召开2018届升学及出国深造毕业生座谈会。", "因为周围的山水，早已是一派浑然的美，你就不能再给它增加什么了。",
]


def mixed_texts(n: int, seed: int = 0) -> list[str]:
    """Chinese texts of mixed length (one sentence to ~1,500 characters), deterministic."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        target = int(rng.choice([30, 60, 120, 250, 500, 900, 1500]) * rng.uniform(0.6, 1.2))
        parts, size = [], 0
        while size < target:
            s = rng.choice(SENTENCES)
            parts.append(s)
            size += len(s)
        texts.append("".join(parts)[:target])
    return texts


def environment(device: str) -> dict:
    env = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "torch": torch.__version__,
           "python": platform.python_version(), "device": device}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(device)
        try:
            import pynvml
            pynvml.nvmlInit()
            env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:                                  # noqa: BLE001 - informational only
            pass
    return env


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed_run(model, docs, batch_size, device):
    sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    outputs = [r.to_json()["output"] for r in model.extract(docs, batch_size=batch_size)]
    sync(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if device.startswith("cuda") else None
    return outputs, seconds, peak


def rex_batching(args) -> dict:
    """NER documents/s: one window at a time (the reference's way) vs batched, fp32 eager."""
    device = engine.resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False           # the fp32 path is real fp32
    torch.backends.cudnn.allow_tf32 = False
    weights = Path(args.weights) if args.weights else _demo(args, "rexuninlu")
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
                     "outputs_identical": outputs == baseline[0]})
    n_spans = sum(len(o) for o in baseline[0])
    return {"benchmark": "rex-batching", "env": environment(device), "weights": str(weights),
            "demo_weights": model.is_demo, "documents": len(docs),
            "characters": sum(len(d.text) for d in docs), "spans_in_baseline": n_spans, "rows": rows}


def _demo(args, name: str) -> Path:
    out = Path(tempfile.gettempdir()) / "iew-bench" / f"{name}-full"
    if not (out / "config.json").exists():
        engine.family(name).write_demo_weights(out, "full")
    return out


BENCHMARKS = {"rex-batching": rex_batching}


def print_table(result: dict) -> None:
    rows = result["rows"]
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print(" | ".join(c.ljust(widths[c]) for c in cols))
    print("-|-".join("-" * widths[c] for c in cols))
    for r in rows:
        print(" | ".join(str(r[c]).ljust(widths[c]) for c in cols))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python3 launcher.py bench")
    p.add_argument("benchmark", choices=sorted(BENCHMARKS))
    p.add_argument("--weights", default=None, help="checkpoint dir (default: full-size demo weights)")
    p.add_argument("--device", default="auto")
    p.add_argument("--docs", type=int, default=2000)
    p.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="JSON results file")
    p.add_argument("--dtype", default="fp16", choices=["fp32", "fp16", "bf16"], help="seqgpt-generate")
    p.add_argument("--new-tokens", type=int, default=128, help="seqgpt-generate: max new tokens")
    p.add_argument("--big-batch", type=int, default=64, help="seqgpt-generate: the large greedy batch")
    args = p.parse_args(argv)
    result = BENCHMARKS[args.benchmark](args)
    print(json.dumps(result["env"]))
    print_table(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False), "utf-8")
    lossless_broken = [r for r in result["rows"] if r.get("outputs_identical") is False
                       and not str(r.get("variant", "")).startswith(("full stack", "bf16"))]
    return 3 if lossless_broken else 0


# ---------------------------------------------------------------- optimizations (RexUniNLU)

TFLOP_PER_512_WINDOW = 0.110          # notes/performance-anchors.md §6
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


def configure(model, dtype, attention, graphs, unpad=False):
    """Set knobs directly: the benchmark compares kernels the plugins would choose between
    (fp32 + "triton" is forced here, to measure why the model falls back to SDPA in fp32)."""
    if model.knobs.dtype != dtype:
        model.set_dtype(dtype)
    model.knobs.attention, model.knobs.cuda_graphs, model.knobs.unpad = attention, graphs, unpad
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
    from plugins.rexuninlu.scoring import isolation_mask
    device = engine.resolve_device(args.device)
    if not device.startswith("cuda"):
        raise InputError("rex-encoder times CUDA kernels; run it with --device cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    weights = Path(args.weights) if args.weights else _demo(args, "rexuninlu")
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


def span_agreement(a: list, b: list) -> float:
    """Share of spans (per document, as (type, span, offset) tuples) the two runs have in common."""
    sa = {(i, json.dumps(t, ensure_ascii=False)) for i, o in enumerate(a) for t in o}
    sb = {(i, json.dumps(t, ensure_ascii=False)) for i, o in enumerate(b) for t in o}
    return 1.0 if not sa | sb else len(sa & sb) / len(sa | sb)


def rex_e2e(args) -> dict:
    """End-to-end NER (tokenise -> batch -> forward -> decode): fp32 one window at a time vs stacks."""
    device = engine.resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    weights = Path(args.weights) if args.weights else _demo(args, "rexuninlu")
    model = engine.load_model("rexuninlu", weights, device, "fp32")
    docs = [Document(str(i), t, NER_SCHEMA) for i, t in enumerate(mixed_texts(args.docs, args.seed))]
    big = max(args.batch_sizes)
    plan = [("fp32 eager, one window at a time (traditional)", 1, ("fp32", "eager", False, False)),
            (f"fp32 eager, batch {big}", big, ("fp32", "eager", False, False)),
            (f"lossless stack fp32: sdpa + sparse mask + cuda graphs, batch {big}", big, ("fp32", "sdpa", True, True)),
            (f"full stack bf16: triton + sparse mask + cuda graphs, batch {big}", big, ("bf16", "triton", True, True))]
    rows, baseline = [], None
    for name, batch, knobs in plan:
        configure(model, *knobs)
        timed_run(model, docs[:64], batch, device)           # warm-up: kernels, graph capture
        outputs, seconds, peak = timed_run(model, docs, batch, device)
        if baseline is None:
            baseline = (outputs, seconds)
        rows.append({"variant": name, "seconds": round(seconds, 3), "docs_per_s": round(len(docs) / seconds, 1),
                     "speedup": round(baseline[1] / seconds, 2),
                     "peak_alloc_MiB": round(peak / 2**20) if peak else None,
                     "outputs_identical": outputs == baseline[0],
                     "span_agreement_%": round(100 * span_agreement(outputs, baseline[0]), 2)})
    configure(model, "fp32", "eager", False)
    return {"benchmark": "rex-e2e", "env": environment(device), "weights": str(weights),
            "demo_weights": model.is_demo, "documents": len(docs),
            "spans_in_baseline": sum(len(o) for o in baseline[0]), "rows": rows}


BENCHMARKS.update({"rex-encoder": rex_encoder, "rex-e2e": rex_e2e})


def rex_kernel(args) -> dict:
    """One attention call (B=64, H=12, L=512, d=64, bf16): Triton tile configs vs SDPA, checked."""
    from plugins.rexuninlu.modeling import Structure, attend
    from plugins.rexuninlu.triton_attention import disentangled_attention
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
    for bm, bn, warps in [(64, 64, 4), (128, 64, 8), (128, 32, 4), (64, 32, 4), (128, 64, 4)]:
        candidates[f"triton BLOCK_M={bm} BLOCK_N={bn} warps={warps}"] = \
            (lambda bm=bm, bn=bn, w=warps: disentangled_attention(q, k, v, c2p, p2c, pos, grp, zero, zero, scale,
                                                                   block_m=bm, block_n=bn, num_warps=w))
    rows = []
    for name, fn in candidates.items():
        ms, err = time_it(fn)
        rows.append({"kernel": name, "ms_per_layer_call": round(ms, 3), "max_abs_err_vs_fp32": float(f"{err:.3g}")})
    return {"benchmark": "rex-kernel", "env": environment(device), "shape": [B, H, L, D], "rows": rows}


BENCHMARKS["rex-kernel"] = rex_kernel


# ---------------------------------------------------------------- SeqGPT generation

def seqgpt_prompts(tokenizer, n: int, target_tokens: int = 256, seed: int = 0) -> list:
    """n extraction prompts of the reference format, each about `target_tokens` long."""
    from plugins.seqgpt.generation import EncodedPrompt
    from plugins.seqgpt.prompting import prompt_text
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        text = ""
        while len(tokenizer(prompt_text(text, "抽取", ["人物", "地点", "组织"]))["input_ids"]) < target_tokens:
            text += rng.choice(SENTENCES)
        ids = tokenizer(prompt_text(text, "抽取", ["人物", "地点", "组织"]))["input_ids"]
        prompts.append(EncodedPrompt(tuple(ids[-target_tokens:])))
    return prompts


def seqgpt_generate(args) -> dict:
    """New tokens/s: our generation vs Hugging Face `generate` on the same weights, same run."""
    from transformers import BloomForCausalLM
    from plugins.seqgpt.generation import Batch, GenerationSettings, generate
    device = engine.resolve_device(args.device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    weights = Path(args.weights) if args.weights else _demo(args, "seqgpt")
    ours = engine.load_model("seqgpt", weights, device, "fp32")
    ours.set_dtype(args.dtype)
    hf = BloomForCausalLM.from_pretrained(str(weights), dtype=dtype).to(device).eval()
    tok, special = ours.tokenizer, ours.special
    rows = []
    for label, batch, beams in [("greedy, batch 1", 1, 1), (f"greedy, batch {args.big_batch}", args.big_batch, 1),
                                ("4-beam, batch 8", 8, 4)]:
        prompts = seqgpt_prompts(tok, batch)
        s = GenerationSettings(num_beams=beams, max_new_tokens=args.new_tokens,
                               eos_token_id=special.eos, pad_token_id=special.pad)
        b = Batch.left_padded(prompts, special.pad, device)

        def run_hf():
            out = hf.generate(input_ids=b.input_ids, attention_mask=b.attention_mask, num_beams=beams,
                              do_sample=False, max_new_tokens=args.new_tokens, pad_token_id=special.pad,
                              eos_token_id=special.eos)
            return [[t for t in row.tolist() if t != special.pad][:] for row in out[:, b.input_ids.shape[1]:]]

        results = {}
        for name, fn in [("ours " + ours.knobs.attention, lambda: generate(ours.network, prompts, s, ours.knobs.attention).tokens),
                         ("transformers generate", run_hf)]:
            with torch.inference_mode():
                fn()                                              # warm-up
                sync(device)
                start = time.perf_counter()
                tokens = fn()
                sync(device)
            seconds = time.perf_counter() - start
            tokens = [t[:t.index(special.eos)] if special.eos in t else t for t in tokens]
            new = sum(len(t) for t in tokens)
            results[name] = tokens
            rows.append({"setting": label, "implementation": name, "seconds": round(seconds, 3),
                         "new_tokens": new, "new_tokens_per_s": round(new / seconds, 1)})
        a, h = results.values()
        same = sum(x == y for x, y in zip(a, h))
        rows[-2]["same_tokens_as_generate"] = f"{same}/{len(a)}"
        rows[-1]["same_tokens_as_generate"] = "-"
    return {"benchmark": "seqgpt-generate", "env": environment(device), "weights": str(weights),
            "dtype": args.dtype, "prompt_tokens": 256, "max_new_tokens": args.new_tokens, "rows": rows}


BENCHMARKS["seqgpt-generate"] = seqgpt_generate
