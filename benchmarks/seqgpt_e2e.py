"""SeqGPT end to end: extraction documents/s from prompts to parsed, grounded Results.

  python3 launcher.py bench seqgpt-e2e --device cuda [--docs 500] [--reference-docs 50] [--new-tokens 64]
      [--batch-sizes 64] [--dtype fp16] [--out FILE]

One process, one device, the same documents (Chinese NER-style extraction, mixed lengths, 3 to 8
labels so some documents take two prompts; deterministic from --seed) and the same weights:
  (a) the reference's way: one prompt at a time through transformers `BloomForCausalLM.generate`
      (fp32, num_beams=4, no sampling), decoded and parsed by our parser; on the first
      --reference-docs documents only (it is slow), so its docs/s is measured there;
  (b) ours, fp32 eager, continuous batching (plain steps), --batch-sizes' last value prompts at once;
  (c) ours, fp32 eager with the memory-pool knob (static, CUDA-graph steps): lossless, must equal (b);
  (d) the full stack: --dtype, the kernel the fused-attention plugin picks, CUDA graphs.
Every variant runs the whole pipeline (prompt building, tokenising, generation, decoding, parsing,
grounding); model load is excluded and a warm-up on the longest documents runs first (kernels,
tokenizer, graph capture of the pool those documents need). Outputs are compared document by
document: (b) and (c) with (a) on (a)'s documents, (c) and (d) with (b) on all of them.

  python3 launcher.py bench seqgpt-cli-e2e --device cuda [--docs 600] [--reference-docs 30] [--new-tokens 64]

The user's path instead: the reference's way as above, then `launcher.py extract --model seqgpt` started as its
own process per run (cold and second run, as `bench cli-e2e` does for RexUniNLU).
"""
from __future__ import annotations

import gc
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import demo_weights, environment, mixed_texts, sync
from contracts.domain import Document
from contracts.model import DEMO_MARKER
from contracts.names import Kernel
from contracts.stages import IDLE, StageClock
from workstation import engine

MIB = 1 << 20
LABELS = ["人物", "地理位置", "组织机构", "时间", "作品", "赛事", "职位", "产品"]
REFERENCE_BEAMS = 4                       # README / model card / ModelScope: beam 4, no sampling


def e2e_documents(n: int, seed: int = 0) -> list[Document]:
    """Extraction documents of mixed length; 7 or 8 labels (a quarter of them) make two prompts."""
    rng = random.Random(seed + 1)
    texts = mixed_texts(n, seed)
    return [Document(f"doc-{i}", text, task="ext", labels=LABELS[:rng.choice([3, 4, 5, 5, 5, 6, 7, 8])], line=i + 1)
            for i, text in enumerate(texts)]


def _memory_start(device: str) -> None:
    sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def _peak_mib(device: str) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / MIB, 1) if device.startswith("cuda") else None


def reference_way(hf, tokenizer, special, docs: list[Document], new_tokens: int, device: str,
                  beams: int = REFERENCE_BEAMS) -> dict:
    """One prompt at a time through `generate`, as the reference's inference loop does."""
    from plugins.seqgpt.pipeline import plan, result
    clock = StageClock(device)
    _memory_start(device)
    start = time.perf_counter()
    outputs = []
    for doc in docs:
        with clock.stage("prepare"):
            (run,) = plan([doc], tokenizer, "zh", 6)
        raw = []
        for encoded in run.encoded:
            ids = torch.tensor([encoded.ids], device=device)
            with clock.device():
                out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=beams,
                                  do_sample=False, max_new_tokens=new_tokens, pad_token_id=special.pad,
                                  eos_token_id=special.eos)
            with clock.stage("decode"):
                raw.append(tokenizer.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=True))
        with clock.stage("decode"):
            run.raw = raw
            outputs.append(result(run).to_json())
    sync(device)
    return {"seconds": time.perf_counter() - start, "outputs": outputs, "stages": clock.finish(),
            "peak_allocated_mib": _peak_mib(device)}


def ours(model, docs: list[Document], batch_size: int, options: dict, device: str) -> dict:
    """The model's own extract() over all documents, measured as the engine measures a run."""
    clock = model.clock = StageClock(device)
    _memory_start(device)
    start = clock.started = time.perf_counter()
    try:
        outputs = [_bare(r.to_json()) for r in model.extract(docs, batch_size=batch_size, **options)]
        sync(device)
        seconds = time.perf_counter() - start
        stages = clock.finish()
    finally:
        model.clock = IDLE
    return {"seconds": seconds, "outputs": outputs, "stages": stages, "backoffs": clock.backoffs,
            "peak_allocated_mib": _peak_mib(device)}


