"""The user's path, timed from outside: `launcher.py extract` started as a separate process per run.

For each output density (benchmarks/density.py: the head shift is calibrated in this process and written into a
copy of the checkpoint, since the child loads its weights from disk) and input size, the same mixed documents
(benchmarks.common.mixed_texts) go through each variant twice, each time in a new process:

  cold        with an empty compile cache folder (IEW_CACHE_DIR: Triton's and Inductor's on-disk caches), as on a
              machine that never ran the workstation;
  second run  with the folder the cold run filled, as every later run on that machine.

A row holds the process's wall (start to exit, as the user waits), what the child reports on its `process:` line
(model load, warm-up = graph capture with the kernel compiles it sets off, first result, all in seconds since the
OS started it), the run's own wall and docs/s (engine.run, model loaded), device busy, and the commit, machine,
command and cache state it was measured with.

  python3 launcher.py bench cli-e2e [--sizes 1000,10000] [--densities ...] [--variants ...] [--device cuda]
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import NER_SCHEMA, commit, demo_weights, environment, mixed_texts
from contracts.domain import Document
from workstation import engine
from workstation.settings import ROOT

# Variant -> (--optimizations, --dtype). The GPU's full stack is what docs/benchmarks.md calls it: bf16 (precision),
# the Triton attention kernel, the sparse mask and CUDA graphs (memory-pool). The CPU has fp32 eager alone.
GPU_VARIANTS = {
    "full stack bf16": ("precision,flash-attention,sparse-mask,memory-pool", "bf16"),
    "full stack bf16 + host-workers": ("precision,flash-attention,sparse-mask,memory-pool,host-workers", "bf16"),
}
CPU_VARIANTS = {
    "fp32 eager": ("none", "fp32"),
    "fp32 eager + host-workers": ("host-workers", "fp32"),
}
CACHE_STATES = ("cold", "second run")

RUN_LINE = re.compile(r"([\d,]+) documents? in ([\d.]+)s")
BUSY = re.compile(r"device busy (\d+)%")
SAT_OUT = re.compile(r"^note: (\S+) off", re.M)
HANDED_OVER = re.compile(r"^note: host-workers handed over to the worker processes after ([\d,]+) documents", re.M)
PROCESS_LINE = re.compile(r"process: model load ([\d.]+|-)s? · warm-up ([\d.]+)s · first result ([\d.]+|-)s?")


def write_input(path: Path, documents: int, seed: int) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(mixed_texts(documents, seed)):
            f.write(json.dumps({"id": str(i), "text": text, "schema": NER_SCHEMA}, ensure_ascii=False) + "\n")
    return path


def calibrated_weights(weights: Path, out: Path, density: str, device: str, seed: int) -> tuple[Path, dict]:
    """A copy of `weights` whose head extracts `density`'s spans per character per type (as rex-e2e calibrates it),
    the two head biases it changes written into the copy's state dict."""
    from benchmarks.density import DENSITIES, calibrate
    from plugins.rexuninlu.loading import WEIGHT_FILES
    model = engine.load_model("rexuninlu", weights, device, "fp32")
    sample = [Document(f"c{i}", t, NER_SCHEMA) for i, t in enumerate(mixed_texts(48, seed + 1))]
    calibration = calibrate(model, sample, DENSITIES[density])
    shutil.copytree(weights, out, ignore=shutil.ignore_patterns(*WEIGHT_FILES))
    state = model.network.state_dict()
    source = next(weights / name for name in WEIGHT_FILES if (weights / name).exists())
    if source.suffix == ".safetensors":
        from safetensors.torch import load_file, save_file
        saved = load_file(source)
        for key in ("ffnq.bias", "ffnk.bias"):
            saved[key] = state[key].detach().cpu().float().contiguous()
        save_file(saved, out / source.name)
    else:
        saved = torch.load(source, map_location="cpu", weights_only=True)
        for key in ("ffnq.bias", "ffnk.bias"):
            saved[key] = state[key].detach().cpu().float().contiguous()
        torch.save(saved, out / source.name)
    engine.unload(model)
    return out, calibration


def extract_command(weights: Path, source: Path, out: Path, device: str, batch_size: int, optimizations: str,
                    dtype: str, model: str = "rexuninlu", options: tuple[str, ...] = ()) -> list[str]:
    """`launcher.py extract` as a user types it, unrecorded; `options`: the model's own flags after the rest."""
    return [sys.executable, str(ROOT / "launcher.py"), "extract", "--model", model, "--weights", str(weights),
            "--input", str(source), "--output", str(out), "--device", device, "--batch-size", str(batch_size),
            "--optimizations", optimizations, "--dtype", dtype, *options, "--no-record"]


