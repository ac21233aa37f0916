"""SeqGPT benchmarks: generation speed and memory of our variants against Hugging Face `generate`.

  python3 launcher.py bench seqgpt-generate --device cuda [--dtype fp16] [--new-tokens 128] [--big-batch 64]
      [--repeats 3] [--long-prompt 5120] [--long-new-tokens 64] [--out FILE]

One process, one GPU, the same weights and prompts for every variant:
  transformers generate (HF BloomForCausalLM, --dtype), ours fp32 eager (the "traditional mode"),
  ours fp16 eager, ours fp16 sdpa (and flash where flash-attn runs), and the full stack: fp16, the
  kernel the fused-attention plugin picks, and CUDA graphs (memory-pool plugin).
Settings: greedy batch 1, greedy --big-batch, 4-beam batch 8 on 256-token prompts; then a long
prompt (--long-prompt tokens, 4 beams, --long-new-tokens), run first, while only our fp16 weights
are on the GPU, so its peak is what a user would see.

Every variant's tokens are compared before its speed is reported: with the same-precision eager
path (ours, which does HF's arithmetic), with fp32 eager (agreement), and for CUDA graphs with the
plain path of the same kernel, which they must equal (the lossless claim). A row whose outputs were
not compared (its reference failed) gets no speed.
"""
from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import SENTENCES, demo_weights, environment, sync
from contracts.names import Kernel
from workstation import engine

MIB = 1 << 20
HF = "transformers generate"