def _bare(output: dict) -> dict:
    """A Result's JSON less `coverage` (what the model read): ours alone, not part of the reference's output."""
    return {k: v for k, v in output.items() if k != "coverage"}


def _same(a: list, b: list) -> str:
    return f"{sum(x == y for x, y in zip(a, b))}/{min(len(a), len(b))}"


def seqgpt_e2e(args) -> dict:
    import transformers
    from transformers import BloomForCausalLM

    from plugins.optimizations.fused_attention import FusedAttention
    from plugins.seqgpt import loading
    from plugins.seqgpt.prompting import prompts_for
    device = engine.resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False            # fp32 is real fp32, as in the reference
    torch.backends.cudnn.allow_tf32 = False
    weights = Path(args.weights) if args.weights else demo_weights(args, "seqgpt")
    docs = e2e_documents(args.docs, args.seed)
    n_ref = min(len(docs), args.reference_docs)
    batch = args.batch_sizes[-1]
    beams = args.num_beams or REFERENCE_BEAMS
    options = {"num_beams": beams, "max_new_tokens": args.new_tokens, "repetition_penalty": 1.0}
    longest = sorted(docs, key=lambda d: -len(d.text))[:batch]     # warm-up: the pool the run needs
    model = engine.load_model("seqgpt", weights, device, "fp32")

    runs: dict[str, dict] = {}
    variants = [("ours fp32 eager, continuous batching", "fp32", "eager", False),
                ("ours fp32 eager + cuda graphs (lossless stack)", "fp32", "eager", True)]
    best = FusedAttention().kernel_for(model)
    best = model.resolve_attention(best)[0] if best else Kernel.SDPA
    full = f"full stack: {args.dtype} + {best} + cuda graphs + continuous batching"
    variants.append((full, args.dtype, best, True))
    for name, dtype, attention, graphs in variants:
        if model.knobs.dtype != dtype:
            model.set_dtype(dtype)
        model.knobs.attention, model.knobs.cuda_graphs = attention, graphs
        ours(model, longest, batch, options, device)                          # warm-up
        runs[name] = ours(model, docs, batch, options, device)
    model.graphs.clear()                                      # the slot pool's KV cache and graphs
    del model
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    tokenizer, special = loading.load_tokenizer(weights), loading.read_special_tokens(weights)
    hf = BloomForCausalLM.from_pretrained(str(weights), dtype=torch.float32).to(device).eval()
    reference = "reference: transformers generate, one prompt at a time, fp32"
    reference_way(hf, tokenizer, special, docs[:1], args.new_tokens, device, beams)               # warm-up
    runs[reference] = reference_way(hf, tokenizer, special, docs[:n_ref], args.new_tokens, device, beams)
    del hf

    batched = variants[0][0]
    ref_rate = n_ref / runs[reference]["seconds"]
    batched_rate = len(docs) / runs[batched]["seconds"]
    rows = []
    for name in [reference] + [v[0] for v in variants]:
        run = runs[name]
        n = n_ref if name == reference else len(docs)
        rate = n / run["seconds"]
        stages = run["stages"]
        row = {"variant": name, "docs": n, "seconds": round(run["seconds"], 3), "docs_per_s": round(rate, 3),
               "x_reference": round(rate / ref_rate, 2), "x_batched_fp32": round(rate / batched_rate, 2),
               "prepare_s": stages["prepare"], "device_s": stages["device"], "decode_s": stages["decode"],
               "device_busy": round(stages["device"] / run["seconds"], 3),
               "peak_allocated_mib": run["peak_allocated_mib"],
               "same_as_reference": _same(run["outputs"], runs[reference]["outputs"]),
               "same_as_batched_fp32": _same(run["outputs"], runs[batched]["outputs"]),
               "outputs_identical": None, "note": ""}
        if name == reference:
            row["note"] = f"first {n_ref} documents only"
        elif name == full:
            row["note"] = "reduced precision: agreement, not identity"
        else:                                   # the fp32 paths: identical to the reference and each other
            row["outputs_identical"] = (run["outputs"][:n_ref] == runs[reference]["outputs"]
                                        and run["outputs"] == runs[batched]["outputs"])
        if run.get("backoffs"):
            row["note"] += f" out-of-memory back-offs: {run['backoffs']}"
        rows.append(row)
    return {"benchmark": "seqgpt-e2e", "env": {**environment(device), "transformers": transformers.__version__},
            "weights": str(weights), "demo_weights": (weights / DEMO_MARKER).exists(),
            "documents": len(docs), "reference_documents": n_ref, "characters": sum(len(d.text) for d in docs),
            "prompts": sum(len(prompts_for(d)) for d in docs), "batch_size": batch, "num_beams": beams,
            "max_new_tokens": args.new_tokens, "repetition_penalty": 1.0,
            "device_time": "CUDA events on the current stream" if device.startswith("cuda")
            else "wall time of the device calls (CPU)", "rows": rows}


