"""Residual add and LayerNorm in one pass (Triton), for RexUniNLU's fused-kernel path on CUDA; and the conv
layer's taps, gathered in one pass.

Each DeBERTa block ends in LayerNorm(dense(x) + residual). PyTorch runs the add and the norm as two
kernels, and its LayerNorm kernel moved a [64·512, 768] bf16 tensor at a fraction of the GPU's bandwidth
(the profile is in docs/performance.md). Here one
program normalises one row: it reads both inputs once and writes the output once.

The arithmetic follows PyTorch's: the sum is rounded to the input dtype first (as the separate add
does), then mean, biased variance, (s − mean)·rsqrt(var + eps)·weight + bias in fp32, rounded once. With
`keep` (the conv layer's valid tokens), x is zeroed on dropped rows before the add and the output after the norm,
as ConvLayer's masked_fill and multiply by the mask do: the same bits, two passes fewer.
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl

    from contracts.torch.triton_ahead import launch
    from contracts.torch.triton_key import remember_triton_key
    remember_triton_key()            # Triton's installation hash, from the cache folder after the first process
except ImportError:                  # CPU-only installs: the kernel is simply not offered
    triton = None


if triton is not None:
    @triton.jit
    def _add_norm_fwd(X, R, W, B, KEEP, Y, stride_x, stride_r, stride_y, n_cols, eps, BLOCK: tl.constexpr,
                      HAS_KEEP: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        ok = cols < n_cols
        x = tl.load(X + row * stride_x + cols, mask=ok, other=0.0)
        r = tl.load(R + row * stride_r + cols, mask=ok, other=0.0)
        if HAS_KEEP:
            kept = tl.load(KEEP + row) != 0
            x = tl.where(kept, x, 0.0).to(r.dtype)
        s = (x + r).to(tl.float32)
        mean = tl.sum(s, 0) / n_cols
        centred = tl.where(ok, s - mean, 0.0)
        var = tl.sum(centred * centred, 0) / n_cols
        w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
        y = (centred * (1.0 / tl.sqrt(var + eps)) * w + b).to(Y.dtype.element_ty)
        if HAS_KEEP:
            y = tl.where(kept, y, 0.0).to(Y.dtype.element_ty)
        tl.store(Y + row * stride_y + cols, y, mask=ok)

    @triton.jit
    def _taps_fwd(E, SEG, T, L, stride_eb, stride_el, stride_sb, stride_tb, stride_tl, D: tl.constexpr,
                  K: tl.constexpr, HALF: tl.constexpr, BLOCK: tl.constexpr, HAS_SEG: tl.constexpr):
        row = tl.program_id(0)
        b, t = row // L, row % L
        cols = tl.arange(0, BLOCK)
        ok = cols < D
        if HAS_SEG:
            own = tl.load(SEG + b * stride_sb + t)
        for i in tl.static_range(K):
            src = t + i - HALF
            inside = (src >= 0) & (src < L)
            if HAS_SEG:
                inside = inside & (tl.load(SEG + b * stride_sb + src, mask=inside, other=-2) == own)
            tap = tl.load(E + b * stride_eb + src * stride_el + cols, mask=ok & inside, other=0.0)
            tl.store(T + b * stride_tb + t * stride_tl + i * D + cols, tap, mask=ok)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, norm: torch.nn.LayerNorm,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """norm(x + residual) over the last dim; x and residual of one shape and dtype. keep (bool, x's shape
    without the last dim): norm(x·keep + residual)·keep."""
    d = x.shape[-1]
    rows_x, rows_r = x.reshape(-1, d), residual.reshape(-1, d)
    assert rows_x.stride(-1) == rows_r.stride(-1) == 1 and x.shape == residual.shape
    out = torch.empty_like(rows_x)
    block = triton.next_power_of_2(d)
    kept = out if keep is None else keep.reshape(-1).contiguous()
    launch(_add_norm_fwd, (rows_x.shape[0],), rows_x, rows_r, norm.weight, norm.bias, kept, out,
           rows_x.stride(0), rows_r.stride(0), out.stride(0), d, norm.eps,
           BLOCK=block, HAS_KEEP=keep is not None, num_warps=4 if block <= 1024 else 8)
    return out.view(x.shape)


def conv_taps(x: torch.Tensor, kernel: int, segments: torch.Tensor | None = None) -> torch.Tensor:
    """x [B,L,D] -> [B,L,kernel·D]: token t's taps x[t−half], …, x[t+kernel−1−half] side by side, zero past
    the row's ends and, with segments [B,L], where the neighbour is in another segment (ConvLayer's rule).
    One pass that reads x and writes the taps, where padding x, a strided view and a masked copy took three."""
    B, L, D = x.shape
    assert x.stride(-1) == 1
    taps = torch.empty(B, L, kernel * D, dtype=x.dtype, device=x.device)
    seg = taps if segments is None else segments.contiguous()
    launch(_taps_fwd, (B * L,), x, seg, taps, L, x.stride(0), x.stride(1), 0 if segments is None else seg.stride(0),
           taps.stride(0), taps.stride(1), D=D, K=kernel, HALF=(kernel - 1) // 2,
           BLOCK=triton.next_power_of_2(D), HAS_SEG=segments is not None, num_warps=4)
    return taps
