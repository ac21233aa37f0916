"""The benchmark suite: variants compared in one process on one device, outputs checked.

  python3 launcher.py bench NAME [--weights DIR] [--device cuda] [--out FILE]   (NAME: see BENCHMARKS)

Times are wall-clock around whole runs with the device synchronised; speed is only reported for
a variant whose outputs were compared with the baseline's (a mismatch is printed, not hidden).
Results are printed as a table and written as JSON; docs/benchmarks.md records them.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import api, budget24, cli_e2e, host_memory, memory, rexuninlu, seqgpt, seqgpt_e2e, training

# One module per subject; each exports BENCHMARKS = {name: fn(args) -> {"env", "rows", ...}}.
BENCHMARKS = {**rexuninlu.BENCHMARKS, **seqgpt.BENCHMARKS, **seqgpt_e2e.BENCHMARKS, **memory.BENCHMARKS,
              **training.BENCHMARKS, **api.BENCHMARKS, **host_memory.BENCHMARKS, **budget24.BENCHMARKS,
              **cli_e2e.BENCHMARKS}


def print_table(result: dict) -> None:
    for table in result.get("tables", []):             # several tables (rex-e2e: one per density)
        print({k: v for k, v in table.items() if k != "rows"})
        print_table(table)
    if "rows" not in result:
        return
    rows = result["rows"]
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print(" | ".join(c.ljust(widths[c]) for c in cols))
    print("-|-".join("-" * widths[c] for c in cols))
    for r in rows:
        print(" | ".join(str(r[c]).ljust(widths[c]) for c in cols))


def save(result: dict, out: Path) -> None:
    """Write results (benchmarks that run long also call this after each row, so a run cut short by a
    time limit still leaves what it measured)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False), "utf-8")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python3 launcher.py bench")
    p.add_argument("benchmark", choices=sorted(BENCHMARKS))
    p.add_argument("--weights", default=None, help="checkpoint dir (default: full-size demo weights)")
    p.add_argument("--device", default="auto")
    p.add_argument("--docs", type=int, default=2000)
    p.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--host-workers", type=int, default=None,
                   help="rex-e2e: worker processes of the host-workers rows (default: the plugin's, cores - 1, at most 12)")
    p.add_argument("--densities", type=lambda s: s.split(","), default=None,
                   help="rex-e2e: output densities (sparse,realistic,dense; benchmarks/density.py)")
    p.add_argument("--out", type=Path, default=None, help="JSON results file")
    p.add_argument("--dtype", default="fp16", choices=["fp32", "fp16", "bf16"], help="seqgpt-generate")
    p.add_argument("--new-tokens", type=int, default=128, help="seqgpt-generate: max new tokens")
    p.add_argument("--big-batch", type=int, default=64, help="seqgpt-generate: the large greedy batch")
    p.add_argument("--repeats", type=int, default=3, help="seqgpt-generate: timed calls per variant")
    p.add_argument("--long-prompt", type=int, default=5120, help="seqgpt-generate: tokens of the long prompt")
    p.add_argument("--long-new-tokens", type=int, default=64, help="seqgpt-generate: new tokens after it")
    p.add_argument("--num-beams", type=int, default=None,
                   help="seqgpt-e2e: beams (default 4, the reference's setting; 1 = greedy)")
    p.add_argument("--reference-docs", type=int, default=50,
                   help="seqgpt-e2e: documents the one-prompt-at-a-time reference runs (the first ones)")
    p.add_argument("--batches", type=int, default=1000, help="memory-pool: random-shape batches per variant")
    p.add_argument("--variants", type=lambda s: s.split(";" if ";" in s else ","), default=None,
                   help="memory-pool, rex-e2e: run only variants whose names contain one of these (comma-separated; "
                        "separate them with ';' when the names hold commas)")
    p.add_argument("--train-batch", type=int, default=None, help="train-step: rows per step (default 16 / 8)")
    p.add_argument("--train-len", type=int, default=None, help="train-step: tokens per row (default 512 / 1024)")
    p.add_argument("--train-steps", type=int, default=5, help="train-step: timed steps after warm-up")
    p.add_argument("--clients", type=int, default=16, help="api-load, api-memory: HTTP client processes")
    p.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2],
                   help="api-load: server processes of its micro-batched rows (default 1,2); api-memory: the first")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="host-memory: input sizes in documents (default 20000,200000); cli-e2e: (default --docs)")
    p.add_argument("--record", default="on", choices=["on", "off", "both"],
                   help="host-memory: record into a temporary history (on: the CLI's default), --no-record, or both")
    p.add_argument("--host-batch", type=int, default=64, help="host-memory: extract --batch-size")
    p.add_argument("--time-limit", type=float, default=540, help="budget24: seconds before later sections are skipped")
    args = p.parse_args(argv)
    result = BENCHMARKS[args.benchmark](args)
    if args.out:
        save(result, args.out)
    print(json.dumps(result["env"]))
    print_table(result)
    rows = result.get("rows", []) + [r for t in result.get("tables", []) for r in t["rows"]]
    lossless_broken = [r for r in rows if r.get("outputs_identical") is False
                       and not str(r.get("variant", "")).startswith(("full stack", "bf16"))
                       and not r.get("differences_are_fp32_rounding")]
    return 3 if lossless_broken else 0

