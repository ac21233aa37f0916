"""BLOOM, the network under SeqGPT-560M: config, attention backends, attention, MLP, block, model.

The eager path does Hugging Face BloomForCausalLM's arithmetic op for op (transformers 5.17.0,
docs/models/seqgpt.md §2 and §3.1), so in fp32 it reproduces its logits bit for bit; the SDPA path expresses the
same ALiBi attention through a float bias. Module names equal the checkpoint's keys (less the
`transformer.` prefix), so the official state dict loads without renaming. Long prompts go through
attention in query chunks, so no [B, H, L, L] tensor is ever built; the KV cache is in cache.py.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from contracts.names import Kernel
from plugins.seqgpt.cache import KVCache, allocate


@dataclass(frozen=True)
class BloomConfig:
    vocab_size: int = 250880            # bloom-560m / SeqGPT-560M: 250,680 tokens padded to 250,880
    hidden_size: int = 1024
    n_layer: int = 24
    n_head: int = 16
    layer_norm_epsilon: float = 1e-5
    apply_residual_connection_post_layernorm: bool = False
    tie_word_embeddings: bool = True
    hidden_dropout: float = 0.0         # training only; bloom-560m / SeqGPT ship 0.0
    attention_dropout: float = 0.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_head


# Cached: built once per device, never inside a CUDA-graph capture (it copies a scalar to the device).
@functools.lru_cache(maxsize=None)
def alibi_slopes(n_head: int, device=None) -> torch.Tensor:
    """ALiBi slope per head, computed as HF does (fp32 powers) so the bias matches to the bit. [H]"""
    closest = 2 ** math.floor(math.log2(n_head))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float32, device=device)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32, device=device))
    if closest != n_head:   # head counts that are not a power of 2 interleave a finer schedule
        extra = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float32, device=device)
        n_extra = min(closest, n_head - closest)
        slopes = torch.cat([slopes, torch.pow(extra, torch.arange(1, 1 + 2 * n_extra, 2, dtype=torch.int32,
                                                                  device=device))])
    return slopes


# ----------------------------------------------------------------------------------------------
# Attention backends. All of them see the same inputs: the 2D padding mask of everything in the
# cache plus the new tokens, from which ALiBi positions (counted over real tokens only, so left
# padding is exact) and the causal + padding mask follow. A fused backend (flash-attn with
# alibi_slopes and varlen) registers here under its own name; nothing else changes.
# ----------------------------------------------------------------------------------------------

@dataclass
class AttentionInputs:
    slopes: torch.Tensor            # [H] fp32
    key_positions: torch.Tensor     # [B, kv] position among the row's real tokens; 0 on pads (HF's arange)
    allowed: torch.Tensor           # [B, 1, q, kv] bool: causal and the key is a real token

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor, q_len: int, slopes: torch.Tensor) -> "AttentionInputs":
        kv = attention_mask.shape[1]
        positions = (attention_mask.cumsum(dim=-1) - 1) * attention_mask
        causal = torch.ones(q_len, kv, dtype=torch.bool, device=attention_mask.device).tril(kv - q_len)
        allowed = causal[None, None] & attention_mask.bool()[:, None, None, :]
        return cls(slopes, positions, allowed)

    @property
    def query_positions(self) -> torch.Tensor:     # [B, q]
        if self.allowed.shape[2] == 1:
            # One new token is the row's newest real key, wherever it sits: a static cache has
            # masked, not yet written columns after it.
            return self.key_positions.amax(dim=-1, keepdim=True)
        return self.key_positions[:, -self.allowed.shape[2]:]


# Queries go through attention in chunks when their scores would exceed this many elements: a
# 5,120-token prompt would otherwise hold [H, L, L] = 419M scores per layer (1.7 GB in fp32).
SCORE_BUDGET = 1 << 25


def chunk_rows(batch_heads: int, q_len: int, kv: int) -> int:
    """Query rows per chunk so that a chunk's [B*H, rows, kv] scores stay within SCORE_BUDGET."""
    return min(q_len, max(1, SCORE_BUDGET // (batch_heads * kv)))


class AttentionBackend(Protocol):
    name: str

    def prepare(self, inputs: AttentionInputs, dtype: torch.dtype) -> object:
        """Once per forward: whatever the kernel needs (bias, mask), shared by all layers."""

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prepared) -> torch.Tensor:
        """q [B, H, q, D], k and v [B, H, kv, D] -> [B, H, q, D]. Training with attention dropout also
        passes dropout_p=p (eager and sdpa take it)."""


class EagerAttention:
    """HF's arithmetic: absolute ALiBi (slope * key position, in the model dtype) added by baddbmm,
    masked scores, softmax in fp32. Shift invariance of softmax makes the absolute form exact."""

    name = Kernel.EAGER

    def prepare(self, inputs: AttentionInputs, dtype: torch.dtype):
        b, kv = inputs.key_positions.shape
        alibi = inputs.slopes[..., None] * inputs.key_positions[:, None, :]         # [B, H, kv] fp32
        return alibi.reshape(b * len(inputs.slopes), 1, kv).to(dtype), inputs.allowed

    def attend(self, q, k, v, prepared, dropout_p: float = 0.0):
        alibi, allowed = prepared
        b, h, q_len, d = q.shape
        kv = k.shape[2]
        rows = chunk_rows(b * h, q_len, kv)
        if rows < q_len:            # a long prompt: same maths per query row (the GEMMs may round differently)
            return torch.cat([self.attend(q[:, :, i:i + rows], k, v, (alibi, allowed[:, :, i:i + rows]), dropout_p)
                              for i in range(0, q_len, rows)], dim=2)
        scores = alibi.baddbmm(q.reshape(b * h, q_len, d), k.reshape(b * h, kv, d).transpose(-1, -2),
                               beta=1.0, alpha=1.0 / math.sqrt(d))
        # HF adds finfo.min, which in fp32 rounds to exactly finfo.min; masked_fill gives the same bits
        # and, unlike the sum, cannot overflow to -inf in fp16 (a fully masked pad row would turn NaN).
        scores = scores.view(b, h, q_len, kv).masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        if dropout_p:
            probs = F.dropout(probs, dropout_p)
        return torch.bmm(probs.view(b * h, q_len, kv), v.reshape(b * h, kv, d)).view(b, h, q_len, d)


class SdpaAttention:
    """torch SDPA with ALiBi as a float bias slope * (key pos - query pos), relative, so it stays
    accurate in fp16 at long positions. Masked entries get a large *finite* negative: -inf would make
    fully masked pad rows NaN, and 0 * NaN leaks through the value product."""

    name = Kernel.SDPA

    def prepare(self, inputs: AttentionInputs, dtype: torch.dtype):
        q_len, kv = inputs.allowed.shape[2:]
        if chunk_rows(inputs.key_positions.shape[0] * len(inputs.slopes), q_len, kv) == q_len:
            return self.bias(inputs, dtype, 0, q_len, kv)           # one bias, shared by every layer
        return inputs, dtype                                         # long prompt: a bias per query chunk

    @staticmethod
    def bias(inputs: AttentionInputs, dtype: torch.dtype, start: int, end: int, keys: int) -> torch.Tensor:
        """[B, H, end - start, keys] for query rows [start, end) and the first `keys` keys."""
        distance = inputs.key_positions[:, None, None, :keys] - inputs.query_positions[:, None, start:end, None]
        bias = inputs.slopes[None, :, None, None] * distance                        # [B, H, q, kv] fp32
        bias = bias.masked_fill(~inputs.allowed[:, :, start:end, :keys], torch.finfo(dtype).min / 2)
        return bias.to(dtype)

    def attend(self, q, k, v, prepared, dropout_p: float = 0.0):
        if isinstance(prepared, torch.Tensor):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=prepared, dropout_p=dropout_p)
        inputs, dtype = prepared
        b, h, q_len, _ = q.shape
        kv = k.shape[2]
        rows, out = chunk_rows(b * h, q_len, kv), []
        for i in range(0, q_len, rows):
            end = min(q_len, i + rows)
            keys = kv - q_len + end                 # causal: no query of this chunk sees a later key
            out.append(F.scaled_dot_product_attention(q[:, :, i:end], k[:, :, :keys], v[:, :, :keys],
                                                      attn_mask=self.bias(inputs, dtype, i, end, keys),
                                                      dropout_p=dropout_p))
        return torch.cat(out, dim=2)


