"""What every benchmark shares: the environment record, timing, test texts, demo weights."""
from __future__ import annotations

import json
import os
import platform
import random
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from workstation import engine
from workstation.settings import ROOT

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
    env = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit(),
           "torch": torch.__version__, "python": platform.python_version(), "device": device}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(device)
        try:
            import pynvml
            pynvml.nvmlInit()
            env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:                                  # noqa: BLE001 - informational only
            pass
    return env


def commit() -> str:
    """HEAD, marked '+changes' when the working tree differs from it (the figures are then of code not in HEAD);
    IEW_COMMIT names it for a copy whose .git is absent or not its own (a device machine's)."""
    if os.environ.get("IEW_COMMIT"):
        return os.environ["IEW_COMMIT"]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        except OSError:                 # no git installed
            return ""
    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


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


def demo_weights(args, name: str) -> Path:
    out = Path(tempfile.gettempdir()) / "iew-bench" / f"{name}-full"
    if not (out / "config.json").exists():
        engine.family(name).write_demo_weights(out, "full")
    return out


def without_confidence(outputs: list) -> list:
    """A run's outputs with the confidences left out: what variants of one model are compared on. A
    confidence moves with the logits (bf16, another kernel, another batch shape) while the tuple stays."""
    return [[[{k: v for k, v in e.items() if k != "confidence"} for e in t] for t in o] for o in outputs]


def same_tuples(a: list, b: list) -> bool:
    """Two runs' outputs hold the same tuples (types, spans, offsets) in the same order."""
    return without_confidence(a) == without_confidence(b)


def tuple_keys(outputs: list) -> set:
    """(document index, tuple as JSON without confidences) of every extracted tuple of a run's outputs."""
    return set(tuples_by_key(outputs))


def tuples_by_key(outputs: list) -> dict:
    """Each extracted tuple, confidences and all, under its tuple_keys key."""
    return {(i, json.dumps(bare, ensure_ascii=False)): t for i, (o, stripped) in
            enumerate(zip(outputs, without_confidence(outputs))) for t, bare in zip(o, stripped)}


def threshold_ties(a: list, b: list) -> int:
    """Of the tuples in one run and not the other, those holding a span of confidence 0.5 (4 places): the logit of
    its weakest link lies within 2e-4 of 0, the decision threshold, so whether it is kept follows the order in
    which the GEMMs of a batch shape add up, not the decoding."""
    in_a, in_b = tuples_by_key(a), tuples_by_key(b)
    either = in_a | in_b
    return sum(any(e.get("confidence") == 0.5 for e in either[k]) for k in in_a.keys() ^ in_b.keys())


def span_agreement(a: list, b: list) -> float:
    """Share of spans (per document, as (type, span, offset) tuples) the two runs have in common."""
    sa, sb = tuple_keys(a), tuple_keys(b)
    return 1.0 if not sa | sb else len(sa & sb) / len(sa | sb)
