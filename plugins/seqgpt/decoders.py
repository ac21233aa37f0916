"""Decoders: run the network for generation, over a KV cache they own.

A decoder does two things the search asks for: `prefill` (the left-padded prompts, once per prompt
even with beams) and `step` (one new token per row, after an optional beam reorder). Both return
fp32 logits [rows, V], rows item-major (item i's beams are rows i*k .. i*k+k-1).

- `PlainDecoder`: the cache and the attention mask grow by a column per step, the way the reference
  loop runs; any attention backend, no capture.
- `StaticDecoder`: every shape fixed for CUDA-graph capture. Rows are padded to a bucket, the prompt
  is right-aligned to column `prompt_capacity` (more left padding, which ALiBi ignores because its
  positions count real tokens only), generated tokens fill [P, P + new_capacity), and a step attends
  a fixed span with a key mask. It runs the same arithmetic as the plain decoder, only over more
  masked keys, so it picks the same tokens; without capture it runs on the CPU, where tests pin it.
"""
from __future__ import annotations

import torch

from plugins.seqgpt.cache import KVCache, StaticKVCache


def _prefill(network, batch, cache: KVCache, beams: int, start: int, attention: str) -> torch.Tensor:
    """The prompts' forward pass, written into columns [start, start + L) of each item's first row of
    `cache` and copied to its other beam rows; logits of each row's last position [n * beams, V] fp32."""
    n, length = batch.input_ids.shape
    end = start + length
    window = cache.window(slice(0, n * beams, beams), start, end)
    logits = network(batch.input_ids, batch.attention_mask, window, attention)[:, -1].float()
    cache.share_prompt(beams, start, end)
    return logits.repeat_interleave(beams, dim=0)


class PlainDecoder:
    def __init__(self, network, attention: str, new_tokens: int):
        self.network, self.attention, self.new_tokens = network, attention, new_tokens

    def prefill(self, batch, beams: int) -> torch.Tensor:
        n, length = batch.input_ids.shape
        self.prompt_length = length
        self.cache = self.network.new_cache(n * beams, length + self.new_tokens)
        logits = _prefill(self.network, batch, self.cache, beams, 0, self.attention)
        self.cache.length = length
        self.mask = batch.attention_mask.repeat_interleave(beams, dim=0)
        return logits

    def step(self, tokens: torch.Tensor, reorder: torch.Tensor | None, span: int) -> torch.Tensor:
        if reorder is not None:               # beams of an item share the prompt: move generated columns only
            self.cache.reorder(reorder, self.prompt_length, self.cache.length)
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(tokens), 1))], dim=1)
        return self.network(tokens[:, None], self.mask, self.cache, self.attention)[:, -1].float()


class StaticDecoder:
    def __init__(self, network, rows: int, prompt_capacity: int, new_capacity: int, attention: str):
        self.network, self.attention = network, attention
        self.rows, self.prompt_capacity = rows, prompt_capacity
        capacity = prompt_capacity + new_capacity
        device = network.word_embeddings.weight.device
        self.cache = network.new_cache(rows, capacity)
        self.key_mask = torch.zeros((rows, capacity), dtype=torch.long, device=device)   # 1 = a key to attend
        self.column = torch.full((1,), prompt_capacity, dtype=torch.long, device=device)  # where the next K/V go

    def clear(self) -> None:
        """A valid empty state (for warming up and capturing graphs)."""
        self.key_mask.zero_()
        self.column.fill_(self.prompt_capacity)

    def prefill(self, batch, beams: int) -> torch.Tensor:
        n, length = batch.input_ids.shape
        p = self.prompt_capacity
        if length > p or n * beams > self.rows:
            raise ValueError(f"a batch of {n} x {length} tokens does not fit a static decoder of "
                             f"{self.rows} rows and {p} prompt columns")
        start = p - length
        self.clear()
        self.key_mask[:n * beams, start:p] = batch.attention_mask.repeat_interleave(beams, dim=0)
        logits = _prefill(self.network, batch, self.cache, beams, start, self.attention)
        # Rows past the batch (bucket padding) keep stale but finite K/V and attend only their own
        # generated tokens; the search ignores them.
        out = logits.new_zeros((self.rows, logits.shape[-1]))
        out[:n * beams] = logits
        return out

    def step(self, tokens: torch.Tensor, reorder: torch.Tensor | None, span: int) -> torch.Tensor:
        """One token per row; attends columns [0, P + span), so span must cover the tokens so far."""
        end = self.prompt_capacity + span
        if reorder is not None:
            self.cache.reorder(reorder, self.prompt_capacity, end)
        self.key_mask.index_fill_(1, self.column, 1)
        cache = StaticKVCache(self.cache.buffer, self.column, end)
        logits = self.network(tokens[:, None], self.key_mask[:, :end], cache, self.attention)[:, -1].float()
        self.column += 1
        return logits
