"""`bench api-load`: the HTTP API against the CLI on the same short documents, every party in its own process.
`bench api-memory`: the API server's resident memory over a long stream of requests.

api-load. One-sentence documents (distinct texts, NER with a 5-type schema), one per request, as an API client
typically sends them. In one run, on one machine:

  cli                  `launcher.py extract` over the same documents as a JSONL file (batch --batch-sizes[0],
                       recording into the history as by default); its own "N documents in Xs" is the figure the
                       API is held to (the model loaded; the process's wall is reported beside it);
  API variants         `launcher.py serve` in a process of its own (a temporary settings file and history), and
                       --clients client processes (benchmarks/api_client.py: httpx alone) sending their share of
                       the documents one request at a time, after a few warm-up requests each (so every worker
                       process has loaded its model); one variant per --workers value, micro-batched (the [api]
                       defaults: 5 ms window, up to batch-size documents a pass), and with one worker, one request
                       per pass as well;
  cli (again)          the CLI once more, last, so the API rows sit between two CLI runs on a machine whose load
                       moves (the load average is recorded per row).

Per API row: requests/s, its ratio to each CLI run, latency p50/p99, errors, each document answered once, runs in
the history (one per request, none lost, ids distinct), requests per pass, and whether every answer holds the CLI's
tuples for that document (confidences aside). Not a test: nothing is asserted about speed.

api-memory. `launcher.py serve` (--workers, default 1) and --clients client processes sending --docs one-sentence
requests; the server's resident set (its processes together, psutil) and the runs in the history are sampled every
few seconds. Reported: RSS after the warm-up, at each tenth of the requests, the peak, and the growth between the
first and the last tenth.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import NER_SCHEMA, SENTENCES, environment, same_tuples
from workstation.settings import ROOT

# The optimizations a user turns on for RexUniNLU on a GPU (lossless ones plus the fused kernel), with bf16.
FULL_STACK = ("precision", "flash-attention", "sparse-mask", "memory-pool")
WARMUP_REQUESTS = 4             # per client, before the clock starts: every worker process loads its model
RSS_SAMPLE_S = 5.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings_file(folder: Path, weights: str, device: str, batch_size: int, port: int, wait_ms: float,
                   per_pass: int, queue_size: int) -> Path:
    """A settings.toml of its own: a fresh history, the benchmark's weights and batch, the API's lanes."""
    path = folder / "settings.toml"
    path.write_text(f"""[storage]
database = "{folder / 'runs.db'}"
demo_weights_dir = "{Path(tempfile.gettempdir()) / 'iew-bench' / 'demo'}"
[models.rexuninlu]
weights = "{weights}"
device = "{device}"
batch_size = {batch_size}
[api]
port = {port}
models = ["rexuninlu"]
queue_size = {queue_size}
batch_wait_ms = {wait_ms}
max_batch_documents = {per_pass}
timeout_s = 3600.0
""", "utf-8")
    return path


def _environ(settings: Path) -> dict:
    return {**os.environ, "IEW_SETTINGS": str(settings), "PYTHONUNBUFFERED": "1"}


def _serve(settings: Path, workers: int, port: int) -> subprocess.Popen:
    log = open(settings.parent / "serve.log", "w")
    server = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "serve", "--workers", str(workers)],
                              cwd=ROOT, env=_environ(settings), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited: {(settings.parent / 'serve.log').read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError("the server did not listen within 600 s")


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _bodies(items: list[dict], optimizations: list[str], dtype: str | None, batch_size: int) -> list[dict]:
    return [{"model": "rexuninlu", "documents": [item], "optimizations": optimizations, "dtype": dtype,
             "batch_size": batch_size} for item in items]


def _clients(url: str, bodies: list[dict], clients: int, folder: Path, keep_answers: bool = True,
             during=None) -> tuple[float, list[dict]]:
    """Start the client processes, let them warm up, then time them all from one start to the last answer.
    `during(seconds_since_start)` is called every RSS_SAMPLE_S while they run."""
    procs = []
    for i in range(clients):
        share = folder / f"client{i}.jsonl"
        with open(share, "w", encoding="utf-8") as f:
            for body in bodies[i::clients]:
                f.write(json.dumps(body, ensure_ascii=False) + "\n")
        # As a script, not `-m benchmarks.api_client`: the package's __init__ imports every benchmark and torch, which
        # cost each client seconds of start and exit on a busy machine.
        args = [sys.executable, str(ROOT / "benchmarks" / "api_client.py"), url, str(share), str(folder / f"client{i}.json"),
                "--warmup", str(WARMUP_REQUESTS)] + ([] if keep_answers else ["--no-answers"])
        procs.append(subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("a client process failed before the start")
    start = time.perf_counter()                  # for `during`
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    next_sample = start
    while any(p.poll() is None for p in procs):
        if during is not None and time.perf_counter() >= next_sample:
            during(time.perf_counter() - start)
            next_sample += RSS_SAMPLE_S
        time.sleep(0.02)
    if any(p.returncode for p in procs):
        raise RuntimeError("a client process failed")
    parts = [json.loads((folder / f"client{i}.json").read_text("utf-8")) for i in range(clients)]
    # From the first client's first request to the last one's last answer, by the clients' own clocks: the
    # processes' exits are no part of the server's time.
    return max(p["ended"] for p in parts) - min(p["started"] for p in parts), parts


def _history_runs(database: Path) -> tuple[int, int]:
    """(runs the API recorded, distinct ids among them) in the variant's own history."""
    with sqlite3.connect(database) as db:
        return db.execute("SELECT count(*), count(DISTINCT id) FROM runs WHERE source = 'api'").fetchone()


