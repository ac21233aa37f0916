"""Triton's installation hash, kept on disk.

Before Triton looks up a cached kernel it hashes its own installation (every compiler source file and the 400 MB
libtriton), once per process: 0.46 s of a warm `extract`'s warm-up on the H100 (docs/benchmarks.md, "Tried and left
out"). The hash changes only when the installation does, so it is kept in the cache folder the launcher names
(IEW_CACHE_DIR), keyed on the installation's file names, sizes and modification times, and handed to Triton instead
of being computed again. Any change to those files computes it afresh."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path

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


def remember(cache_module, folder: str | os.PathLike) -> bool:
    """Make `cache_module.triton_key` (triton.runtime.cache's) read the key kept in `folder`, computing and keeping
    it when it is missing or the installation changed. False where there is nothing to do."""
    compute = getattr(cache_module, "triton_key", None)
    if compute is None or getattr(compute, "remembered", False):
        return False
    path = Path(folder) / FILE

    @functools.lru_cache(maxsize=None)
    def triton_key() -> str:
        stamp = fingerprint(Path(cache_module.__file__).resolve().parents[1])
        try:
            saved = json.loads(path.read_text("utf-8"))
            if saved.get("fingerprint") == stamp and isinstance(saved.get("key"), str):
                return saved["key"]
        except (OSError, ValueError, AttributeError):
            pass                                    # none kept yet, or a broken file: computed again below
        key = compute()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{FILE}.{os.getpid()}")
            partial.write_text(json.dumps({"fingerprint": stamp, "key": key}), "utf-8")
            os.replace(partial, path)               # whole or absent, even with processes starting side by side
        except OSError:
            pass                                    # a read-only folder: Triton's own key, as without this
        return key

    triton_key.remembered = True
    cache_module.triton_key = triton_key
    for name in ("triton.runtime.autotuner",):      # modules that took the function by name at import
        module = sys.modules.get(name)
        if getattr(module, "triton_key", None) is compute:
            module.triton_key = triton_key
    return True


def remember_triton_key() -> None:
    """For the Triton kernels' modules, after `import triton`: where the launcher named a cache folder."""
    folder = os.environ.get("IEW_CACHE_DIR")
    if not folder:
        return
    try:
        import triton.runtime.cache as cache_module
    except ImportError:
        return
    remember(cache_module, folder)
