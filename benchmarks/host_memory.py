"""Host memory of `launcher.py extract` as the input grows: streamed, the peak must not grow with it.

For each input size a JSONL file of that many documents is generated and `launcher.py extract` runs on it
in a child process, with the tiny RexUniNLU demo checkpoint on the CPU (very short texts, so 200,000
documents take minutes, not hours), recording into a temporary history database as the CLI does by
default (`--record off` adds --no-record). The child's peak resident set size is the kernel's (os.wait4's
ru_maxrss, for that child alone); its RSS is also sampled from /proc while it runs, to show the curve is flat.

  python3 launcher.py bench host-memory [--sizes 20000,200000] [--record on|off|both] [--out FILE]
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import environment
from workstation.settings import ROOT

SCHEMA = {"人物": None}
TEXTS = ["张三在北京。", "李四去上海", "王五", "赵六来了。"]
SAMPLE_S = 0.5


def write_input(path: Path, documents: int) -> Path:
    """`documents` lines, each a short text with its schema (written line by line: nothing held)."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(documents):
            f.write(json.dumps({"id": i, "text": f"{TEXTS[i % len(TEXTS)]}{i}", "schema": SCHEMA},
                               ensure_ascii=False) + "\n")
    return path


def extract_in_child(weights: Path, source: Path, out: Path, settings: Path, batch_size: int,
                     record: bool) -> dict:
    """Run `launcher.py extract` in a child process; its peak RSS (kernel), RSS samples and wall time."""
    argv = [sys.executable, str(ROOT / "launcher.py"), "extract", "--model", "rexuninlu", "--weights", str(weights),
            "--input", str(source), "--output", str(out), "--device", "cpu", "--batch-size", str(batch_size),
            "--optimizations", "none", *([] if record else ["--no-record"])]
    env = {**os.environ, "IEW_SETTINGS": str(settings), "CUDA_VISIBLE_DEVICES": ""}
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(SAMPLE_S):
            rss = _rss_kib(child.pid)
            if rss is not None:
                samples.append((time.perf_counter() - started, rss))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stderr = child.stderr.read()                      # drained while it runs: a full pipe would block it
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"extract failed ({child.returncode}): {stderr[-2000:]}")
    return {"seconds": seconds, "peak_rss_kib": usage.ru_maxrss, "samples": samples, "stderr": stderr}


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _quartiles(samples: list[tuple[float, int]]) -> list[float]:
    """RSS (MiB) at a quarter, half, three quarters and the end of the run: flat when streamed."""
    if not samples:
        return []
    return [round(samples[min(len(samples) - 1, int(len(samples) * q))][1] / 1024, 1) for q in (0.25, 0.5, 0.75, 1.0)]


def host_memory(args) -> dict:
    from plugins.rexuninlu import demo
    sizes = args.sizes or [20_000, 200_000]
    modes = {"on": [True], "off": [False], "both": [True, False]}[args.record]
    rows: list[dict] = []
    result = {"benchmark": "host-memory", "env": {**environment("cpu"), "cpus": os.cpu_count()},
              "command": "launcher.py extract --model rexuninlu --device cpu (tiny demo checkpoint)",
              "batch_size": args.host_batch, "texts": "2-9 characters, schema {\"人物\": null}", "rows": rows}
    with tempfile.TemporaryDirectory(prefix="iew-host-memory-") as folder:
        work = Path(folder)
        weights = Path(args.weights) if args.weights else demo.write(work / "rexuninlu-tiny", "tiny")
        for documents in sizes:
            source = write_input(work / f"in-{documents}.jsonl", documents)
            for record in modes:
                database = work / f"runs-{documents}-{record}.db"
                settings = work / "settings.toml"
                settings.write_text(f'[storage]\ndatabase = "{database}"\n', "utf-8")
                out = work / "out.jsonl"
                measured = extract_in_child(weights, source, out, settings, args.host_batch, record)
                with open(out, encoding="utf-8") as f:
                    written = sum(1 for _ in f)
                rows.append({"documents": documents, "recorded": record,
                             "seconds": round(measured["seconds"], 1),
                             "docs_per_s": round(documents / measured["seconds"], 1),
                             "peak_rss_MiB": round(measured["peak_rss_kib"] / 1024, 1),
                             "rss_quartiles_MiB": _quartiles(measured["samples"]),
                             "output_lines": written, "in_history": _recorded(database) if record else None})
                out.unlink()
                print(rows[-1], file=sys.stderr)
                if args.out:
                    from benchmarks import save
                    save(result, args.out)
            source.unlink()
    for record in modes:
        same = [r for r in rows if r["recorded"] == record]
        if len(same) > 1:
            result[f"peak_growth_{'recorded' if record else 'not_recorded'}"] = round(
                same[-1]["peak_rss_MiB"] / same[0]["peak_rss_MiB"], 3)
    return result


def _recorded(database: Path) -> int | None:
    """Documents of the run the child kept in the history (None: it recorded none)."""
    with sqlite3.connect(database) as db:
        row = db.execute("SELECT documents FROM runs WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1").fetchone()
    return row[0] if row else None


BENCHMARKS = {"host-memory": host_memory}
