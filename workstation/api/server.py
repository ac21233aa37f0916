"""`launcher.py serve`: the API under uvicorn, on loopback unless told otherwise (and then only with a token).

With `[api] workers` (or --workers) above 1, uvicorn runs that many server processes on one port. Each has its own
models, lanes and recorder, and a share of the CPU's cores; they share the history (SQLite in WAL mode: one writer
at a time, readers never wait) and the job queue (claims are atomic in the database, as between the UI and the
API). What one process keeps in memory is its own: a Label Studio project connected by /ls/setup is known to the
process that answered it, so with several workers send `label_config` with each /ls/predict.
"""
from __future__ import annotations

import ipaddress
import os
import pickle
import sys
import tempfile
from pathlib import Path

from workstation.settings import Settings


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False                     # a host name: it may resolve to anything


MIN_TOKEN_CHARS = 16            # off loopback anyone on the network may guess; spaces are no secret


def token_strength(token: str) -> int:
    """The characters of a token that are not white space."""
    return len("".join(token.split()))


def check_exposure(host: str, token: str) -> None:
    """Refuse to listen beyond this machine without a bearer token of real strength."""
    if is_loopback(host):
        return
    if not token:
        raise SystemExit(f"refusing to serve on {host}: off loopback the API needs a bearer token; set [api] token "
                         "in settings.toml or IEW_API_TOKEN (or serve on 127.0.0.1)")
    if token_strength(token) < MIN_TOKEN_CHARS:
        raise SystemExit(f"refusing to serve on {host}: the API token has {token_strength(token)} characters besides "
                         f"spaces; off loopback it needs at least {MIN_TOKEN_CHARS} (make one with python3 -c "
                         "'import secrets; print(secrets.token_urlsafe(24))' and set [api] token or IEW_API_TOKEN)")


def serve(settings: Settings, host: str | None = None, port: int | None = None, workers: int | None = None) -> int:
    import uvicorn

    host, port = host or settings.api.host, port or settings.api.port
    workers = settings.api.workers if workers is None else workers
    if workers < 1:
        raise SystemExit(f"refusing to serve with {workers} worker processes: --workers must be 1 or more")
    check_exposure(host, settings.api.token)
    print(f"IE Workstation API on http://{host}:{port} (docs: /docs; Label Studio ML backend: /ls)")
    options = {"host": host, "port": port, "log_level": "info", "timeout_graceful_shutdown": 5}
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if workers == 1:
        from workstation.api.app import create_app
        uvicorn.run(create_app(settings), **options)
        return 0
    # Several processes: uvicorn starts each from an import string, so the settings travel in a private file.
    with tempfile.TemporaryDirectory(prefix="iew-serve-") as folder:
        handed = Path(folder) / "settings.pickle"
        handed.write_bytes(pickle.dumps(settings))
        os.environ[SETTINGS_ENV], os.environ[THREADS_ENV] = str(handed), str(threads_per_worker(workers))
        print(f"{workers} worker processes, {threads_per_worker(workers)} CPU thread(s) each")
        uvicorn.run("workstation.api.server:worker_app", factory=True, workers=workers, **options)
    return 0


# How long a thread may hold the interpreter lock while another waits for it (Python's default: 5 ms). A server
# process has an event loop doing short bits of I/O and a lane thread running the model's Python; at 5 ms the loop
# waited up to that long after every socket read and write (a convoy), which capped a CPU server at about one
# request per few switch intervals. The gain at 0.5 ms is measured in docs/benchmarks.md (API section).
SWITCH_INTERVAL_S = 0.0005
SETTINGS_ENV = "IEW_API_WORKER_SETTINGS"     # the pickled Settings a worker process serves
THREADS_ENV = "IEW_API_WORKER_THREADS"       # its share of the CPU's cores


def threads_per_worker(workers: int) -> int:
    """The cores this process may use, split evenly: PyTorch's threads in several processes each sized for the
    whole machine oversubscribe it, and on a busy CPU that cost the tiny model more than ten times its speed."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // workers)


def worker_app():
    """One worker process of `serve --workers N`: its own models, lanes and recorder over the shared history."""
    import torch

    from workstation.api.app import create_app
    torch.set_num_threads(int(os.environ[THREADS_ENV]))
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return create_app(pickle.loads(Path(os.environ[SETTINGS_ENV]).read_bytes()))