def seqgpt_prompts(tokenizer, n: int, target_tokens: int = 256, seed: int = 0) -> list:
    """n extraction prompts of the reference format, each about `target_tokens` long."""
    from plugins.seqgpt.generation import EncodedPrompt
    from plugins.seqgpt.prompting import prompt_text
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        text = ""
        while len(tokenizer(prompt_text(text, "抽取", ["人物", "地点", "组织"]))["input_ids"]) < target_tokens:
            text += "".join(rng.choice(SENTENCES) for _ in range(max(1, target_tokens // 512)))
        ids = tokenizer(prompt_text(text, "抽取", ["人物", "地点", "组织"]))["input_ids"]
        prompts.append(EncodedPrompt(tuple(ids[-target_tokens:])))
    return prompts


class StepTimer:
    """Per-step latency: a CUDA event after each step is launched (no sync), read at the end."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def step_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [1000 * (b - a) for a, b in zip(self.marks, self.marks[1:])]


def _hf_runner(hf, batch, beams, new_tokens, special):
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Marks(StoppingCriteria):                    # called once per generated token: a step mark
        def __init__(self, timer):
            self.timer = timer

        def __call__(self, input_ids, scores, **kwargs):
            self.timer.mark()
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def run(timer):
        out = hf.generate(input_ids=batch.input_ids, attention_mask=batch.attention_mask, num_beams=beams,
                          do_sample=False, max_new_tokens=new_tokens, pad_token_id=special.pad,
                          eos_token_id=special.eos, stopping_criteria=StoppingCriteriaList([Marks(timer)]))
        rows = out[:, batch.input_ids.shape[1]:].tolist()
        return [row[:row.index(special.eos)] if special.eos in row else row for row in rows]
    return run


def _ours_runner(model, prompts, settings):
    from plugins.seqgpt.generation import generate
    attention = model.resolve_attention(model.knobs.attention)[0]
    graphs = model.graphs if model.knobs.cuda_graphs else None

    def run(timer):
        return generate(model.network, prompts, settings, attention, graphs=graphs, on_step=timer.mark).tokens
    return run


def measure(run, device: str, repeats: int) -> dict:
    """A warm-up call (graph capture, lazy init), then `repeats` timed calls; tokens of the last."""
    on_cuda = device.startswith("cuda")
    with torch.inference_mode():
        run(StepTimer(device))
        gc.collect()
        if on_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        resident = torch.cuda.memory_allocated(device) if on_cuda else None
        seconds, steps = [], []
        for _ in range(repeats):
            timer = StepTimer(device)
            sync(device)
            start = time.perf_counter()
            tokens = run(timer)
            sync(device)
            seconds.append(time.perf_counter() - start)
            steps += timer.step_ms()
    out = {"tokens": tokens, "seconds": statistics.median(seconds), "step_ms": steps, "resident": resident}
    if on_cuda:
        out["peak_allocated"] = torch.cuda.max_memory_allocated(device)
        out["peak_reserved"] = torch.cuda.max_memory_reserved(device)
    return out


def _agreement(tokens, reference) -> str | None:
    if tokens is None or reference is None:
        return None
    return f"{sum(a == b for a, b in zip(tokens, reference))}/{len(reference)}"


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))], 3)


def make_row(setting: str, variant: str, result: dict | None, same: str | None, agree: str | None,
             lossless_vs: str | None = None, lossless: str | None = None) -> dict:
    """A table row. Speed is reported only for a variant whose tokens were compared (`same`)."""
    row = {"setting": setting, "variant": variant, "new_tokens": None, "seconds": None, "new_tokens_per_s": None,
           "step_ms_p50": None, "step_ms_p95": None, "peak_allocated_mib": None, "peak_reserved_mib": None,
           "resident_mib": None, "same_as_eager_same_precision": same, "agreement_with_fp32_eager": agree,
           "outputs_identical": None, "note": ""}
    if result is None or "error" in (result or {}):
        row["note"] = (result or {}).get("error", "not run")
        return row
    if lossless_vs is not None:
        row["outputs_identical"] = lossless is not None and lossless.split("/")[0] == lossless.split("/")[1]
        row["note"] = f"vs {lossless_vs}: {lossless}"
    for key in ("peak_allocated", "peak_reserved", "resident"):
        if result.get(key) is not None:
            row[f"{key}_mib"] = round(result[key] / MIB, 1)
    if same is None:
        row["note"] = "outputs not compared: speed withheld"
        return row
    new = sum(len(t) for t in result["tokens"])
    row.update(new_tokens=new, seconds=round(result["seconds"], 4),
               new_tokens_per_s=round(new / result["seconds"], 1),
               step_ms_p50=_percentile(result["step_ms"], 0.5), step_ms_p95=_percentile(result["step_ms"], 0.95))
    return row


def _progress(rows: list[dict]) -> None:
    for row in rows:                          # as each setting finishes, in case a long run is cut short
        print(json.dumps(row, ensure_ascii=False), file=sys.stderr, flush=True)


def _safe(fn):
    try:
        return fn()
    except Exception as e:                    # noqa: BLE001 - one failing variant must not hide the others
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def _use(model, attention: str, graphs: bool) -> None:
    model.knobs.attention, model.knobs.cuda_graphs = attention, graphs
    model.graphs.clear()                      # each variant's static caches are its own
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def seqgpt_generate(args) -> dict:
    from transformers import BloomForCausalLM

    from plugins.optimizations.fused_attention import FusedAttention
    from plugins.seqgpt.family import DTYPES
    from plugins.seqgpt.generation import Batch, GenerationSettings
    device = engine.resolve_device(args.device)
    dtype = DTYPES[args.dtype]
    repeats = args.repeats
    weights = Path(args.weights) if args.weights else demo_weights(args, "seqgpt")
    low = engine.load_model("seqgpt", weights, device, args.dtype)          # only these weights on the GPU yet
    tok, special = low.tokenizer, low.special
    best = FusedAttention().kernel_for(low)
    best = low.resolve_attention(best)[0] if best else Kernel.SDPA
    plain_kernels = [Kernel.EAGER, Kernel.SDPA] + ([Kernel.FLASH] if best == Kernel.FLASH else [])
    stack = f"ours {args.dtype} + {best} + cuda graphs (full stack)"
    eager = f"ours {args.dtype} eager"
    rows = []

    def ours(settings, prompts, attention, graphs, reps):
        _use(low, attention, graphs)
        return _safe(lambda: measure(_ours_runner(low, prompts, settings), device, reps))

    # 1. Long prompt: only our reduced-precision weights are resident.
    long_len, long_new = args.long_prompt, args.long_new_tokens
    long_setting = f"long prompt {long_len} tokens, 4 beams, {long_new} new"
    long_prompts = seqgpt_prompts(tok, 1, long_len, seed=1)
    s_long = GenerationSettings(num_beams=4, max_new_tokens=long_new, eos_token_id=special.eos,
                                pad_token_id=special.pad)
    long_runs = {eager: ours(s_long, long_prompts, "eager", False, 1)}
    for kernel in plain_kernels[1:]:
        long_runs[f"ours {args.dtype} {kernel}"] = ours(s_long, long_prompts, kernel, False, 1)
    long_runs[stack] = ours(s_long, long_prompts, best, True, 1)
    _use(low, "eager", False)

    hf = BloomForCausalLM.from_pretrained(str(weights), dtype=dtype).to(device).eval()
    long_batch = Batch.left_padded(long_prompts, special.pad, device)
    long_runs[HF] = _safe(lambda: measure(_hf_runner(hf, long_batch, 4, long_new, special), device, 1))
    rows += _rows_for(long_setting, long_runs, eager, None, stack, f"ours {args.dtype} {best}")
    _progress(rows)

    # 2. The three settings on 256-token prompts, every variant.
    full = engine.load_model("seqgpt", weights, device, "fp32")
    for label, batch_size, beams in [("greedy, batch 1", 1, 1), (f"greedy, batch {args.big_batch}", args.big_batch, 1),
                                     ("4-beam, batch 8", 8, 4)]:
        prompts = seqgpt_prompts(tok, batch_size)
        s = GenerationSettings(num_beams=beams, max_new_tokens=args.new_tokens, eos_token_id=special.eos,
                               pad_token_id=special.pad)
        batch = Batch.left_padded(prompts, special.pad, device)
        runs = {HF: _safe(lambda: measure(_hf_runner(hf, batch, beams, args.new_tokens, special), device, repeats))}
        runs["ours fp32 eager"] = _safe(lambda: measure(_ours_runner(full, prompts, s), device, repeats))
        for kernel in plain_kernels:
            runs[f"ours {args.dtype} {kernel}"] = ours(s, prompts, kernel, False, repeats)
        runs[stack] = ours(s, prompts, best, True, repeats)
        _use(low, "eager", False)
        rows += _rows_for(label, runs, eager, "ours fp32 eager", stack, f"ours {args.dtype} {best}")
        _progress(rows[-len(runs):])
    return {"benchmark": "seqgpt-generate", "env": environment(device), "weights": str(weights),
            "dtype": args.dtype, "prompt_tokens": 256, "max_new_tokens": args.new_tokens,
            "long_prompt_tokens": long_len, "long_new_tokens": long_new, "repeats": repeats,
            "full_stack": {"attention": best, "cuda_graphs": True, "dtype": args.dtype},
            "flash_attn": low.resolve_attention("flash")[1] or "runs", "rows": rows}


def _rows_for(setting: str, runs: dict, eager: str, fp32: str | None, stack: str, stack_plain: str) -> list[dict]:
    def tokens(name):
        r = runs.get(name)
        return None if r is None or "error" in r else r["tokens"]
    reference, fp32_tokens = tokens(eager), tokens(fp32) if fp32 else None
    out = []
    for name, result in runs.items():
        if name == fp32:                      # the fp32 reference: compared with reduced-precision eager
            out.append(make_row(setting, name, result, "-" if tokens(name) else None,
                                "reference" if tokens(name) else None))
            continue
        same = _agreement(tokens(name), reference)
        agree = _agreement(tokens(name), fp32_tokens) if fp32 else None
        if name == stack:                     # graphs must give the plain path's tokens (same kernel, dtype)
            out.append(make_row(setting, name, result, same, agree, stack_plain,
                                _agreement(tokens(name), tokens(stack_plain))))
        else:
            out.append(make_row(setting, name, result, same, agree))
    return out


BENCHMARKS = {"seqgpt-generate": seqgpt_generate}