def run_process(argv: list[str], cache: Path, device: str) -> dict:
    """One `launcher.py extract` process, its wall from start to exit, and what its stderr reports."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}
    env["IEW_CACHE_DIR"] = str(cache)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"extract failed ({done.returncode}): {done.stderr[-2000:]}")
    return {"process_wall_s": wall, **parse_report(done.stderr)}


def process_row(argv: list[str], cache: Path, device: str, documents: int, work: Path) -> dict:
    """One `launcher.py extract` process as a row's measured part: its report, docs/s counting the whole process,
    and its command with the temporary folder written as $TMP."""
    measured = run_process(argv, cache, device)
    return {**{k: round(x, 3) if isinstance(x, float) else x for k, x in measured.items()},
            "process_docs_per_s": round(documents / measured["process_wall_s"], 1),
            "command": " ".join(["launcher.py", *argv[2:]]).replace(str(work), "$TMP")}


def parse_report(stderr: str) -> dict:
    """The figures `launcher.py extract` prints on stderr (workstation/cli.py: the run line, the stage line and
    the process line); a line missing is an error, not a blank figure."""
    run, busy, process = RUN_LINE.search(stderr), BUSY.search(stderr), PROCESS_LINE.search(stderr)
    if not (run and process):
        raise RuntimeError(f"extract's report lacks its run or process line:\n{stderr[-2000:]}")
    documents, seconds = int(run.group(1).replace(",", "")), float(run.group(2))

    def number(text: str) -> float | None:
        return None if text == "-" else float(text)
    return {"documents_reported": documents, "run_s": seconds,
            "run_docs_per_s": round(documents / seconds, 1) if seconds else None,
            "device_busy_%": int(busy.group(1)) if busy else None,
            "model_load_s": number(process.group(1)), "warm_up_s": float(process.group(2)),
            "first_result_s": number(process.group(3)), "sat_out": SAT_OUT.findall(stderr),
            "host_workers_after": int(handed.group(1).replace(",", "")) if (handed := HANDED_OVER.search(stderr)) else None}


def machine(device: str) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"gpu": torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
            "cpu": cpu, "cpus": os.cpu_count()}


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def cli_e2e(args) -> dict:
    from benchmarks import save
    from benchmarks.density import DENSITIES
    device = engine.resolve_device(args.device)
    on_gpu = device.startswith("cuda")
    variants = GPU_VARIANTS if on_gpu else CPU_VARIANTS
    if args.variants:
        variants = {k: v for k, v in variants.items() if any(name == k for name in args.variants)} or variants
    sizes = args.sizes or [args.docs]
    batch = max(args.batch_sizes)
    rows: list[dict] = []
    result = {"benchmark": "cli-e2e", "env": environment(device), "commit": commit(), "machine": machine(device),
              "batch_size": batch, "densities": {}, "rows": rows}
    with tempfile.TemporaryDirectory(prefix="iew-cli-e2e-") as folder:
        work = Path(folder)
        base = Path(args.weights) if args.weights else demo_weights(args, "rexuninlu")
        for density in args.densities or list(DENSITIES):
            weights, calibration = calibrated_weights(base, work / f"weights-{density}", density, device, args.seed)
            result["densities"][density] = calibration
            for documents in sizes:
                source = write_input(work / f"in-{documents}.jsonl", documents, args.seed)
                for v, (name, (optimizations, dtype)) in enumerate(variants.items()):
                    cache = work / f"cache-{density}-{documents}-{v}"          # empty for the cold run
                    cold_output = None
                    for state in CACHE_STATES:
                        out = work / "out.jsonl"
                        argv = extract_command(weights, source, out, device, batch, optimizations, dtype)
                        try:
                            measured = process_row(argv, cache, device, documents, work)
                        except RuntimeError as e:         # kept as a row: the other rows still say something
                            rows.append({"density": density, "documents": documents, "variant": name, "caches": state,
                                         "error": str(e)[-1500:]})
                            print(rows[-1], file=sys.stderr)
                            continue
                        lines = sum(1 for _ in open(out, "rb"))
                        output = digest(out)
                        cold_output = cold_output or output
                        out.unlink()
                        rows.append({"density": density, "documents": documents, "variant": name, "caches": state,
                                     "caches_warm": state != "cold", **measured,
                                     "output_lines": lines, "same_output_as_cold_run": output == cold_output,
                                     "commit": result["commit"], "machine": result["machine"]})
                        print({k: rows[-1][k] for k in ("density", "documents", "variant", "caches", "process_wall_s",
                                                        "model_load_s", "warm_up_s", "run_docs_per_s",
                                                        "first_result_s", "device_busy_%", "sat_out",
                                                        "host_workers_after")}, file=sys.stderr)
                        if args.out:
                            save(result, args.out)
                source.unlink()
            shutil.rmtree(weights)
    return result


BENCHMARKS = {"cli-e2e": cli_e2e}
