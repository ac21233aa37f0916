"""Memory pool: 1,000 batches of random shapes, reserved vs peak allocated memory, per allocator setup.

  python3 launcher.py bench memory-pool --device cuda [--batches 1000] [--out FILE]

Expandable segments are read by PyTorch's allocator when CUDA starts, so every variant runs in its
own child process with its own PYTORCH_CUDA_ALLOC_CONF (the same reason the setting needs a restart
in the workstation). Each child runs the same seeded sequence of batches through RexUniNLU's window
scorer (bf16, fused attention, sparse mask) and reports the allocator's high-water marks; the parent
compares every variant's decoded links with the first's. CUDA graphs pad batches to bucket shapes,
and in bf16 a GEMM of another shape may round differently, so there the links are compared as
agreement (the share of links both runs found), not as identity.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import NER_SCHEMA, demo_weights, environment, mixed_texts, sync
from contracts.domain import InputError
from workstation import engine

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {                          # name -> (cuda graphs, expandable segments)
    "no pool (default allocator)": (False, False),
    "expandable segments only": (False, True),
    "cuda graphs only": (True, False),
    "memory pool: cuda graphs + expandable segments": (True, True),
}


def window_pool(model, n_texts: int, seed: int) -> list:
    """First-level NER windows of mixed-length texts: 20 to 512 tokens each."""
    from plugins.rexuninlu.pipeline import document_run
    return [w for t in mixed_texts(n_texts, seed) for w in document_run(model.prompter, t, NER_SCHEMA).send(None)]


def run_variant(weights: str, device: str, graphs: bool, batches: int, seed: int, links_file: str) -> dict:
    """In the child: the random batches through one configuration; allocator statistics. The links
    decoded for every window go to links_file for the parent to compare."""
    from benchmarks.rexuninlu import configure
    model = engine.load_model("rexuninlu", Path(weights), device, "fp32")
    configure(model, "bf16", model.attention_backends[-1], graphs, unpad=True)
    windows = window_pool(model, 600, seed)
    rng = random.Random(seed)
    found, n_windows = [], 0
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(batches):
        batch = rng.sample(windows, rng.randint(1, 64))      # the batch-size setting stays 64
        for links in model.scorer.score(batch, batch_size=64):
            found.append(set(zip(links.rows, links.cols)))
        n_windows += len(batch)
    sync(device)
    seconds = time.perf_counter() - start
    with open(links_file, "wb") as f:
        pickle.dump(found, f)
    stats = torch.cuda.memory_stats(device)
    peak_alloc, peak_reserved = stats["allocated_bytes.all.peak"], stats["reserved_bytes.all.peak"]
    return {"batches": batches, "windows": n_windows, "windows_per_s": round(n_windows / seconds, 1),
            "graphs_captured": len(model.scorer.graphs), "attention": model.knobs.attention,
            "peak_allocated_MiB": round(peak_alloc / 2**20, 1), "peak_reserved_MiB": round(peak_reserved / 2**20, 1),
            "reserved_at_end_MiB": round(torch.cuda.memory_reserved(device) / 2**20, 1),
            "peak_reserved_over_peak_allocated": round(peak_reserved / peak_alloc, 3),
            "alloc_retries": stats.get("num_alloc_retries", 0)}


def agreement(a: list[set], b: list[set]) -> tuple[bool, float]:
    """Identical?, and the share of links (over all windows) that both runs found."""
    both = sum(len(x & y) for x, y in zip(a, b))
    either = sum(len(x | y) for x, y in zip(a, b))
    return a == b, 1.0 if either == 0 else both / either


def in_child(call: list, expandable: bool) -> tuple[dict, list[set]]:
    """run_variant(*call) in a fresh process whose allocator has expandable segments on or off."""
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    if expandable:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.memory import "
            f"run_variant; print(json.dumps(run_variant(*json.loads(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(call)], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"a memory-pool variant failed:\n{done.stderr[-3000:]}")
    with open(call[-1], "rb") as f:
        return json.loads(done.stdout.strip().splitlines()[-1]), pickle.load(f)


def memory_pool(args) -> dict:
    device = engine.resolve_device(args.device)
    if not device.startswith("cuda"):
        raise InputError("memory-pool measures the CUDA allocator; run it with --device cuda")
    weights = str(Path(args.weights) if args.weights else demo_weights(args, "rexuninlu"))
    chosen = {n: v for n, v in VARIANTS.items() if not args.variants or any(x in n for x in args.variants)}
    rows, baseline = [], None
    with tempfile.TemporaryDirectory(prefix="iew-memory-pool-") as scratch:
        for name, (graphs, expandable) in chosen.items():
            call = [weights, device, graphs, args.batches, args.seed, os.path.join(scratch, "links.pkl")]
            stats, links = in_child(call, expandable)
            baseline = baseline if baseline is not None else links
            same, share = agreement(baseline, links)
            row = {"variant": name, **stats, "within_1.2x": stats["peak_reserved_over_peak_allocated"] <= 1.2,
                   "outputs_identical": same, "link_agreement_%": round(100 * share, 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)           # each variant takes minutes: show it as it lands
    return {"benchmark": "memory-pool", "env": environment(device), "weights": weights,
            "rule": "peak reserved / peak allocated over all batches (torch.cuda.memory_stats)", "rows": rows}


BENCHMARKS = {"memory-pool": memory_pool}