ATTENTION_BACKENDS: dict[str, AttentionBackend] = {Kernel.EAGER: EagerAttention(), Kernel.SDPA: SdpaAttention()}


def register_attention_backend(backend: AttentionBackend) -> None:
    """Add a kernel (e.g. flash-attn) under backend.name; knobs.attention then selects it."""
    ATTENTION_BACKENDS[backend.name] = backend


# ----------------------------------------------------------------------------------------------
# The network
# ----------------------------------------------------------------------------------------------

def bloom_gelu(x: torch.Tensor) -> torch.Tensor:
    # BLOOM's tanh approximation, with HF's constants and operation order (not erf GELU).
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Attention(nn.Module):
    def __init__(self, config: BloomConfig):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x, residual, attend: Attend, cache: KVCache | None, layer: int):
        b, q_len, _ = x.shape
        # The fused projection's rows are laid out (head, {q,k,v}, dim), not ({q,k,v}, head, dim).
        qkv = self.query_key_value(x).view(b, q_len, self.n_head, 3, self.head_dim)
        q, k, v = (qkv[..., i, :].transpose(1, 2) for i in range(3))                 # [B, H, q, D]
        if cache is not None:
            k, v = cache.write(layer, k, v)                                          # [B, H, kv, D]
        context = attend(q, k, v).permute(0, 2, 1, 3).reshape(b, q_len, self.n_head * self.head_dim)
        return residual + self.dropout(self.dense(context))


