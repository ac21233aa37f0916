"""The flash backend's plumbing (unpadding, cu_seqlens, cache_leftpad/seqlens, ALiBi slopes) against a
stand-in flash_attn that computes what flash-attn's docstrings define, in plain torch. flash-attn
cannot run here (no CUDA); this pins what our backend passes to it."""
import pytest
import torch

from plugins.seqgpt import flash, modeling
from plugins.seqgpt.generation import GenerationSettings, generate
from plugins.seqgpt.graphs import DecodeGraphs
from tests.plugins.seqgpt.test_seqgpt_generation import MAX_NEW, encode
from tests.plugins.seqgpt.test_seqgpt_modeling import ATOL


class FakeFlashAttn:
    """flash_attn 2.6's two entry points as documented (flash_attn_interface.py): ALiBi adds
    -slope * |i + seqlen_k - seqlen_q - j|, causal masks j > i + seqlen_k - seqlen_q, and a KV-cache
    row is the keys [cache_leftpad, cache_seqlens). Unlike the real kernels it also takes fp32."""

    def __init__(self):
        self.calls = {"varlen": 0, "kvcache": 0}

    @staticmethod
    def _one_sequence(q, k, v, slopes, causal, scale):       # q [sq, H, D]; k, v [sk, H, D]
        sq, sk = q.shape[0], k.shape[0]
        scale = scale or q.shape[-1] ** -0.5
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale - slopes[:, None, None] * (i + sk - sq - j).abs()
        if causal:
            scores = scores.masked_fill(j > i + sk - sq, float("-inf"))
        return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                               softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                               block_table=None):
        self.calls["varlen"] += 1
        assert cu_seqlens_q.dtype == cu_seqlens_k.dtype == torch.int32
        assert alibi_slopes.dtype == torch.float32 and alibi_slopes.shape == (q.shape[1],)
        assert q.shape[0] == int(cu_seqlens_q[-1]) and k.shape[0] == int(cu_seqlens_k[-1])
        out = torch.full_like(q, float("nan"))
        for b in range(len(cu_seqlens_q) - 1):
            qs, qe, ks, ke = (int(x) for x in (cu_seqlens_q[b], cu_seqlens_q[b + 1], cu_seqlens_k[b],
                                                   cu_seqlens_k[b + 1]))
            assert qe - qs <= max_seqlen_q and ke - ks <= max_seqlen_k
            out[qs:qe] = self._one_sequence(q[qs:qe], k[ks:ke], v[ks:ke], alibi_slopes, causal, softmax_scale)
        return out

    def flash_attn_with_kvcache(self, q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                                softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
        self.calls["kvcache"] += 1
        assert k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
        assert cache_seqlens.dtype == cache_leftpad.dtype == torch.int32
        assert alibi_slopes.dtype == torch.float32 and alibi_slopes.shape == (q.shape[2],)
        out = torch.empty_like(q)
        for b in range(q.shape[0]):
            start, end = int(cache_leftpad[b]), int(cache_seqlens[b])
            assert 0 <= start < end <= k_cache.shape[1]
            out[b] = self._one_sequence(q[b], k_cache[b, start:end], v_cache[b, start:end], alibi_slopes, causal,
                                        softmax_scale)
        return out


@pytest.fixture
def fake(monkeypatch):
    kernels = FakeFlashAttn()
    monkeypatch.setitem(modeling.ATTENTION_BACKENDS, flash.NAME, flash.FlashAttention(kernels))
    return kernels


def test_prefill_through_varlen_matches_eager_on_a_left_padded_batch(network, tokenizer, reference_prompts, fake):
    batch = tokenizer(reference_prompts, return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        eager = network(ids, mask, last_only=False)
        fused = network(ids, mask, last_only=False, attention=flash.NAME)
    real = mask.bool()
    torch.testing.assert_close(fused[real], eager[real], rtol=1e-4, atol=ATOL)
    assert fake.calls["varlen"] == network.config.n_layer


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("static", [False, True])
def test_generation_through_the_kv_cache_kernel_gives_the_eager_tokens(network, tokenizer, reference_prompts, fake,
                                                                       num_beams, static):
    prompts = encode(tokenizer, reference_prompts)
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    graphs = DecodeGraphs(capture=False) if static else None
    assert generate(network, prompts, settings, flash.NAME, graphs=graphs).tokens == \
        generate(network, prompts, settings).tokens
    assert fake.calls["kvcache"] > 0


def test_decode_steps_match_full_recompute(network, tokenizer, reference_prompts, fake):
    batch = tokenizer(reference_prompts, return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    follow = torch.tensor([[5, 17, 40]] * ids.shape[0])
    full_mask = torch.cat([mask, torch.ones_like(follow)], dim=1)
    with torch.no_grad():
        full = network(torch.cat([ids, follow], dim=1), full_mask, last_only=False)
        cache = network.new_cache(ids.shape[0], full_mask.shape[1])
        steps = [network(ids, mask, cache, flash.NAME)]
        for j in range(follow.shape[1]):
            steps.append(network(follow[:, j:j + 1], full_mask[:, :ids.shape[1] + j + 1], cache, flash.NAME))
    for j, step in enumerate(steps):
        torch.testing.assert_close(step[:, 0], full[:, ids.shape[1] - 1 + j], rtol=1e-4, atol=ATOL)


def test_the_model_says_which_kernel_runs_and_why(loaded, monkeypatch):
    from workstation import plugins
    kernel, why = loaded.resolve_attention(flash.NAME)
    assert kernel == "sdpa" and "CUDA" in why
    ok, reason = plugins.optimizations()["flash-attention"].applies_to(loaded)
    assert ok and "runs the sdpa kernel" in reason and "flash-attn cannot run" in reason
    # Where flash-attn would import on a GPU: it runs in fp16/bf16, and fp32 falls back, saying why.
    monkeypatch.setattr(flash, "unavailable", lambda: None)
    loaded.device = "cuda:0"
    kernel, why = loaded.resolve_attention(flash.NAME)
    assert kernel == "sdpa" and "fp32" in why
    loaded.knobs.dtype = "bf16"
    assert loaded.resolve_attention(flash.NAME) == (flash.NAME, "")
