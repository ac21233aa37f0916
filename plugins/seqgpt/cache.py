"""KV caches for decoding: one buffer per generation, written in place, never copied whole.

Layout: keys and values of every layer in one buffer [n_layer, 2, B, H, capacity, D], so a beam
reorder moves K and V of a layer with one gather. Rows are item-major (item i's beams are rows
i*k .. i*k+k-1) and every row is left-padded: pads, then the prompt, then generated tokens, each
token at the same column in every row.

Two ways to address it:
- `KVCache`: the plain path. Columns [0, length) are filled; a forward writes the next columns and
  attends over [0, length + q). Shapes change every step, which is fine outside CUDA graphs.
- `StaticKVCache`: the graph path. The next token goes to the column held in a device tensor, and
  attention always reads a fixed span [0, end) with a key mask, so one captured graph serves many
  steps.

Beams of one item share their prompt, so the prompt is prefilled once into the item's first row
and copied to the other beam rows (`share_prompt`), and a beam reorder only has to move the
generated columns (`reorder`), one layer at a time: its scratch is a layer's generated region,
never a second cache.
"""
from __future__ import annotations

import torch


def allocate(n_layer: int, batch: int, n_head: int, capacity: int, head_dim: int, dtype, device) -> torch.Tensor:
    # Zeros rather than empty: a masked key still enters q·k and p·v, and uninitialised memory
    # could hold NaN, which survives a zero attention weight (0 * NaN = NaN).
    return torch.zeros((n_layer, 2, batch, n_head, capacity, head_dim), dtype=dtype, device=device)


class KVCache:
    """Columns [0, length) of `buffer` are filled; `write` appends at `length`."""

    def __init__(self, buffer: torch.Tensor, length: int = 0):
        self.buffer = buffer
        self.keys, self.values = buffer[:, 0], buffer[:, 1]          # [n_layer, B, H, capacity, D] views
        self.length = length

    @property
    def capacity(self) -> int:
        return self.buffer.shape[4]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens' k, v [B, H, q, D]; return everything so far [B, H, length + q, D]."""
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache holds {self.capacity} tokens, {end} were asked for")
        self.keys[layer, :, :, self.length:end] = k
        self.values[layer, :, :, self.length:end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, n: int) -> None:
        self.length += n

    def window(self, rows: slice, start: int, end: int) -> "KVCache":
        """An empty cache over rows `rows` and columns [start, end) of this buffer, sharing its storage:
        a prefill writes through it straight into place (the first beam of each item, right-aligned)."""
        return KVCache(self.buffer[:, :, rows, :, start:end])

    def share_prompt(self, beams: int, start: int, end: int) -> None:
        """Copy columns [start, end) of each item's first row to its other beam rows, in place."""
        if beams == 1:
            return
        n_layer, _, rows, heads, capacity, dim = self.buffer.shape
        grouped = self.buffer.view(n_layer, 2, rows // beams, beams, heads, capacity, dim)
        grouped[:, :, :, 1:, :, start:end] = grouped[:, :, :, :1, :, start:end]

    def reorder(self, rows: torch.Tensor, start: int, end: int) -> None:
        """Row r takes row rows[r]'s columns [start, end) (beam reordering), in place, layer by layer."""
        for layer in range(self.buffer.shape[0]):
            region = self.buffer[layer, :, :, :, start:end]                      # [2, B, H, n, D]
            region.copy_(region.index_select(1, rows))


class StaticKVCache(KVCache):
    """Writes the new token at the device-side column `column` ([1] long) and attends over the fixed
    span [0, end): no Python-side length, so the step can be captured and replayed."""

    def __init__(self, buffer: torch.Tensor, column: torch.Tensor, end: int):
        super().__init__(buffer)
        self.column, self.end = column, end

    def write(self, layer, k, v):
        if k.shape[2] != 1:
            raise RuntimeError("the static cache takes one token per step")
        self.keys[layer].index_copy_(2, self.column, k)
        self.values[layer].index_copy_(2, self.column, v)
        return self.keys[layer, :, :, :self.end], self.values[layer, :, :, :self.end]

    def advance(self, n: int) -> None:
        pass                                  # the decoder moves `column` on the device
