"""The slot pool's cache off the eager backend: each prompt kept once, however many beams read it.

A decode step reads every key and value it attends, and with beams copied into their own rows a
prompt is read num_beams times a step. At a full pool (64 items x 4 beams, 1,024 prompt and 64
generated columns, fp16) that is 25.5 GiB of K/V a step, three quarters of it copies; the cache is
as large, more than an RTX 4090 holds. Here the pool keeps

- `prompts`   [n_layer, 2, items, H, P, D]: each item's prompt, right-aligned to column P, once;
- `generated` [n_layer, 2, rows,  H, G, D]: each beam row's own tokens, column g = its token g,

and a step attends both as two matmuls meeting in one fp32 softmax: the item's beams ask its prompt
together ([items*H] batches of [beams, D] x [D, P]), each row asks its own tokens. The same example
needs 7.5 GiB of cache and of reads a step.

ALiBi is added relative to the query (slope * (key position - query position)), as the SDPA and
flash backends do; softmax is shift-invariant, so this is HF's absolute bias less a constant per
query. The arithmetic (fp16 products, fp32 softmax) is not HF's op for op, so the eager backend
keeps one row per beam (continuous.RowLayout), which equals `generate` bit for bit in fp32.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from plugins.seqgpt.cache import KVCache, allocate
from plugins.seqgpt.modeling import alibi_slopes

Keys = tuple[torch.Tensor, torch.Tensor]       # (prompt part [items, H, Pw, D], generated part [rows, H, Gw, D])


def attend(q: torch.Tensor, keys: Keys, values: Keys, bias: torch.Tensor, beams: int) -> torch.Tensor:
    """q [rows, H, 1, D] (rows item-major, `beams` per item); bias [items, H, 1, Pw + Gw] fp32 with the
    masks in it. Returns [rows, H, 1, D]."""
    (kp, kg), (vp, vg) = keys, values
    rows, heads, _, dim = q.shape
    items, prompt = rows // beams, kp.shape[2]
    # Scaled before the products, as HF's baddbmm scales inside its GEMM: fp16 scores then cannot overflow
    # where the scaled ones would not (and 1/8, SeqGPT's scale, is exact).
    q = q * (1.0 / math.sqrt(dim))
    by_item = q.view(items, beams, heads, dim).transpose(1, 2)                      # [items, H, beams, D]
    scores_p = torch.matmul(by_item, kp.transpose(-1, -2))                          # [items, H, beams, Pw]
    scores_g = torch.matmul(q, kg.transpose(-1, -2)).view(items, beams, heads, -1).transpose(1, 2)
    scores = torch.cat([scores_p, scores_g], dim=-1).float() + bias
    probs = F.softmax(scores, dim=-1).to(q.dtype)
    out_p = torch.matmul(probs[..., :prompt], vp).transpose(1, 2).reshape(rows, heads, 1, dim)
    probs_g = probs[..., prompt:].transpose(1, 2).reshape(rows, heads, 1, -1)
    return out_p + torch.matmul(probs_g, vg)


class StepCache:
    """One decode step over a window of the layout: `write` puts each row's new K/V at its own
    generated column and hands both parts to `attend` (the model's blocks pass them through)."""

    def __init__(self, prompts: torch.Tensor, generated: torch.Tensor, columns: torch.Tensor,
                 bias: torch.Tensor, beams: int):
        self.prompts, self.generated, self.columns = prompts, generated, columns
        self.bias, self.beams = bias, beams

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[Keys, Keys]:
        index = self.columns[:, None, None, None].expand(-1, k.shape[1], 1, k.shape[3])
        self.generated[layer, 0].scatter_(2, index, k)
        self.generated[layer, 1].scatter_(2, index, v)
        return (self.prompts[layer, 0], self.generated[layer, 0]), (self.prompts[layer, 1], self.generated[layer, 1])

    def attend(self, q, keys, values) -> torch.Tensor:
        return attend(q, keys, values, self.bias, self.beams)


class SharedPromptLayout:
    """The pool's K/V with each prompt once (module docstring). Same surface as continuous.RowLayout."""

    def __init__(self, network, items: int, beams: int, prompt_capacity: int, new_tokens: int):
        c, w = network.config, network.word_embeddings.weight
        self.beams, self.P = beams, prompt_capacity
        self.prompts = allocate(c.n_layer, items, c.n_head, prompt_capacity, c.head_dim, w.dtype, w.device)
        self.generated = allocate(c.n_layer, items * beams, c.n_head, new_tokens, c.head_dim, w.dtype, w.device)
        self.slopes = alibi_slopes(c.n_head, w.device)[None, :, None]               # [1, H, 1] fp32
        # Per prompt column: its token's position less the prompt's real length (so -length .. -1), and
        # whether it is a real token. A query at generated column t sits at position length + t.
        self.offset = torch.zeros((items, prompt_capacity), dtype=torch.float32, device=w.device)
        self.real = torch.zeros((items, prompt_capacity), dtype=torch.bool, device=w.device)

    def admit(self, items: torch.Tensor, prefill: KVCache, mask: torch.Tensor) -> None:
        """Place a prefill's K/V ([n_layer, 2, n, H, length, D]) and its mask [n, length] for `items`."""
        length = mask.shape[1]
        self.prompts[:, :, items, :, self.P - length:self.P] = prefill.buffer
        positions = mask.cumsum(dim=1) - 1
        offset = torch.zeros((len(items), self.P), dtype=torch.float32, device=mask.device)
        offset[:, self.P - length:] = (positions - mask.sum(dim=1, keepdim=True)).float()
        real = torch.zeros((len(items), self.P), dtype=torch.bool, device=mask.device)
        real[:, self.P - length:] = mask.bool()
        self.offset[items], self.real[items] = offset, real

    def logits(self, network, search, start: int, end: int, attention: str) -> torch.Tensor:
        """[rows, V]: one step for every row over prompt columns [start, P) and generated [0, end - P).
        `attention` is unused: this layout has its own (attend above)."""
        span = end - self.P
        if search.reorder is not None:            # a row takes its source beam's tokens; the prompt is shared
            KVCache(self.generated).reorder(search.reorder, 0, span)
        at = (search.step - 1).clamp(min=0)                                          # [items] newest column
        # A done slot waiting to be refilled may sit beyond a window sized for its neighbours: it writes
        # at the window's last column, into its own row, which nobody reads again before admit().
        columns = at.clamp(max=span - 1)[:, None].expand(-1, self.beams).reshape(-1)         # per row
        generated = torch.arange(span, device=at.device)[None, :] - at[:, None]      # key - query, [items, Gw]
        distance = torch.cat([self.offset[:, start:] - at[:, None], generated.float()], dim=1)
        visible = torch.cat([self.real[:, start:], generated <= 0], dim=1)
        bias = (self.slopes * distance[:, None, :]).masked_fill(~visible[:, None, :], torch.finfo(torch.float32).min / 2)
        cache = StepCache(self.prompts[:, :, :, :, start:], self.generated[:, :, :, :, :span], columns,
                          bias[:, :, None, :], self.beams)
        x = network.decode(search.next_tokens[:, None], cache, cache.attend)
        return network.logits(x)[:, -1]

    def clear(self) -> None:
        self.real.zero_()
        self.offset.zero_()
