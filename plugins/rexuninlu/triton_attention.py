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
modeling.relative_tables computes both as one [2H, B·L, 2S] GEMM and hands over permuted views of it.
The gathers read rows of C and P that stay in L2 while a head is processed. Rows with no allowed
key (padding) give zeros, as XSoftmax does. Each block of rows visits only the key tiles of its own
windows (kernel_codes' ranges), so a row packed with several windows costs about what they would alone.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

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
    def _disentangled_fwd(Q, K, V, C, P, POS, GRP, TYP, SEG, KLO, KHI, O,
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
        meta_q = b * sm_b + rows
        pos_q = tl.load(POS + meta_q, mask=row_ok, other=0)
        grp_q = tl.load(GRP + meta_q, mask=row_ok, other=-2)
        typ_q = tl.load(TYP + meta_q, mask=row_ok, other=0)
        seg_q = tl.load(SEG + meta_q, mask=row_ok, other=-1)
        c_rows = C + b * sc_b + h * sc_h + rows[:, None] * sc_l
        p_head = P + b * sp_b + h * sp_h
        # The softmax runs on exp2 with log2(e) folded into the scale: one multiply per score fewer, the
        # same result to rounding, and measurably faster (docs/performance.md, the kernel's trims). Other trims
        # measured with it cost time instead: loads without bounds when L is a multiple of the tiles, a
        # lighter allowed rule, prefetching the next tile's bias, more or fewer pipeline stages.
        scale = scale * 1.4426950408889634
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        # Only the key columns of these rows' windows can be allowed (KLO/KHI: kernel_codes). Key tiles
        # outside [lo, hi) would score -inf everywhere, which leaves m, l and acc exactly as they are, so
        # the loop runs over that range only: lossless, and with no branch in it the loads can be pipelined.
        lo = tl.min(tl.load(KLO + meta_q, mask=row_ok, other=L))
        hi = tl.max(tl.load(KHI + meta_q, mask=row_ok, other=0))
        for start in range((lo // BLOCK_N) * BLOCK_N, hi, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_ok = cols < L
            meta_k = b * sm_b + cols
            kv = b * sk_b + h * sk_h + cols[:, None] * sk_l + dims[None, :]
            k = tl.load(K + kv, mask=col_ok[:, None], other=0.0)
            v = tl.load(V + kv, mask=col_ok[:, None], other=0.0)
            pos_k = tl.load(POS + meta_k, mask=col_ok, other=0)
            grp_k = tl.load(GRP + meta_k, mask=col_ok, other=-2)
            typ_k = tl.load(TYP + meta_k, mask=col_ok, other=0)
            seg_k = tl.load(SEG + meta_k, mask=col_ok, other=-1)
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
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION).to(tl.float32)
            m_i = m_new
        out = acc / tl.where(l_i == 0, 1.0, l_i)[:, None]
        tl.store(O + b * so_b + h * so_h + rows[:, None] * so_l + dims[None, :], out.to(O.dtype.element_ty),
                 mask=row_ok[:, None])


def available() -> bool:
    return triton is not None


class Tiles(NamedTuple):
    """One launch configuration of the kernel."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


# The configurations the kernel may launch with, fastest first in docs/benchmarks.md's tile sweeps.
# A GPU takes the first whose shared memory fits the per-block limit it reports (tiles_for): an Ada card
# (RTX 4090, sm_89) allows 99 KB, a Hopper 227 KB; the smaller tiles are for cards with less still.
TILES = (Tiles(64, 32, 4, 3), Tiles(64, 16, 4, 2), Tiles(32, 16, 2, 2), Tiles(16, 16, 1, 1))


def shared_bytes(tiles: Tiles, element_bytes: int, head_dim: int) -> int:
    """An upper bound on the shared memory one block of the kernel takes: every tile the dots read staged
    at once (Q, and K and V once per pipeline stage), the probabilities P, and the per-key codes per stage.
    The compiler reuses buffers, so it allocates less; tests/plugins/rexuninlu/test_sm89.py compiles every entry of
    TILES for sm_89 and checks the bound against what it allocated (docs/performance.md §6)."""
    stages = max(tiles.num_stages, 1)
    operands = tiles.block_m * head_dim + 2 * stages * tiles.block_n * head_dim + tiles.block_m * tiles.block_n
    return element_bytes * operands + stages * 4 * 4 * tiles.block_n


def tiles_for(shared_limit: int, element_bytes: int, head_dim: int) -> Tiles:
    """The first configuration of TILES that fits `shared_limit` bytes of shared memory per block."""
    for tiles in TILES:
        if shared_bytes(tiles, element_bytes, head_dim) <= shared_limit:
            return tiles
    raise RuntimeError(f"the attention kernel needs at least {shared_bytes(TILES[-1], element_bytes, head_dim)} "
                       f"bytes of shared memory per block; this GPU offers {shared_limit}: use the sdpa kernel")


TILES_LIMIT_OFF_CUDA = 1 << 30      # the CPU interpreter has no shared memory to run out of


@functools.lru_cache(maxsize=None)
def device_shared_limit(index: int) -> int:
    """The shared memory a block may take on CUDA device `index`, as the device reports it (the opt-in
    limit, above the default 48 KB; Triton opts in for a kernel that needs it). By the number, never by the
    GPU's name."""
    return int(torch.cuda.get_device_properties(index).shared_memory_per_block_optin)


def rows_contiguous(table):
    """The kernel gathers within a table's rows, so only the last dim must be contiguous."""
    return table if table.stride(-1) == 1 else table.contiguous()


class KernelCodes(NamedTuple):
    """What the kernel reads per token, int32 [B, L] each: built once per forward by kernel_codes."""

    positions: torch.Tensor
    groups: torch.Tensor
    types: torch.Tensor
    segments: torch.Tensor
    key_lo: torch.Tensor          # the columns [key_lo, key_hi) of the token's window; [L, 0) for padding
    key_hi: torch.Tensor


def kernel_codes(positions, groups, types, segments) -> KernelCodes:
    """The per-token codes, and each token's key range. Windows lie end to end along a row with the
    padding (-1) after them (scoring.fill), so segments never decrease along a row and a window's keys
    are one column range, found by a batched binary search."""
    seg = segments.to(torch.int32).contiguous()
    pad = seg < 0
    ordered = seg.masked_fill(pad, torch.iinfo(torch.int32).max)
    if not seg.is_cuda:       # the layout the ranges rely on; checked where it costs no device sync
        assert bool((ordered[:, 1:] >= ordered[:, :-1]).all()), "segments must not decrease along a row"
    lo = torch.searchsorted(ordered, ordered, side="left", out_int32=True).masked_fill(pad, seg.shape[-1])
    hi = torch.searchsorted(ordered, ordered, side="right", out_int32=True).masked_fill(pad, 0)
    as_int = [t.to(torch.int32).contiguous() for t in (positions, groups, types)]
    return KernelCodes(*as_int, seg, lo, hi)


def disentangled_attention(q, k, v, c2p_table, p2c_table, codes: KernelCodes, scale: float,
                           block_m: int | None = None, block_n: int | None = None, num_warps: int | None = None,
                           num_stages: int | None = None):
    """q,k,v [B,H,L,d] and tables [B,H,L,2S] (unscaled), any strides with the last dim contiguous;
    codes from kernel_codes -> context [B,H,L,d], stored [B,L,H,d] underneath so the caller's merge of
    heads is free. Tiles not given come from tiles_for the device's shared memory."""
    B, H, L, D = q.shape
    if q.is_cuda:
        limit = device_shared_limit(torch.cuda.current_device() if q.device.index is None else q.device.index)
    else:                    # Triton's CPU interpreter (the tests): no device to ask
        limit = TILES_LIMIT_OFF_CUDA
    chosen = tiles_for(limit, q.element_size(), D)
    block_m, block_n = block_m or chosen.block_m, block_n or chosen.block_n
    num_warps, num_stages = num_warps or chosen.num_warps, num_stages or chosen.num_stages
    span = c2p_table.shape[-1] // 2
    assert q.stride(-1) == k.stride(-1) == v.stride(-1) == 1 and k.stride() == v.stride()
    c, p = rows_contiguous(c2p_table), rows_contiguous(p2c_table)
    out = torch.empty(B, L, H, D, dtype=q.dtype, device=q.device).transpose(1, 2)
    grid = (triton.cdiv(L, block_m), B * H)
    launch(_disentangled_fwd, grid, q, k, v, c, p, *codes, out,
           q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
           c.stride(0), c.stride(1), c.stride(2), p.stride(0), p.stride(1), p.stride(2),
           codes.positions.stride(0), out.stride(0), out.stride(1), out.stride(2),
           H, scale, L=L, SPAN=span, D=D, BLOCK_M=block_m, BLOCK_N=block_n,
           PRECISION="ieee" if q.dtype == torch.float32 else "tf32",   # fp32 stays real fp32
           num_warps=num_warps, num_stages=num_stages)
    return out
