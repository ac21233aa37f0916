"""The RexUniNLU network: a DeBERTa-v2 encoder variant plus a rotary span head (docs/models/rexuninlu.md §1.4).

What differs from stock `DebertaV2Model`, and why we write our own:
  * relative positions are taken from the prompt's custom position ids, un-bucketed;
  * attention takes a per-sample [B, L, L] prompt-isolation mask;
  * no absolute position or token-type embedding; ConvLayer after layer 0;
  * the head: RoPE over the full hidden size on ffnq/ffnk, logits = q k^T with no scaling.

Attention lives in `attend()`, one switch with an eager path (the reference maths) and SDPA.
Padding rules for batching (docs/models/rexuninlu.md §2.7): pad embeddings are zeroed before the conv (as the
unpadded conv's zero padding would see them) and pad keys are masked.

Dropout sits where DeBERTa-v2 has it (embeddings, relative embeddings, attention probabilities,
both dense outputs, the conv), at the config's hidden_dropout_prob / attention_probs_dropout_prob.
It acts in train mode only: in eval every dropout is the identity, so inference is unchanged.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from contracts.domain import WeightsError
from contracts.names import Kernel


@dataclass
class RexConfig:
    vocab_size: int = 12800
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    position_buckets: int = 256
    layer_norm_eps: float = 1e-7
    conv_kernel_size: int = 3
    hidden_dropout_prob: float = 0.1           # training only (the reference fine-tuned with these)
    attention_probs_dropout_prob: float = 0.1

    # Fixed by this architecture; any other value in config.json is a different model.
    FIXED = {"relative_attention": True, "share_att_key": True, "position_biased_input": False,
             "type_vocab_size": 0, "max_relative_positions": -1, "norm_rel_ebd": "layer_norm",
             "hidden_act": "gelu", "conv_act": "gelu"}

    @classmethod
    def from_dict(cls, raw: dict) -> "RexConfig":
        if raw.get("model_type") != "deberta-v2":
            raise WeightsError(f"config.json model_type is {raw.get('model_type')!r}, expected 'deberta-v2'")
        for key, want in cls.FIXED.items():
            if key in raw and raw[key] != want:
                raise WeightsError(f"config.json {key}={raw[key]!r} is not supported (RexUniNLU uses {want!r})")
        att = raw.get("pos_att_type", "c2p|p2c")
        att = set(att.split("|") if isinstance(att, str) else att)
        if att != {"c2p", "p2c"}:
            raise WeightsError(f"config.json pos_att_type={raw.get('pos_att_type')!r}; expected c2p|p2c")
        cfg = cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})
        if cfg.hidden_size % cfg.num_attention_heads or cfg.hidden_size % 2 or cfg.num_hidden_layers < 1:
            raise WeightsError("config.json: hidden_size must be even and divisible by num_attention_heads, "
                               "with at least one layer")
        return cfg

    def to_dict(self) -> dict:
        d = {"model_type": "deberta-v2", "architectures": ["DebertaV2ForMaskedLM"],
             "initializer_range": 0.02, "max_position_embeddings": 512, "pos_att_type": "c2p|p2c", **self.FIXED}
        d.update(asdict(self))
        return d

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


# ---------------------------------------------------------------- attention

@dataclass
class Structure:
    """What every layer's attention needs about the batch, built once per forward.

    rel_idx [B,L,L] and mask [B,L,L] drive the eager and SDPA paths; the fused Triton kernel
    computes both per tile from positions and the per-token codes instead (no [L, L] tensors).
    """

    positions: torch.Tensor
    rel_idx: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    codes: tuple | None = None        # "triton": triton_attention.KernelCodes


def attend(q, k, v, c2p_table, p2c_table, st: Structure, scale: float, backend: str, dropout: float = 0.0):
    """Disentangled attention. q,k,v [B,H,L,d]; tables [B,H,L,2S] -> context [B,H,L,d].

    dropout: on the attention probabilities (training); the fused kernel has none (nor a backward)."""
    if backend == Kernel.TRITON:
        if dropout:
            raise ValueError("the triton attention kernel has no dropout; train with 'sdpa' or 'eager'")
        from plugins.rexuninlu.triton_attention import disentangled_attention
        return disentangled_attention(q, k, v, c2p_table, p2c_table, st.codes, scale=scale)
    idx = st.rel_idx.unsqueeze(1).expand(-1, q.shape[1], -1, -1)               # [B,H,L,L]
    c2p = torch.gather(c2p_table, -1, idx)                                     # Q_i . PK[idx(i,j)]
    p2c = torch.gather(p2c_table, -1, idx.transpose(-1, -2)).transpose(-1, -2)  # K_j . PQ[idx(i,j)]
    keep = st.mask.unsqueeze(1)                                                # [B,1,L,L]
    if backend == Kernel.EAGER:
        scores = q @ (k.transpose(-1, -2) * scale) + (c2p + p2c) * scale
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1).masked_fill(~keep, 0.0)          # XSoftmax
        if dropout:
            probs = F.dropout(probs, dropout)
        return probs @ v
    if backend == Kernel.SDPA:
        # A finite minimum (not -inf) keeps fully masked pad rows finite instead of NaN.
        bias = ((c2p + p2c) * scale).masked_fill(~keep, torch.finfo(q.dtype).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale, dropout_p=dropout)
    raise ValueError(f"unknown attention backend {backend!r}")


def relative_tables(qkv, pq, pk, heads: int):
    """c2p = Q·PKᵀ and p2c = K·PQᵀ, [B,H,L,2S] each, from one GEMM with no copy of Q or K (the Triton path).

    qkv [B,L,≥2D] contiguous, Q's columns then K's (SelfAttention's fused projection); pq, pk [2S,D]. The 2H heads
    of Q and K lie evenly spaced along qkv's rows, so they are one strided batch cuBLAS reads as it is:
    [2H, B·L, d] (row stride of qkv) times [2H, d, 2S] (PK's heads for Q's, then PQ's for K's) gives
    [2H, B·L, 2S]. Its [B,2H,L,2S] permutation is a view whose rows of 2S stay contiguous, which is all the
    kernel needs. (`q @ pk.transpose(-1, -2)` on [B,H,L,d] views would broadcast PK over the batch and
    copy Q and the expanded PK every layer.)
    """
    B, L, _ = qkv.shape
    d = pq.shape[-1] // heads
    rows = qkv.view(B * L, -1, d)[:, :2 * heads].transpose(0, 1)                  # [2H, B·L, d]
    cols = torch.cat((pk, pq), dim=-1).view(pq.shape[0], 2 * heads, d).permute(1, 2, 0)   # [2H, d, 2S]
    tables = torch.bmm(rows, cols).view(2 * heads, B, L, -1).transpose(0, 1)      # [B, 2H, L, 2S]
    return tables[:, :heads], tables[:, heads:]


class SelfAttention(nn.Module):
    def __init__(self, cfg: RexConfig):
        super().__init__()
        d = cfg.hidden_size
        self.heads = cfg.num_attention_heads
        self.query_proj = nn.Linear(d, d)
        self.key_proj = nn.Linear(d, d)
        self.value_proj = nn.Linear(d, d)
        self.scale = 1.0 / math.sqrt(cfg.head_dim * 3)     # 3 = 1 + c2p + p2c
        self.pos_dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.dropout = nn.Dropout(cfg.attention_probs_dropout_prob)   # its p goes to the kernel
        self._fused, self._fused_key = None, None

    def fused_projection(self) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k and v's weights and biases side by side, for the fused path's one GEMM. Kept between forwards
        (concatenating them took 0.1 ms of a 26 ms batch); built again after forget_fused_projections (a
        dtype switch, training) or when a weight's storage, dtype or version differs. Where gradients are
        recorded it is built each time, so they reach the three weights."""
        layers = (self.query_proj, self.key_proj, self.value_proj)
        key = [(t.data_ptr(), t.dtype, t._version) for p in layers for t in (p.weight, p.bias)]
        if self._fused_key != key or torch.is_grad_enabled():
            self._fused = torch.cat([p.weight for p in layers]), torch.cat([p.bias for p in layers])
            self._fused_key = None if torch.is_grad_enabled() else key
        return self._fused

    def split(self, x):                                    # [B,L,D] -> [B,H,L,d]
        return x.view(*x.shape[:-1], self.heads, -1).transpose(-3, -2)

    def forward(self, x, rel, st, backend):
        # share_att_key: positions go through the same projections, bias included.
        rel = self.pos_dropout(rel)
        if backend == Kernel.TRITON:
            # One GEMM over the three weights side by side; q, k, v are views of its [B,L,3D] output
            # (rows of stride 3D), which the kernel and the tables' GEMM read as they are.
            weight, bias = self.fused_projection()
            qkv = F.linear(x, weight, bias)                                         # [B,L,3D]
            q, k, v = (self.split(t) for t in qkv.chunk(3, dim=-1))
            pq, pk = F.linear(rel, weight[:2 * x.shape[-1]], bias[:2 * x.shape[-1]]).chunk(2, dim=-1)  # [2S,D]
            c2p, p2c = relative_tables(qkv, pq, pk, self.heads)
        else:   # unchanged GEMMs: fp32 outputs are pinned identical to the one-window-at-a-time baseline
            q, k, v = self.split(self.query_proj(x)), self.split(self.key_proj(x)), self.split(self.value_proj(x))
            pq, pk = self.query_proj(rel), self.key_proj(rel)                       # [2S,D]
            c2p, p2c = q @ self.split(pk).transpose(-1, -2), k @ self.split(pq).transpose(-1, -2)
        ctx = attend(q, k, v, c2p, p2c, st, self.scale, backend, self.dropout.p if self.training else 0.0)
        return ctx.transpose(-3, -2).flatten(-2)           # [B,L,D]


def forget_fused_projections(network: nn.Module) -> None:
    """Drop every layer's kept q·k·v weights: called where the weights change under the same tensors
    (MasterWeights swaps their data on a dtype switch; training steps them)."""
    for m in network.modules():
        if isinstance(m, SelfAttention):
            m._fused, m._fused_key = None, None


class DenseNorm(nn.Module):
    """dense -> dropout -> (+ residual) -> LayerNorm, the SelfOutput/Output block of DeBERTa."""

    def __init__(self, d_in: int, d_out: int, eps: float, dropout: float = 0.0):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, residual, fused: bool = False):
        """fused: the add and the norm as one Triton kernel (the fused-kernel path, inference only)."""
        if fused and not self.training:
            from plugins.rexuninlu.triton_norm import add_layer_norm
            return add_layer_norm(self.dense(x), residual, self.LayerNorm)
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    def __init__(self, cfg: RexConfig):
        super().__init__()
        self.self = SelfAttention(cfg)
        self.output = DenseNorm(cfg.hidden_size, cfg.hidden_size, cfg.layer_norm_eps, cfg.hidden_dropout_prob)


