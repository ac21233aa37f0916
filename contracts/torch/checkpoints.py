"""Reading a checkpoint's tensors strictly: the part every model plugin's loader shares.

A missing, unexpected or mis-shaped tensor is an error that names it, so a checkpoint that belongs to
another configuration never loads half-initialised.
"""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Iterable, Sequence

import torch

from contracts.domain import WeightsError


def read_state_dict(weights: Path, files: Sequence[str]) -> dict[str, torch.Tensor]:
    """The tensors of the first of `files` present in the directory (.safetensors or a torch pickle)."""
    for name in files:
        path = weights / name
        if not path.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file
                return load_file(str(path))
            # Memory-mapped where the format allows (a zip archive, torch >= 1.6): the loader then reads each
            # tensor once, as it converts or moves it, instead of copying the whole file into memory first.
            return torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
        except Exception as e:       # noqa: BLE001 - truncated download, wrong format, pickle with code...
            raise WeightsError(f"{path} could not be read ({type(e).__name__}: {e}); the file is corrupt, "
                               "incomplete or not a plain state dict") from None
    raise WeightsError(f"{weights} has no weights: expected one of {', '.join(files)}")


def check_tensors(weights: Path, state: dict[str, torch.Tensor], expected: dict[str, tuple],
                  architecture: str, ignored: Iterable[str] = ()) -> None:
    """Raise WeightsError unless `state` has exactly the `expected` keys and shapes (less `ignored`)."""
    ignored = set(ignored)
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected and k not in ignored]
    if missing or unexpected:
        parts = [f"{label} keys: {', '.join(keys[:8])}{' …' if len(keys) > 8 else ''}"
                 for label, keys in (("missing", missing), ("unexpected", unexpected)) if keys]
        raise WeightsError(f"{weights}: the weights do not match the {architecture} in config.json; "
                           + "; ".join(parts))
    for k, shape in expected.items():
        if tuple(state[k].shape) != tuple(shape):
            raise WeightsError(f"{weights}: tensor {k} has shape {tuple(state[k].shape)}, "
                               f"config.json implies {tuple(shape)}")
