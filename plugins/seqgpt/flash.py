"""The "flash" attention backend: FlashAttention-2 kernels with ALiBi, where flash_attn imports on CUDA.

- Prefill: `flash_attn_varlen_func` over the real tokens only. flash-attn has no padding mask, so
  the left pads are removed: the real tokens of all rows are packed one after another and
  `cu_seqlens` (int32, [B + 1], the running sum of each row's real-token count) tells the kernel
  where each row starts. The outputs are scattered back into the padded layout (pads get zeros,
  which no real token ever reads: pad keys are masked in every later step).
- Decoding: `flash_attn_with_kvcache` reads our cache in place ([B, kv, H, D] is a transposed view
  of [B, H, kv, D] with a contiguous last dimension). Each row's real keys are one contiguous run of
  columns, pads before it and (in a static cache) not-yet-written columns after it, so
  `cache_leftpad` = the first real column and `cache_seqlens` = one past the last (both physical
  column indices: the kernel starts the row at leftpad and counts seqlens - leftpad keys).

Why ALiBi is exact here. HF adds slope_h * pos_j to the score of query i and key j (the key's
position among the row's real tokens). flash-attn adds -slope_h * |i + seqlen_k - seqlen_q - j| with
i, j counted from the start of the row's real tokens. With causal masking j <= i + seqlen_k -
seqlen_q, so this equals slope_h * (j - pos_i) = slope_h * pos_j - slope_h * pos_i: HF's bias minus
a constant per query row, and softmax(x - c) = softmax(x). (pos_i = i + seqlen_k - seqlen_q is the
query's own position: the query is the newest token in both prefill, seqlen_q = seqlen_k, and
decoding, seqlen_q = 1.) This holds only if i and j count real tokens: with the pads left in, the
distances would still be right but the kernel would attend to the pad keys, since it has no key
mask. Hence varlen for prefill and cache_leftpad for decoding. In fp16 the bias is computed in fp32
from the relative distance, so it is more accurate than HF's fp16 absolute slope * pos at long
positions; tokens can differ from the fp16 eager path only where that rounding decides a near-tie.

flash-attn kernels take fp16/bf16 only; the model falls back to SDPA at fp32 (family.py).
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from contracts.names import Kernel
from plugins.seqgpt.modeling import AttentionInputs, register_attention_backend

NAME = Kernel.FLASH


@dataclass
class _Prefill:
    index: torch.Tensor          # [total] positions of the real tokens in the flattened [B * L]
    cu_seqlens: torch.Tensor     # [B + 1] int32
    max_seqlen: int
    slopes: torch.Tensor         # [H] fp32


@dataclass
class _Decode:
    leftpad: torch.Tensor        # [B] int32, first real column
    seqlens: torch.Tensor        # [B] int32, one past the last real column
    slopes: torch.Tensor


class FlashAttention:
    name = NAME

    def __init__(self, kernels):
        self.kernels = kernels            # the flash_attn module, or anything with its two functions

    def prepare(self, inputs: AttentionInputs, dtype: torch.dtype):
        q_len, kv = inputs.allowed.shape[2:]
        real = inputs.allowed[:, 0, -1, :]                   # [B, kv]: the newest query may see every real key
        slopes = inputs.slopes.float().contiguous()
        if q_len == 1:
            as_int = real.to(torch.int32)
            leftpad = torch.argmax(as_int, dim=1)
            seqlens = kv - torch.argmax(as_int.flip(1), dim=1)
            return _Decode(leftpad.to(torch.int32), seqlens.to(torch.int32), slopes)
        if q_len != kv:
            raise NotImplementedError("the flash backend runs a prefill from an empty cache or one token per "
                                      f"step; got {q_len} new tokens over {kv - q_len} cached ones")
        lengths = real.sum(dim=1)
        cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
        index = real.reshape(-1).nonzero().squeeze(1)
        return _Prefill(index, cu_seqlens, int(lengths.max()), slopes)

    def attend(self, q, k, v, prepared):
        b, h, q_len, d = q.shape
        if isinstance(prepared, _Decode):
            out = self.kernels.flash_attn_with_kvcache(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), cache_seqlens=prepared.seqlens,
                cache_leftpad=prepared.leftpad, causal=True, alibi_slopes=prepared.slopes)
            return out.transpose(1, 2)                                             # [B, H, 1, D]

        def packed(x):                                                             # [total, H, D]
            return x.transpose(1, 2).reshape(b * q_len, h, d).index_select(0, prepared.index)
        out = self.kernels.flash_attn_varlen_func(
            packed(q), packed(k), packed(v), prepared.cu_seqlens, prepared.cu_seqlens,
            prepared.max_seqlen, prepared.max_seqlen, causal=True, alibi_slopes=prepared.slopes)
        full = q.new_zeros((b * q_len, h, d)).index_copy_(0, prepared.index, out)
        return full.view(b, q_len, h, d).transpose(1, 2)


@functools.lru_cache(maxsize=None)
def unavailable() -> str | None:
    """Why the flash backend cannot run here, or None once it is registered."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    try:
        import flash_attn
    except Exception as e:                          # noqa: BLE001 - a broken install falls back the same way
        return f"flash-attn is not installed ({type(e).__name__}: {e})"
    parameters = inspect.signature(flash_attn.flash_attn_with_kvcache).parameters
    if not {"cache_leftpad", "alibi_slopes"} <= set(parameters):
        return f"flash-attn {getattr(flash_attn, '__version__', '?')} lacks cache_leftpad (needs 2.6 or later)"
    register_attention_backend(FlashAttention(flash_attn))
    return None
