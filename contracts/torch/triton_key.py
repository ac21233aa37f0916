"""Triton's installation hash, kept on disk.

Before Triton looks up a cached kernel it hashes its own installation (every compiler source file and the 400 MB
libtriton), once per process: 0.46 s of a warm `extract`'s warm-up on the H100 (docs/benchmarks.md, "Tried and left
out"). The hash changes only when the installation does, so it is kept in the cache folder the launcher names
(IEW_CACHE_DIR), keyed on the installation's file names, sizes and modification times, and handed to Triton instead
of being computed again. Any change to those files computes it afresh."""
from __future__ import annotations

import functools
import hashlib
import os
import sys
import threading
from pathlib import Path

from contracts import cache_folder

FILE = "triton-key.json"


def fingerprint(package: Path) -> str:
    """The names, sizes and modification times of the package's code (.py and shared libraries)."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(package):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".py", ".so", ".pyd", ".dll")):
                stat = os.stat(os.path.join(root, name))
                h.update(f"{os.path.relpath(os.path.join(root, name), package)}\0{stat.st_size}\0{stat.st_mtime_ns}\n"
                         .encode())
    return h.hexdigest()


def remember(cache_module, kept_at: Path) -> bool:
    """Make `cache_module.triton_key` (triton.runtime.cache's) read the key kept at `kept_at`, computing and keeping
    it when it is missing or the installation changed. False where there is nothing to do."""
    compute = getattr(cache_module, "triton_key", None)
    if compute is None or getattr(compute, "remembered", False):
        return False

    lock = threading.Lock()             # the background thread and a first compile may ask at once: one computes

    def triton_key() -> str:
        with lock:
            return known()

    @functools.lru_cache(maxsize=None)
    def known() -> str:
        stamp = fingerprint(Path(cache_module.__file__).resolve().parents[1])
        kept = cache_folder.read_json(kept_at)
        if isinstance(kept, dict) and kept.get("fingerprint") == stamp and isinstance(kept.get("key"), str):
            return kept["key"]
        key = compute()
        cache_folder.keep_json(kept_at, {"fingerprint": stamp, "key": key})
        return key

    triton_key.remembered, triton_key.__wrapped__ = True, compute
    cache_module.triton_key = triton_key
    for name in ("triton.runtime.autotuner",):      # modules that took the function by name at import
        module = sys.modules.get(name)
        if getattr(module, "triton_key", None) is compute:
            module.triton_key = triton_key
    return True


_remembering = threading.Lock()          # the background thread and a kernel module's import may ask at once


def remember_triton_key(background: bool = False) -> threading.Thread | None:
    """For the Triton kernels' modules, after `import triton`: where the launcher named a cache folder. With
    `background`, for a model loading onto a GPU: Triton is imported and the key found (or computed and kept) in a
    thread while the model loads, not at its first compile. On a machine that never kept it, the hash (0.46 s on
    the H100) was part of the first run's warm-up; hashlib lets go of the interpreter lock while it hashes.
    Returns that thread."""
    kept_at = cache_folder.entry(FILE)
    if kept_at is None:
        return None

    def work():
        try:
            import triton.runtime.cache as cache_module
        except ImportError:
            return
        with _remembering:
            remember(cache_module, kept_at)
        if background:
            cache_module.triton_key()
    if not background:
        return work()
    thread = threading.Thread(target=work, name="triton-key", daemon=True)
    thread.start()
    return thread