def gelu_linear(x, weight, bias, fused: bool):
    """gelu(x·Wᵀ + b). fused, at reduced precision: the GELU runs in the GEMM's epilogue (cuBLASLt), on the
    fp32 accumulator before the one rounding, which spares a pass over the output (the FFN's [B,L,4D]; the
    profile is in docs/performance.md). The epilogue's GELU is the tanh form: at most 4.8e-4
    from the erf form (at x ≈ 2.7, where the output's bf16 step is 0.016); docs/faithfulness.md. fp32 keeps
    the erf form. Callers pass fused only at inference (the fused-kernel path has no backward)."""
    if fused and x.dtype in (torch.bfloat16, torch.float16):
        rows = torch._addmm_activation(bias, x.flatten(0, -2), weight.t(), use_gelu=True)
        return rows.unflatten(0, x.shape[:-1])
    return F.gelu(F.linear(x, weight, bias))


class Intermediate(nn.Module):
    def __init__(self, cfg: RexConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x, fused: bool = False):
        return gelu_linear(x, self.dense.weight, self.dense.bias, fused and not self.training)


class Layer(nn.Module):
    def __init__(self, cfg: RexConfig):
        super().__init__()
        self.attention = Attention(cfg)
        self.intermediate = Intermediate(cfg)
        self.output = DenseNorm(cfg.intermediate_size, cfg.hidden_size, cfg.layer_norm_eps, cfg.hidden_dropout_prob)

    def forward(self, x, rel, st, backend):
        fused = backend == Kernel.TRITON
        a = self.attention.output(self.attention.self(x, rel, st, backend), x, fused)
        return self.output(self.intermediate(a, fused), a, fused)