def _cli(folder: Path, settings: Path, items: list[dict], device: str, optimizations: list[str], dtype: str | None,
         batch_size: int) -> tuple[dict, dict]:
    from benchmarks.cli_e2e import RUN_LINE
    source, out = folder / "input.jsonl", folder / "output.jsonl"
    with open(source, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
    command = [sys.executable, str(ROOT / "launcher.py"), "extract", "--model", "rexuninlu", "--input", str(source),
               "--output", str(out), "--device", device, "--batch-size", str(batch_size),
               "--optimizations", ",".join(optimizations) or "none"] + (["--dtype", dtype] if dtype else [])
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=_environ(settings), capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"the CLI failed: {done.stderr[-2000:]}")
    match = RUN_LINE.search(done.stdout + done.stderr)
    documents, seconds = int(match.group(1).replace(",", "")), float(match.group(2))
    answers = {}
    for line in open(out, encoding="utf-8"):
        got = json.loads(line)
        answers[got["id"]] = [got["output"]]
    row = {"documents": documents, "run_seconds": seconds, "docs_per_s": round(documents / seconds, 2),
           "process_wall_s": round(wall, 2), "process_docs_per_s": round(documents / wall, 2),
           "load_average": round(load, 1)}
    return row, answers


def _stack(device: str) -> tuple[list[str], str | None, str]:
    if device.startswith("cuda"):
        return list(FULL_STACK), "bf16", "full stack bf16"
    return [], None, "fp32 eager"


def _weights(args, device: str) -> str:
    from workstation import engine
    size = "full" if device.startswith("cuda") else "tiny"
    return args.weights or str(engine.family("rexuninlu").write_demo_weights(
        Path(tempfile.gettempdir()) / "iew-bench" / f"rexuninlu-{size}", size))


def api_load(args) -> dict:
    from workstation import engine
    device = engine.resolve_device(args.device)
    weights, batch_size = _weights(args, device), args.batch_sizes[0]
    optimizations, dtype, stack = _stack(device)
    items = [{"id": f"doc{i}", "text": f"{i}. {SENTENCES[(i + args.seed) % len(SENTENCES)]}", "schema": NER_SCHEMA}
             for i in range(args.docs)]
    bodies = _bodies(items, optimizations, dtype, batch_size)
    root = Path(tempfile.mkdtemp(prefix="iew-bench-api-"))
    queue = max(args.clients * 2, 64)
    rows, cli_rows, reference = [], [], None

    def cli_row(name: str) -> None:
        nonlocal reference
        folder = root / name.replace(" ", "-").replace("(", "").replace(")", "")
        folder.mkdir()
        settings = _settings_file(folder, weights, device, batch_size, _free_port(), 5.0, batch_size, queue)
        row, answers = _cli(folder, settings, items, device, optimizations, dtype, batch_size)
        reference = reference or answers
        cli_rows.append(row)
        rows.append({"variant": name, **row})
        print(rows[-1], flush=True)

    variants = [(f"API, {w} worker{'s' if w > 1 else ''}, micro-batched", w, 5.0, batch_size) for w in args.workers]
    variants.insert(0, ("API, 1 worker, one request per pass", 1, 0.0, 1))
    cli_row("CLI")
    for name, workers, wait_ms, per_pass in variants:
        folder = root / name.replace(" ", "-").replace(",", "")
        folder.mkdir()
        port = _free_port()
        settings = _settings_file(folder, weights, device, batch_size, port, wait_ms, per_pass, queue)
        server = _serve(settings, workers, port)
        load = os.getloadavg()[0]
        try:
            seconds, parts = _clients(f"http://127.0.0.1:{port}", bodies, args.clients, folder)
        finally:
            _stop(server)
        latencies = sorted(x for p in parts for x in p["latencies"])
        answers: dict[str, list] = {}
        for p in parts:
            for key, outputs in p["answers"].items():
                answers.setdefault(key, []).extend(outputs)
        shared = [x for p in parts for x in p["shared"]]
        recorded, distinct = _history_runs(folder / "runs.db")
        warm = WARMUP_REQUESTS * args.clients

        def pct(q: float) -> float:
            return round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 1) if latencies else 0.0
        rows.append({
            "variant": name, "workers": workers, "requests": len(bodies), "clients": args.clients,
            "requests_per_s": round(len(latencies) / seconds, 2), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "errors": sum(len(p["errors"]) for p in parts),
            "answered_once": sorted(answers) == sorted(i["id"] for i in items) and all(len(v) == 1 for v in answers.values()),
            # every timed request and every warm-up request is a run of its own in the history
            "runs_in_history": recorded, "runs_expected": len(bodies) + warm, "run_ids_distinct": distinct == recorded,
            "mean_shared_pass": round(sum(shared) / len(shared), 2) if shared else 0.0,
            "same_tuples_as_cli": f"{sum(k in answers and same_tuples(answers[k], v) for k, v in reference.items())}"
                                  f"/{len(reference)}",
            "load_average": round(load, 1)})
        print(rows[-1], flush=True)
    cli_row("CLI (again)")
    for row in rows:
        if "requests_per_s" in row:
            row["x_cli"] = [round(row["requests_per_s"] / c["docs_per_s"], 3) for c in cli_rows]
    env = {**environment(device), "stack": stack, "weights": str(weights), "documents": len(items),
           "clients": args.clients, "batch_size": batch_size, "cpus": os.cpu_count(),
           "threads": os.environ.get("OMP_NUM_THREADS", "torch's default"), "command": " ".join(sys.argv)}
    return {"env": env, "tables": [{"name": "CLI", "rows": [r for r in rows if "requests_per_s" not in r]},
                                   {"name": "API", "rows": [r for r in rows if "requests_per_s" in r]}]}


