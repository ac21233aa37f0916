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

from plugins.seqgpt.cache import KVCache, StaticKVCache, allocate


def _allocate(network, rows: int, capacity: int) -> torch.Tensor:
    c, p = network.config, network.word_embeddings.weight
    return allocate(c.n_layer, rows, c.n_head, capacity, c.head_dim, p.dtype, p.device)


def _prefill(network, batch, cache: KVCache, attention: str) -> torch.Tensor:
    """The prompts' forward pass through `cache`; logits of each prompt's last position [n, V] fp32."""
    return network(batch.input_ids, batch.attention_mask, cache, attention)[:, -1].float()


class PlainDecoder:
    def __init__(self, network, attention: str, new_tokens: int):
        self.network, self.attention, self.new_tokens = network, attention, new_tokens

    def prefill(self, batch, beams: int) -> torch.Tensor:
        n, length = batch.input_ids.shape
        self.prompt_length = length
        self.cache = KVCache(_allocate(self.network, n * beams, length + self.new_tokens))
        logits = _prefill(self.network, batch, self.cache.window(slice(None, None, beams), 0, length),
                          self.attention)
        self.cache.length = length
        self.cache.share_prompt(beams, 0, length)
        self.mask = batch.attention_mask.repeat_interleave(beams, dim=0)
        return logits.repeat_interleave(beams, dim=0)

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
        self.buffer = _allocate(network, rows, capacity)
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
        cache = KVCache(self.buffer)
        logits = _prefill(self.network, batch, cache.window(slice(0, n * beams, beams), start, p), self.attention)
        cache.share_prompt(beams, start, p)
        # Rows past the batch (bucket padding) keep stale but finite K/V and attend only their own
        # generated tokens; the search ignores them.
        out = logits.new_zeros((self.rows, logits.shape[-1]))
        out[:n * beams] = logits.repeat_interleave(beams, dim=0)
        return out

    def step(self, tokens: torch.Tensor, reorder: torch.Tensor | None, span: int) -> torch.Tensor:
        """One token per row; attends columns [0, P + span), so span must cover the tokens so far."""
        end = self.prompt_capacity + span
        if reorder is not None:
            KVCache(self.buffer).reorder(reorder, self.prompt_capacity, end)
        self.key_mask.index_fill_(1, self.column, 1)
        cache = StaticKVCache(self.buffer, self.column, end)
        logits = self.network(tokens[:, None], self.key_mask[:, :end], cache, self.attention)[:, -1].float()
        self.column += 1
        return logits
