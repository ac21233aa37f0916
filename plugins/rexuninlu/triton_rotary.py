"""The span head's bias, rotary embedding and bf16 split in one pass (Triton), for the fused-kernel path.

Behind a reduced-precision encoder the head projects h to q and k with split bf16 products
(modeling.split_matmul), adds the bias, rotates each pair (x0, x1) by its angle and splits the result again
into bf16 parts for the q·kᵀ product. In PyTorch that is a dozen passes over fp32 [B, L, D] tensors and
five products whose sums are separate passes, which cost several times the products themselves
(docs/performance.md has the profile). Here (modeling.fused_head_logits) the projection is
one GEMM, one program per token sums its terms, adds the bias, rotates and splits, and writes q and k laid
out so that q·kᵀ over the parts is a single product along a 3·D axis:

    q = [q_hi | q_lo | q_hi],   k = [k_hi | k_hi | k_lo]   ->   q·kᵀ = q_hi·k_hiᵀ + q_lo·k_hiᵀ + q_hi·k_loᵀ

(low × low is below the result's precision, as in split_matmul).

The arithmetic is the eager head's: the terms summed in order, then the bias; cos and sin of each token's
angles from Rotary.angles (PyTorch's, the same bits); x0·cos − x1·sin and x1·cos + x0·sin in fp32 (the
compiler may fuse a multiply and an add, a last-bit difference); high = bf16(y), low = bf16(y − high).
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
    def _rotary_parts_fwd(X, BIAS, COS, SIN, OUT, stride_x, stride_angle, tokens, D,
                          TERMS: tl.constexpr, PAIRS: tl.constexpr, BLOCK: tl.constexpr):
        token = tl.program_id(0)
        pair = tl.arange(0, BLOCK)                        # q's pairs, then k's: 2·D columns, D pairs
        ok = pair < PAIRS
        col = 2 * pair
        angle = token * stride_angle + pair % (D // 2)
        cos, sin = tl.load(COS + angle, mask=ok, other=0.0), tl.load(SIN + angle, mask=ok, other=0.0)
        row = X + token * stride_x
        x0 = tl.load(row + col, mask=ok, other=0.0)
        x1 = tl.load(row + col + 1, mask=ok, other=0.0)
        for t in tl.static_range(1, TERMS):               # the products with the weights' other parts
            x0 += tl.load(row + t * 2 * D + col, mask=ok, other=0.0)
            x1 += tl.load(row + t * 2 * D + col + 1, mask=ok, other=0.0)
        x0 += tl.load(BIAS + col, mask=ok, other=0.0)
        x1 += tl.load(BIAS + col + 1, mask=ok, other=0.0)
        y0, y1 = x0 * cos - x1 * sin, x1 * cos + x0 * sin
        high0, high1 = y0.to(tl.bfloat16), y1.to(tl.bfloat16)
        low0, low1 = (y0 - high0.to(tl.float32)).to(tl.bfloat16), (y1 - high1.to(tl.float32)).to(tl.bfloat16)
        is_q = pair < D // 2
        side = tl.where(is_q, 0, tokens * 3 * D)          # out [2, tokens, 3·D]: q's rows, then k's
        at = OUT + side + token * 3 * D + tl.where(is_q, col, col - D)
        tl.store(at, high0, mask=ok)
        tl.store(at + 1, high1, mask=ok)
        tl.store(at + D, tl.where(is_q, low0, high0), mask=ok)
        tl.store(at + D + 1, tl.where(is_q, low1, high1), mask=ok)
        tl.store(at + 2 * D, tl.where(is_q, high0, low0), mask=ok)
        tl.store(at + 2 * D + 1, tl.where(is_q, high1, low1), mask=ok)


def rotary_parts(projection: torch.Tensor, bias: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """projection [B, L, n·2D] fp32: n terms to sum, each q's D columns then k's (the products of h with
    the n bf16 parts of [W_q; W_k]); bias [2D]; cos, sin [B, L, D/2] fp32 (Rotary.angles) -> q and k,
    [B, L, 3D] bf16 each, laid out as the module docstring says, so that q @ kᵀ is the head's logits to
    about 16 bits."""
    B, L, width = projection.shape
    D = bias.numel() // 2
    assert projection.dtype == cos.dtype == sin.dtype == torch.float32 and width % (2 * D) == 0
    projection, cos, sin = (t.reshape(B * L, -1) for t in (projection, cos, sin))     # copies only if strided
    assert projection.stride(-1) == cos.stride(-1) == 1 and cos.stride() == sin.stride() and D % 2 == 0
    out = torch.empty(2, B, L, 3 * D, dtype=torch.bfloat16, device=projection.device)
    block = triton.next_power_of_2(D)
    launch(_rotary_parts_fwd, (B * L,), projection, bias.float().contiguous(), cos, sin, out, projection.stride(0),
           cos.stride(0), B * L, D, TERMS=width // (2 * D), PAIRS=D, BLOCK=block,
           num_warps=4 if block <= 1024 else 8)
    return out[0], out[1]