def _rss_mib(pid: int) -> float:
    import psutil
    process = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]) / 2**20


def api_memory(args) -> dict:
    from benchmarks import save as save_partial
    from workstation import engine
    device = engine.resolve_device(args.device)
    weights, batch_size = _weights(args, device), args.batch_sizes[0]
    optimizations, dtype, stack = _stack(device)
    workers = args.workers[0]
    items = [{"id": f"doc{i}", "text": f"{i}. {SENTENCES[i % len(SENTENCES)]}", "schema": NER_SCHEMA}
             for i in range(args.docs)]
    folder = Path(tempfile.mkdtemp(prefix="iew-bench-api-memory-"))
    port = _free_port()
    settings = _settings_file(folder, weights, device, batch_size, port, 5.0, batch_size, max(args.clients * 2, 64))
    server = _serve(settings, workers, port)
    samples = []

    def sample(seconds: float) -> None:
        runs, _ = _history_runs(folder / "runs.db")
        samples.append({"s": round(seconds, 1), "rss_MiB": round(_rss_mib(server.pid), 1), "runs": runs})
        if len(samples) % 12 == 1:
            print(samples[-1], flush=True)
            if args.out:                         # a run cut short still leaves its curve
                save_partial({"env": environment(device), "samples": samples}, args.out)
    try:
        seconds, parts = _clients(f"http://127.0.0.1:{port}", _bodies(items, optimizations, dtype, batch_size),
                                  args.clients, folder, keep_answers=False, during=sample)
        sample(seconds)
    finally:
        _stop(server)
    done = sum(len(p["latencies"]) for p in parts)
    tenth = max(1, len(samples) // 10)
    first, last = samples[:tenth], samples[-tenth:]
    row = {"requests": len(items), "answered": done, "errors": sum(len(p["errors"]) for p in parts),
           "workers": workers, "clients": args.clients, "seconds": round(seconds, 1),
           "requests_per_s": round(done / seconds, 2), "rss_after_warmup_MiB": samples[0]["rss_MiB"],
           "rss_peak_MiB": max(s["rss_MiB"] for s in samples), "rss_last_MiB": samples[-1]["rss_MiB"],
           "rss_first_tenth_mean_MiB": round(sum(s["rss_MiB"] for s in first) / len(first), 1),
           "rss_last_tenth_mean_MiB": round(sum(s["rss_MiB"] for s in last) / len(last), 1),
           "rss_by_tenth_MiB": [samples[min(len(samples) - 1, i * len(samples) // 10)]["rss_MiB"] for i in range(10)]
           + [samples[-1]["rss_MiB"]],
           "runs_in_history": samples[-1]["runs"]}
    env = {**environment(device), "stack": stack, "weights": str(weights), "batch_size": batch_size,
           "cpus": os.cpu_count(), "command": " ".join(sys.argv)}
    return {"env": env, "rows": [row], "samples": samples}


BENCHMARKS = {"api-load": api_load, "api-memory": api_memory}
