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
from workstation.domain import Document

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
    args = p.parse_args(argv)
    result = BENCHMARKS[args.benchmark](args)
    print(json.dumps(result["env"]))
    print_table(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False), "utf-8")
    return 0 if all(r.get("outputs_identical", True) for r in result["rows"]) else 3