# -- the user's path: `launcher.py extract --model seqgpt` as its own processes (issue 31, target 6) --------------

CLI_VARIANTS = {"full stack fp16": ("precision,flash-attention,memory-pool", "fp16"),
                "fp32 eager": ("none", "fp32")}


def seqgpt_cli_e2e(args) -> dict:
    """The reference's way in this process on the first --reference-docs documents (its per-document rate, model
    load excluded: generous to it), then `launcher.py extract --model seqgpt` over all --docs documents as separate
    processes, cold (empty compile cache) and second run, each variant. A row's × reference is its run docs/s (and
    its docs/s counting the whole process) over the reference's docs/s."""
    from transformers import BloomForCausalLM

    from benchmarks import save
    from benchmarks.cli_e2e import CACHE_STATES, digest, extract_command, machine, process_row
    from plugins.seqgpt import loading
    device = engine.resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    weights = Path(args.weights) if args.weights else demo_weights(args, "seqgpt")
    docs = e2e_documents(args.docs, args.seed)
    beams = args.num_beams or REFERENCE_BEAMS
    n_ref = min(len(docs), args.reference_docs)
    variants = {k: v for k, v in CLI_VARIANTS.items() if not args.variants or k in args.variants}
    rows: list[dict] = []
    result = {"benchmark": "seqgpt-cli-e2e", "env": environment(device), "machine": machine(device),
              "documents": len(docs), "reference_documents": n_ref, "num_beams": beams,
              "max_new_tokens": args.new_tokens, "batch_size": max(args.batch_sizes), "rows": rows}

    tokenizer, special = loading.load_tokenizer(weights), loading.read_special_tokens(weights)
    hf = BloomForCausalLM.from_pretrained(str(weights), dtype=torch.float32).to(device).eval()
    reference_way(hf, tokenizer, special, docs[:1], args.new_tokens, device, beams)                      # warm-up
    ref = reference_way(hf, tokenizer, special, docs[:n_ref], args.new_tokens, device, beams)
    del hf
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    ref_rate = n_ref / ref["seconds"]
    rows.append({"variant": "reference: transformers generate, one prompt at a time, fp32 (in this process, "
                 "model load excluded)", "documents": n_ref, "run_docs_per_s": round(ref_rate, 3)})
    print(rows[-1], file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="iew-seqgpt-cli-") as folder:
        work = Path(folder)
        source = work / "in.jsonl"
        with open(source, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"id": d.id, "text": d.text, "task": d.task, "labels": d.labels},
                                   ensure_ascii=False) + "\n")
        for v, (name, (optimizations, dtype)) in enumerate(variants.items()):
            cache, cold_output = work / f"cache-{v}", None
            for state in CACHE_STATES:
                out = work / "out.jsonl"
                argv = extract_command(weights, source, out, device, result["batch_size"], optimizations, dtype,
                                       "seqgpt", ("--num-beams", str(beams), "--max-new-tokens", str(args.new_tokens),
                                                  "--repetition-penalty", "1.0"))
                measured = process_row(argv, cache, device, len(docs), work)
                output = digest(out)
                cold_output = cold_output or output
                with open(out, encoding="utf-8") as f:
                    first = [_bare(json.loads(line)) for line, _ in zip(f, range(n_ref))]
                out.unlink()
                rows.append({"variant": name, "documents": len(docs), "caches": state, **measured,
                             "x_reference_run": round(measured["run_docs_per_s"] / ref_rate, 2),
                             "x_reference_process": round(len(docs) / measured["process_wall_s"] / ref_rate, 2),
                             "same_output_as_cold_run": output == cold_output,
                             "same_as_reference": _same(first, [_bare(o) for o in ref["outputs"]]),
                             "commit": result["env"]["commit"]})
                print(rows[-1], file=sys.stderr)
                if args.out:
                    save(result, args.out)
    return result


BENCHMARKS = {"seqgpt-e2e": seqgpt_e2e, "seqgpt-cli-e2e": seqgpt_cli_e2e}
