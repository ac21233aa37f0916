"""A fused disentangled-attention kernel (Triton), for RexUniNLU on CUDA.

flash-attn cannot take RexUniNLU's attention: the c2p/p2c bias is indexed by *prompt position ids*
(non-monotonic, restarting per group) and the mask is the prompt-isolation rule, not padding or
causal. This kernel keeps FlashAttention's structure — tiles of Q against tiles of K/V with an
online softmax, nothing [L, L] written to memory — and adds inside each tile:

  scores[i, j] = (Q_i·K_j + c2p[i, j] + p2c[i, j])·s,   idx = clamp(pos_i − pos_j + S, 0, 2S − 1)
  c2p[i, j] = C[i, idx(i, j)],  C = Q·PKᵀ   ([L, 2S] per head, computed before the kernel)
  p2c[i, j] = P[j, idx(i, j)],  P = K·PQᵀ
  allowed(i, j) from the per-token group/type/segment codes (scoring.isolation_mask's rule)

C and P are [B, H, L, 2S] with any batch/head/row strides (each its own), rows of 2S contiguous:
modeling.relative_tables computes each as one [H, B·L, 2S] GEMM and hands over its permuted view.
The gathers read rows of C and P that stay in L2 while a head is processed. Rows with no allowed
key (padding) give zeros, as XSoftmax does.
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
    def _disentangled_fwd(Q, K, V, C, P, POS, GRP, TYP, SEG, O,
                          sq_b, sq_h, sq_l, sk_b, sk_h, sk_l, sc_b, sc_h, sc_l, sp_b, sp_h, sp_l, sm_b,
                          so_b, so_h, so_l,
                          H, scale, L: tl.constexpr,
                          SPAN: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          PRECISION: tl.constexpr):
        m_block, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, D)
        row_ok = rows < L
        q = tl.load(Q + b * sq_b + h * sq_h + rows[:, None] * sq_l + dims[None, :], mask=row_ok[:, None], other=0.0)
        pos_q = tl.load(POS + b * sm_b + rows, mask=row_ok, other=0)
        grp_q = tl.load(GRP + b * sm_b + rows, mask=row_ok, other=-2)
        typ_q = tl.load(TYP + b * sm_b + rows, mask=row_ok, other=0)
        seg_q = tl.load(SEG + b * sm_b + rows, mask=row_ok, other=-1)
        c_rows = C + b * sc_b + h * sc_h + rows[:, None] * sc_l
        p_head = P + b * sp_b + h * sp_h
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        # The segments (windows) these rows hold: a key tile whose windows lie outside [seg_lo, seg_hi] has
        # no allowed pair with them (a packed row's other windows, padding), so it is skipped whole. Its
        # scores would all be -inf, which leaves m, l and acc exactly as they are: skipping is lossless.
        seg_lo = tl.min(tl.where(seg_q >= 0, seg_q, 2147483647))
        seg_hi = tl.max(seg_q)
        for start in range(0, L, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_ok = cols < L
            seg_k = tl.load(SEG + b * sm_b + cols, mask=col_ok, other=-1)
            if (tl.max(seg_k) >= seg_lo) & (tl.min(tl.where(seg_k >= 0, seg_k, 2147483647)) <= seg_hi):
                m_i, l_i, acc = _tile(K, V, POS, GRP, TYP, q, c_rows, p_head, pos_q, grp_q, typ_q, seg_q, seg_k,
                                      rows, row_ok, cols, col_ok, dims, b, h, sk_b, sk_h, sk_l, sp_l, sm_b,
                                      scale, m_i, l_i, acc, SPAN, PRECISION)
        out = acc / tl.where(l_i == 0, 1.0, l_i)[:, None]
        tl.store(O + b * so_b + h * so_h + rows[:, None] * so_l + dims[None, :], out.to(O.dtype.element_ty),
                 mask=row_ok[:, None])

    @triton.jit
    def _tile(K, V, POS, GRP, TYP, q, c_rows, p_head, pos_q, grp_q, typ_q, seg_q, seg_k, rows, row_ok, cols,
              col_ok, dims, b, h, sk_b, sk_h, sk_l, sp_l, sm_b, scale, m_i, l_i, acc,
              SPAN: tl.constexpr, PRECISION: tl.constexpr):
        """One key tile of the online softmax: scores with the c2p/p2c bias, the isolation mask, update."""
        kv = b * sk_b + h * sk_h + cols[:, None] * sk_l + dims[None, :]
        k = tl.load(K + kv, mask=col_ok[:, None], other=0.0)
        v = tl.load(V + kv, mask=col_ok[:, None], other=0.0)
        pos_k = tl.load(POS + b * sm_b + cols, mask=col_ok, other=0)
        grp_k = tl.load(GRP + b * sm_b + cols, mask=col_ok, other=-2)
        typ_k = tl.load(TYP + b * sm_b + cols, mask=col_ok, other=0)
        idx = tl.minimum(tl.maximum(pos_q[:, None] - pos_k[None, :] + SPAN, 0), 2 * SPAN - 1)
        both = row_ok[:, None] & col_ok[None, :]
        c2p = tl.load(c_rows + idx, mask=both, other=0.0).to(tl.float32)
        p2c = tl.load(p_head + cols[None, :] * sp_l + idx, mask=both, other=0.0).to(tl.float32)
        s = (tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) + c2p + p2c) * scale
        glob_q, glob_k = grp_q[:, None] == -1, grp_k[None, :] == -1
        same = (grp_q[:, None] == grp_k[None, :]) & (
            (typ_q[:, None] == typ_k[None, :]) | (typ_q[:, None] == 0) | (typ_k[None, :] == 0))
        allowed = (glob_q | glob_k | same) & (seg_q[:, None] == seg_k[None, :]) & (seg_k[None, :] >= 0) & both
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION).to(tl.float32)
        return m_new, l_i, acc


def available() -> bool:
    return triton is not None


def rows_contiguous(table):
    """The kernel gathers within a table's rows, so only the last dim must be contiguous."""
    return table if table.stride(-1) == 1 else table.contiguous()


def disentangled_attention(q, k, v, c2p_table, p2c_table, positions, groups, types, segments, scale: float,
                           block_m: int = 64, block_n: int = 32, num_warps: int = 4):
    """q,k,v [B,H,L,d] and tables [B,H,L,2S] (unscaled), any strides with the last dim contiguous;
    positions/groups/types/segments [B,L] -> context [B,H,L,d], stored [B,L,H,d] underneath so the
    caller's merge of heads is free."""
    B, H, L, D = q.shape
    span = c2p_table.shape[-1] // 2
    assert q.stride(-1) == k.stride(-1) == v.stride(-1) == 1 and k.stride() == v.stride()
    c, p = rows_contiguous(c2p_table), rows_contiguous(p2c_table)
    meta = [t.to(torch.int32).contiguous() for t in (positions, groups, types, segments)]
    out = torch.empty(B, L, H, D, dtype=q.dtype, device=q.device).transpose(1, 2)
    grid = (triton.cdiv(L, block_m), B * H)
    _disentangled_fwd[grid](q, k, v, c, p, *meta, out,
                            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                            c.stride(0), c.stride(1), c.stride(2), p.stride(0), p.stride(1), p.stride(2),
                            meta[0].stride(0), out.stride(0), out.stride(1), out.stride(2),
                            H, scale, L=L, SPAN=span, D=D, BLOCK_M=block_m, BLOCK_N=block_n,
                            PRECISION="ieee" if q.dtype == torch.float32 else "tf32",   # fp32 stays real fp32
                            num_warps=num_warps)
    return out