class ConvLayer(nn.Module):
    """Mixes neighbours of the *embedding* output along the sequence; runs right after layer 0.

    The kernel-3 convolution is computed as one GEMM over [x(t-1), x(t), x(t+1)] (zeros past the
    ends, as conv padding): the same sums as Conv1d, without cuDNN picking algorithms whose
    workspace ran to tens of GB at some batch shapes.
    """

    def __init__(self, cfg: RexConfig):
        super().__init__()
        k = cfg.conv_kernel_size
        self.conv = nn.Conv1d(cfg.hidden_size, cfg.hidden_size, k, padding=(k - 1) // 2)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, emb, x, valid, segments=None, fused: bool = False):   # emb, x [B,L,D]; valid, segments [B,L]
        """fused (the fused-kernel path, inference): the taps gathered in one Triton pass, GELU in the GEMM's
        epilogue (gelu_linear) and the mask, the residual add and the norm in one kernel: the taps and sums below."""
        k = self.conv.kernel_size[0]
        weight = self.conv.weight.permute(0, 2, 1).flatten(1)                          # [D, k*D]
        if fused and not self.training:
            from plugins.rexuninlu.triton_norm import add_layer_norm, conv_taps
            c = gelu_linear(conv_taps(emb, k, segments), weight, self.conv.bias, True)
            return add_layer_norm(c, x, self.LayerNorm, valid)
        half = (k - 1) // 2
        padded = F.pad(emb, (0, 0, half, k - 1 - half))    # [B,L+k-1,D]
        taps = padded.unfold(1, k, 1).transpose(-1, -2)    # [B,L,k,D], a view: tap i of token t is padded[t+i]
        if segments is not None:
            # Packed rows: a tap never reads the neighbouring window (zero, as at a sequence end).
            seg = F.pad(segments, (half, k - 1 - half), value=-2)
            taps = torch.where((seg.unfold(1, k, 1) == segments.unsqueeze(-1)).unsqueeze(-1), taps, 0.0)
        taps = taps.flatten(-2)                                                         # [B,L,k*D], one copy
        keep = valid.unsqueeze(-1)
        c = F.gelu(self.dropout(F.linear(taps, weight, self.conv.bias).masked_fill(~keep, 0.0)))
        return self.LayerNorm(x + c) * keep.to(x.dtype)


class Encoder(nn.Module):
    def __init__(self, cfg: RexConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.rel_embeddings = nn.Embedding(2 * cfg.position_buckets, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.conv = ConvLayer(cfg)
        self.span = cfg.position_buckets
        self.checkpointing = False                          # gradient checkpointing (training only)

    def forward(self, emb, position_ids, mask, valid, backend=Kernel.EAGER, segments=None, codes=None):
        st = Structure(position_ids, mask=mask)
        if backend == Kernel.TRITON:
            from plugins.rexuninlu.triton_attention import kernel_codes
            st.codes = kernel_codes(position_ids, *codes)          # once for all layers
        else:
            # Un-bucketed relative positions from the prompt position ids, shared by every layer.
            st.rel_idx = (position_ids[:, :, None] - position_ids[:, None, :] + self.span).clamp(0, 2 * self.span - 1)
        rel = self.LayerNorm(self.rel_embeddings.weight)   # [2S,D]
        x = emb
        for i, layer in enumerate(self.layer):
            if self.checkpointing and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(layer, x, rel, st, backend, use_reentrant=False)
            else:
                x = layer(x, rel, st, backend)
            if i == 0:
                x = self.conv(emb, x, valid, segments, backend == Kernel.TRITON)
        return x


class Embeddings(nn.Module):
    def __init__(self, cfg: RexConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size + 4, cfg.hidden_size)   # + the 4 prompt tokens
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids):
        return self.dropout(self.LayerNorm(self.word_embeddings(input_ids)))


class Backbone(nn.Module):
    def __init__(self, cfg: RexConfig):
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)


def bf16_parts(x: torch.Tensor) -> list[torch.Tensor]:
    """x as bf16 terms whose sum is x to about 16 mantissa bits: itself if it is bf16, else its bf16
    rounding and the bf16 rounding of what that left (fp16 values are split exactly)."""
    if x.dtype == torch.bfloat16:
        return [x]
    high = x.to(torch.bfloat16)
    return [high, (x.float() - high.float()).to(torch.bfloat16)]


def fp32_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x @ y ([M,K]·[K,N] or batched) with fp32 accumulation and output: bf16 operands on the tensor cores on
    CUDA. The CPU has no bf16-in, fp32-out product: there the same sums in fp32, for tests."""
    mm = torch.bmm if x.dim() == 3 else torch.mm
    return mm(x, y, out_dtype=torch.float32) if x.is_cuda else mm(x.float(), y.float())


def part_pairs(a_parts: list, b_parts: list) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The pairs of bf16 parts whose products make a split product: all but low × low, which is below the
    result's precision."""
    return [(x, y) for i, x in enumerate(a_parts) for j, y in enumerate(b_parts) if not (i and j)]


def split_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in fp32 from bf16 tensor-core products: a and b split by bf16_parts, every pair of parts
    but the two small ones multiplied with fp32 accumulation and output, and summed. Relative error
    about 2⁻¹⁶ against fp32's 2⁻²⁴, where fp32 products run on the CUDA cores alone (the span head's three fp32 products were a
    noticeable share of a batch: docs/performance.md)."""
    flat = a.dim() == 3 and b.dim() == 2            # [B,L,D] @ [D,E]: one [B·L,D] @ [D,E] product
    left = a.flatten(0, 1) if flat else a
    (x, y), *others = part_pairs(bf16_parts(left), bf16_parts(b))
    out = fp32_product(x, y)
    for x, y in others:
        out.add_(fp32_product(x, y))
    return out.unflatten(0, a.shape[:2]) if flat else out


def fused_head_logits(h, ffnq: nn.Linear, ffnk: nn.Linear, rotary: Rotary, position_ids) -> torch.Tensor:
    """The span head of a reduced-precision encoder on the fused path, split_matmul's arithmetic in three
    device steps (triton_rotary): q's and k's projection as one product, the bias, rotary and bf16 split in
    one kernel, q·kᵀ as one product over the parts. h [B,L,D] bf16 or fp16 -> logits [B,L,L] fp32."""
    from plugins.rexuninlu.triton_rotary import rotary_parts
    rows, weight = h.flatten(0, 1), torch.cat((ffnq.weight, ffnk.weight))          # [B·L,D], [2D,D]
    h_parts, w_parts = bf16_parts(rows), bf16_parts(weight)
    if len(h_parts) == 1:       # bf16 h: against the weight's parts side by side; the kernel sums the terms
        projection = fp32_product(rows, torch.cat(w_parts).t())
    else:                       # fp16 h: every pair of parts but low × low, along one inner dimension
        pairs = part_pairs(h_parts, w_parts)
        projection = fp32_product(torch.cat([x for x, _ in pairs], -1), torch.cat([y for _, y in pairs], -1).t())
    q, k = rotary_parts(projection.unflatten(0, h.shape[:2]), torch.cat((ffnq.bias, ffnk.bias)),
                        *rotary.angles(position_ids, torch.float32))
    return fp32_product(q, k.mT)


class Rotary(nn.Module):
    """RoPE over the full hidden size, interleaved pairs (x0,x1) -> (-x1,x0)."""

    def __init__(self, dim: int):
        super().__init__()
        self.freqs = nn.Parameter(1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim), requires_grad=False)

    def angles(self, position_ids, dtype):                  # -> cos, sin [B,L,D/2]
        # The reference casts the angle to t's dtype before cos/sin.
        ang = (position_ids.to(self.freqs.dtype)[..., None] * self.freqs).to(dtype)
        return ang.cos(), ang.sin()

    def forward(self, t, position_ids):                     # t [B,L,D]
        # t·cos + (−x1, x0)·sin pair by pair, with each angle's cos and sin taken once (the reference
        # repeats every angle for both members of its pair first): the same operations on the same
        # values, so the same bits, in half the transcendental work and fewer passes over [B,L,D].
        cos, sin = self.angles(position_ids, t.dtype)
        x0, x1 = t.unflatten(-1, (-1, 2)).unbind(-1)
        return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)


class RexModel(nn.Module):
    """input_ids, position_ids [B,L]; mask [B,L,L] bool (True = may attend); valid [B,L] -> logits [B,L,L] fp32.

    segments [B,L] (optional): the window each token belongs to when several windows are packed
    into one row; the mask must then keep windows apart, and the ConvLayer does so itself.
    codes (groups, types, segments) replace the mask for the fused "triton" attention.
    """

    def __init__(self, cfg: RexConfig):
        super().__init__()
        self.config = cfg
        self.plm = Backbone(cfg)
        self.ffnq = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.ffnk = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.rotary_emb = Rotary(cfg.hidden_size)
        self.attention_backend = Kernel.EAGER

    def encode(self, input_ids, position_ids, mask, valid, segments=None, codes=None):
        emb = self.plm.embeddings(input_ids) * valid.unsqueeze(-1).to(self.plm.embeddings.LayerNorm.weight.dtype)
        return self.plm.encoder(emb, position_ids, mask, valid, self.attention_backend, segments, codes)

    def span_logits(self, h, position_ids):
        """The span head keeps fp32 weights and values whatever the encoder precision: logits near 0
        decide spans. Behind a reduced-precision encoder on CUDA, at inference, its three products run
        as split bf16 products (split_matmul; on the fused path fused_head_logits, in fewer passes);
        otherwise (fp32, training) plain fp32 products, as the reference's."""
        if h.dtype == torch.float32 or not h.is_cuda or torch.is_grad_enabled():
            h = h.float()
            q = self.rotary_emb(self.ffnq(h), position_ids)
            k = self.rotary_emb(self.ffnk(h), position_ids)
            return q @ k.transpose(-1, -2)
        if self.attention_backend == Kernel.TRITON:
            return fused_head_logits(h, self.ffnq, self.ffnk, self.rotary_emb, position_ids)
        q = self.rotary_emb(split_matmul(h, self.ffnq.weight.t()) + self.ffnq.bias, position_ids)
        k = self.rotary_emb(split_matmul(h, self.ffnk.weight.t()) + self.ffnk.bias, position_ids)
        return split_matmul(q, k.transpose(-1, -2))

    def forward(self, input_ids, position_ids, mask, valid, segments=None, codes=None):
        return self.span_logits(self.encode(input_ids, position_ids, mask, valid, segments, codes), position_ids)
