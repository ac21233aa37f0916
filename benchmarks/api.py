"""`bench api-load`: N concurrent HTTP clients against /v1/extract, with and without micro-batching.

The API runs in this process under uvicorn on a free loopback port (real HTTP, real JSON, a temporary
history database); each client thread sends one-document requests through workstation.api.client. Two
variants, same documents, same clients: "one at a time" (every request its own forward pass) and
"micro-batched" (concurrent requests share passes). Reported per variant: requests/s, latency p50/p99,
errors, whether every document was answered exactly once, and whether each output equals the output of
the document sent alone (outputs_identical: the same tuples, confidences aside). Not a test: nothing is
asserted about speed.
"""
from __future__ import annotations

import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import NER_SCHEMA, SENTENCES, environment, same_tuples

# The optimizations a user turns on for RexUniNLU on a GPU (lossless ones plus the fused kernel), with bf16.
FULL_STACK = ("precision", "flash-attention", "sparse-mask", "memory-pool")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(settings):
    import uvicorn

    from workstation.api.app import create_app
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def _variant(settings, texts: list[str], clients: int, batch_size: int, optimizations: list[str],
             dtype: str | None) -> tuple[dict, dict[str, list]]:
    from workstation.api.client import ApiError, Client
    server, thread, url = _serve(settings)
    latencies: list[float] = []
    answers: dict[str, list] = {}
    errors, shared = [0], []
    lock = threading.Lock()

    def one(i: int) -> None:
        with Client(url, retries=20) as api:
            start = time.perf_counter()
            try:
                got = api.extract("rexuninlu", [{"id": f"doc{i}", "text": texts[i]}], schema=NER_SCHEMA,
                                  optimizations=optimizations, dtype=dtype, batch_size=batch_size)
            except (ApiError, OSError):
                with lock:
                    errors[0] += 1
                return
            with lock:
                latencies.append(time.perf_counter() - start)
                shared.append(got.shared_pass)
                for line in got.results:
                    answers.setdefault(line["id"], []).append(line["output"])

    try:
        with Client(url) as api:          # warm-up: load the model once, compile kernels, capture graphs
            for size in (1, batch_size):
                api.extract("rexuninlu", [{"text": t} for t in texts[:size]], schema=NER_SCHEMA,
                            optimizations=optimizations, dtype=dtype, batch_size=batch_size)
        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(one, range(len(texts))))
        seconds = time.perf_counter() - start
    finally:
        server.should_exit = True
        thread.join(30)
    latencies.sort()

    def pct(p: float) -> float:
        return round(1000 * latencies[min(len(latencies) - 1, int(p * len(latencies)))], 1) if latencies else 0.0
    row = {"requests": len(texts), "clients": clients, "requests_per_s": round(len(latencies) / seconds, 2),
           "p50_ms": pct(0.50), "p99_ms": pct(0.99), "errors": errors[0],
           "answered_once": sorted(answers) == sorted(f"doc{i}" for i in range(len(texts)))
           and all(len(v) == 1 for v in answers.values()),
           "mean_shared_pass": round(sum(shared) / len(shared), 2) if shared else 0.0}
    return row, answers


def api_load(args) -> dict:
    from workstation import engine
    from workstation.settings import ApiSettings, ModelSettings, Settings
    device = engine.resolve_device(args.device)
    folder = Path(tempfile.mkdtemp(prefix="iew-bench-api-"))
    weights = args.weights or str(engine.family("rexuninlu").write_demo_weights(
        Path(tempfile.gettempdir()) / "iew-bench" / f"rexuninlu-{'full' if device.startswith('cuda') else 'tiny'}",
        "full" if device.startswith("cuda") else "tiny"))
    # What an API client typically sends: one sentence per request (distinct texts, so no answer can be mixed up).
    texts = [f"{i}. {SENTENCES[(i + args.seed) % len(SENTENCES)]}" for i in range(args.docs)]
    batch_size = args.batch_sizes[0]
    # fp32 eager, and on a GPU the full stack too (what the Optimizations page turns on, bf16), each
    # served one request per pass and micro-batched: the gain is measured within each stack.
    stacks = [("fp32 eager", [], None)]
    if device.startswith("cuda"):
        stacks.append(("full stack bf16", list(FULL_STACK), "bf16"))
    rows, outputs = [], {}
    for stack, optimizations, dtype in stacks:
        for mode, wait_ms, per_pass in (("one at a time", 0.0, 1), ("micro-batched", 5.0, batch_size)):
            name = f"{stack}, {mode}"
            settings = Settings(database=str(folder / f"{name.replace(' ', '-').replace(',', '')}.db"))
            settings.models["rexuninlu"] = ModelSettings(weights=str(weights), device=device, batch_size=batch_size)
            settings.api = ApiSettings(models=["rexuninlu"], queue_size=max(args.clients * 2, 64),
                                       batch_wait_ms=wait_ms, max_batch_documents=per_pass, timeout_s=3600.0)
            row, answers = _variant(settings, texts, args.clients, batch_size, optimizations, dtype)
            outputs[name] = answers
            rows.append({"variant": name, **row})
        alone, shared = rows[-2], rows[-1]
        # Lossless within a stack: each micro-batched answer equals that document's answer in its own pass.
        reference = outputs[alone["variant"]]
        batched = outputs[shared["variant"]]
        shared["outputs_identical"] = all(k in batched and same_tuples(batched[k], v) for k, v in reference.items())
        alone["outputs_identical"] = True
        alone["gain"] = 1.0
        shared["gain"] = round(shared["requests_per_s"] / alone["requests_per_s"], 2) if alone["requests_per_s"] else None
    if len(stacks) > 1:
        base = outputs["fp32 eager, one at a time"]
        for row in rows[2:]:
            got = outputs[row["variant"]]
            row["same_as_fp32"] = f"{sum(k in got and same_tuples(got[k], v) for k, v in base.items())}/{len(base)}"
            row["x_fp32_one_at_a_time"] = round(row["requests_per_s"] / rows[0]["requests_per_s"], 2)
    env = {**environment(device), "weights": str(weights), "documents": len(texts), "clients": args.clients,
           "batch_size": batch_size}
    return {"env": env, "rows": rows}


BENCHMARKS = {"api-load": api_load}
