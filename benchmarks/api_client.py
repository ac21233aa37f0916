"""One HTTP client of `bench api-load` / `api-memory`, as a process of its own (it imports httpx alone, no torch).

    python3 benchmarks/api_client.py URL REQUESTS.jsonl OUT.json [--warmup N] [--no-answers]

Each line of REQUESTS.jsonl is one /v1/extract body. The client sends N warm-up requests (the first lines again,
not counted), prints "ready", waits for a line on its stdin, then sends every line in order, one request at a time,
and writes {started, ended (epoch seconds), latencies, errors, answers: {id: [output]}, shared, run_ids} to OUT.json (--no-answers: the answers
and run ids left out, for a long run).
"""
from __future__ import annotations

import json
import sys
import time

import httpx


def main(argv: list[str]) -> int:
    url, requests_path, out_path = argv[:3]
    warmup = int(argv[argv.index("--warmup") + 1]) if "--warmup" in argv else 0
    keep = "--no-answers" not in argv
    bodies = [json.loads(line) for line in open(requests_path, encoding="utf-8")]
    latencies, errors, answers, shared, run_ids = [], [], {}, [], []
    # X-IEW-Request: what workstation.api.client sends; the server wants it on uploads, not on /v1/extract.
    with httpx.Client(base_url=url, timeout=600.0, headers={"X-IEW-Request": "1"}) as http:
        for body in bodies[:warmup]:
            http.post("/v1/extract", json=body).raise_for_status()
        print("ready", flush=True)
        sys.stdin.readline()
        started = time.time()
        for body in bodies:
            start = time.perf_counter()
            try:
                response = http.post("/v1/extract", json=body)
            except httpx.HTTPError as e:
                errors.append(f"{type(e).__name__}: {e}")
                continue
            if response.status_code != 200:
                errors.append(f"{response.status_code}: {response.text[:200]}")
                continue
            latencies.append(time.perf_counter() - start)
            got = response.json()
            shared.append(got["shared_pass"])
            if keep:
                run_ids.append(got["run_id"])
                for line in got["results"]:
                    answers.setdefault(line["id"], []).append(line["output"])
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"started": started, "ended": time.time(), "latencies": latencies, "errors": errors, "answers": answers, "shared": shared,
                   "run_ids": run_ids}, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
