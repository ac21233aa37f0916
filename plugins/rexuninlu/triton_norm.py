"""Residual add and LayerNorm in one pass (Triton), for RexUniNLU's fused-kernel path on CUDA.

Each DeBERTa block ends in LayerNorm(dense(x) + residual). PyTorch runs the add and the norm as two
kernels, and its LayerNorm kernel moved a [64·512, 768] bf16 tensor at about a third of the H200's
bandwidth (profiled: 1.83 ms for 27 norms and 0.88 ms for 25 adds per batch of 64 windows). Here one
program normalises one row: it reads both inputs once and writes the output once.

The arithmetic follows PyTorch's: the sum is rounded to the input dtype first (as the separate add
does), then mean, biased variance, (s − mean)·rsqrt(var + eps)·weight + bias in fp32, rounded once.
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:                  # CPU-only installs: the kernel is simply not offered
    triton = None


if triton is not None:
    @triton.jit
    def _add_norm_fwd(X, R, W, B, Y, stride_x, stride_r, stride_y, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        ok = cols < n_cols
        x = tl.load(X + row * stride_x + cols, mask=ok, other=0.0)
        r = tl.load(R + row * stride_r + cols, mask=ok, other=0.0)
        s = (x + r).to(tl.float32)
        mean = tl.sum(s, 0) / n_cols
        centred = tl.where(ok, s - mean, 0.0)
        var = tl.sum(centred * centred, 0) / n_cols
        w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
        y = centred * (1.0 / tl.sqrt(var + eps)) * w + b
        tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=ok)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    """norm(x + residual) over the last dim; x and residual of one shape and dtype."""
    d = x.shape[-1]
    rows_x, rows_r = x.reshape(-1, d), residual.reshape(-1, d)
    assert rows_x.stride(-1) == rows_r.stride(-1) == 1 and x.shape == residual.shape
    out = torch.empty_like(rows_x)
    block = triton.next_power_of_2(d)
    _add_norm_fwd[(rows_x.shape[0],)](rows_x, rows_r, norm.weight, norm.bias, out,
                                      rows_x.stride(0), rows_r.stride(0), out.stride(0), d, norm.eps,
                                      BLOCK=block, num_warps=4 if block <= 1024 else 8)
    return out.view(x.shape)
