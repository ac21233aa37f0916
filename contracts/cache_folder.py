"""The cache folder the launcher names (IEW_CACHE_DIR): what one process derived (a tokenizer's backend, Triton's
installation hash) kept for the next one to read instead of deriving it again. An entry is written whole or not at
all, so a process reading it meanwhile never sees half of one; a folder that cannot be written costs only the saving."""
from __future__ import annotations

import json
import os
from pathlib import Path


def entry(*parts: str) -> Path | None:
    """The path of an entry in the cache folder, or None where the launcher named none."""
    folder = os.environ.get("IEW_CACHE_DIR")
    return Path(folder).joinpath(*parts) if folder else None


def read_json(path: Path):
    """The entry's JSON, or None where it is missing or unreadable (then it is derived and kept again)."""
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def keep_json(path: Path, value) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.part")
        partial.write_text(json.dumps(value), "utf-8")
        os.replace(partial, path)
    except OSError:
        pass                            # a read-only folder: the next process derives it too
