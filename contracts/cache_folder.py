"""The cache folder the launcher names (IEW_CACHE_DIR): what one process derived (a tokenizer's backend, Triton's
installation hash) kept for the next one to read instead of deriving it again. An entry is written whole or not at
all, so a process reading it meanwhile never sees half of one; a folder that cannot be written costs only the saving."""
from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Sequence


def entry(*parts: str) -> Path | None:
    """The path of an entry in the cache folder, or None where the launcher named none."""
    folder = os.environ.get("IEW_CACHE_DIR")
    return Path(folder).joinpath(*parts) if folder else None


def tokenizer_entry(model: str, weights: Path, files: Sequence[str], *salt) -> Path | None:
    """Where a model keeps the tokenizer transformers built from a checkpoint's `files`: keyed on those files' bytes,
    `salt`, and the transformers and tokenizers versions that built it. None where the launcher named no folder."""
    folder = entry("tokenizers")
    if folder is None:
        return None
    digest = hashlib.sha256(repr((*salt, metadata.version("transformers"), metadata.version("tokenizers"))).encode())
    for name in files:
        path = weights / name
        digest.update(name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    return folder / f"{model}-{digest.hexdigest()[:32]}.json"


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