class MLP(nn.Module):
    def __init__(self, config: BloomConfig):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, 4 * config.hidden_size)
        self.dense_4h_to_h = nn.Linear(4 * config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x, residual):
        return residual + self.dropout(self.dense_4h_to_h(bloom_gelu(self.dense_h_to_4h(x))))


class Block(nn.Module):
    def __init__(self, config: BloomConfig):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.self_attention = Attention(config)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)
        self.residual_after_norm = config.apply_residual_connection_post_layernorm

    def forward(self, x, attend: Attend, cache: KVCache | None, layer: int):
        h = self.input_layernorm(x)
        x = self.self_attention(h, h if self.residual_after_norm else x, attend, cache, layer)
        h = self.post_attention_layernorm(x)
        return self.mlp(h, h if self.residual_after_norm else x)


class Bloom(nn.Module):
    """Embeddings -> blocks -> final norm -> logits (lm_head tied to the embeddings unless configured)."""

    def __init__(self, config: BloomConfig):
        super().__init__()
        self.config = config
        # Filled as nn.Embedding fills it, except on the meta device, where loading builds the network: there its
        # normal_ imports torch._dynamo, 1.4 s of every SeqGPT load on the CPU VM, for numbers nobody reads.
        weight = torch.empty(config.vocab_size, config.hidden_size)
        if weight.device.type != "meta":
            nn.init.normal_(weight)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, _weight=weight)
        self.word_embeddings_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.lm_head = None if config.tie_word_embeddings else \
            nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.checkpointing = False          # gradient checkpointing of the blocks (training only)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        c, p = self.config, self.word_embeddings.weight
        return KVCache(allocate(c.n_layer, batch, c.n_head, capacity, c.head_dim, p.dtype, p.device))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: KVCache | None = None,
                attention: str = Kernel.EAGER, last_only: bool = True, keep: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids [B, q] (the new tokens); attention_mask [B, cached + q], 1 = real token, 0 = pad.

        Returns logits [B, 1, V] for the last position (or [B, q, V]), in the model dtype. keep [B, q]
        bool (training): logits [N, V] of those positions only, in row-major order; a full [B, q, V]
        would be the largest tensor of a training step."""
        if attention not in ATTENTION_BACKENDS:
            raise ValueError(f"unknown attention backend {attention!r}; have {', '.join(ATTENTION_BACKENDS)}")
        backend = ATTENTION_BACKENDS[attention]
        x = self.embed(input_ids)
        inputs = AttentionInputs.from_mask(attention_mask, input_ids.shape[1],
                                           alibi_slopes(self.config.n_head, x.device))
        prepared = backend.prepare(inputs, x.dtype)

        dropout_p = self.config.attention_dropout if self.training else 0.0
        if dropout_p and backend.name not in (Kernel.EAGER, Kernel.SDPA):
            raise ValueError(f"attention dropout in training needs the eager or sdpa backend, not {backend.name!r}")

        def attend(q, k, v):
            if dropout_p:
                return backend.attend(q, k, v, prepared, dropout_p=dropout_p)
            return backend.attend(q, k, v, prepared)

        x = self.blocks(x, attend, cache)
        if cache is not None:
            cache.advance(input_ids.shape[1])
        if keep is not None:
            x = x[keep]
        elif last_only:
            x = x[:, -1:]
        return self.logits(x)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.word_embeddings_layernorm(self.word_embeddings(input_ids))

    def decode(self, input_ids: torch.Tensor, cache, attend: Attend) -> torch.Tensor:
        """Hidden states [B, q, hidden] through every block with a caller's cache and attention (the
        slot pool's shared-prompt layout, shared_prompt.py, which needs no mask or backend)."""
        return self.blocks(self.embed(input_ids), attend, cache)

    def blocks(self, x: torch.Tensor, attend: Attend, cache) -> torch.Tensor:
        for layer, block in enumerate(self.h):
            if self.checkpointing and self.training and torch.is_grad_enabled():
                # Activations are recomputed in backward (the RNG state too, so dropout masks repeat).
                x = torch.utils.checkpoint.checkpoint(block, x, attend, cache, layer, use_reentrant=False)
            else:
                x = block(x, attend, cache, layer)
        return x

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm and the (tied) head: hidden [..., hidden] -> logits [..., V] in the model dtype."""
        return F.linear(self.ln_f(x), self.word_embeddings.weight if self.lm_head is None else self.lm_head.weight)
