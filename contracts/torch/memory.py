"""Out of GPU memory: recognising it, and backing off by halving a batch. Nothing is ever dropped."""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def run_with_backoff(items: Sequence[T], forward: Callable[[Sequence[T]], list[R]],
                     on_backoff: Callable[[int], None] | None = None) -> list[R]:
    """forward(items) -> one output per item; on CUDA OOM split the batch in halves and retry each."""
    try:
        return forward(items)
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        if not is_out_of_memory(e) or len(items) == 1:
            raise
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = (len(items) + 1) // 2
    if on_backoff:
        on_backoff(half)
    return (run_with_backoff(items[:half], forward, on_backoff)
            + run_with_backoff(items[half:], forward, on_backoff))
