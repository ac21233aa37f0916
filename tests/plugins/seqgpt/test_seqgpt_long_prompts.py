"""Long prompts: attention in query chunks (never a [B, H, L, L] tensor), prefill once per prompt for
all its beams, beam reordering in place."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from plugins.seqgpt import modeling
from plugins.seqgpt.generation import EncodedPrompt, GenerationSettings, generate
from plugins.seqgpt.graphs import DecodeGraphs
from tests.plugins.seqgpt.test_seqgpt_modeling import ATOL


class LargestTensor(TorchDispatchMode):
    """The most elements any operation produced while active."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.numel = max([self.numel] + [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)])
        return out


@pytest.fixture
def few_rows_per_chunk(monkeypatch, network):
    """A score budget of 3 query rows per chunk for a 5 x 16 padded batch (16 heads)."""
    monkeypatch.setattr(modeling, "SCORE_BUDGET", 5 * network.config.n_head * 16 * 3)


def test_chunked_eager_attention_gives_the_same_logits(network, tokenizer, reference_prompts, monkeypatch):
    batch = tokenizer(reference_prompts, return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape[1] == 16
    with torch.no_grad():
        whole = network(ids, mask, last_only=False)
        monkeypatch.setattr(modeling, "SCORE_BUDGET", 5 * network.config.n_head * 16 * 3)
        chunked = network(ids, mask, last_only=False)
    real = mask.bool()
    torch.testing.assert_close(chunked[real], whole[real], rtol=1e-4, atol=ATOL)


def test_chunked_sdpa_attention_gives_the_same_logits(network, tokenizer, reference_prompts, few_rows_per_chunk):
    batch = tokenizer(reference_prompts, return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        eager = network(ids, mask, last_only=False)
        chunked = network(ids, mask, last_only=False, attention="sdpa")
    real = mask.bool()
    torch.testing.assert_close(chunked[real], eager[real], rtol=1e-4, atol=ATOL)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_a_long_prompt_never_materialises_full_attention_scores(network, monkeypatch, attention):
    length, heads = 320, network.config.n_head
    ids = torch.randint(5, 400, (1, length))
    monkeypatch.setattr(modeling, "SCORE_BUDGET", heads * length * 32)       # 32 query rows per chunk
    with torch.no_grad(), LargestTensor() as largest:
        network(ids, torch.ones_like(ids), attention=attention)
    assert largest.numel < heads * length * length // 4


@pytest.mark.parametrize("static", [False, True])
def test_long_prompt_beams_with_chunked_prefill_give_the_unchunked_tokens(network, monkeypatch, static):
    torch.manual_seed(1)
    prompts = [EncodedPrompt(tuple(torch.randint(5, 400, (n,)).tolist())) for n in (200, 150)]
    settings = GenerationSettings(num_beams=4, max_new_tokens=12, repetition_penalty=2.0)
    expected = generate(network, prompts, settings, "sdpa").tokens
    monkeypatch.setattr(modeling, "SCORE_BUDGET", network.config.n_head * 200 * 24)
    graphs = DecodeGraphs(capture=False) if static else None
    assert generate(network, prompts, settings, "sdpa", graphs=graphs).tokens == expected


def test_the_prompt_is_prefilled_once_for_all_its_beams(network, tokenizer, reference_prompts, monkeypatch):
    fed = []
    forward = modeling.Bloom.forward

    def counting(self, input_ids, *args, **kwargs):
        fed.append(tuple(input_ids.shape))
        return forward(self, input_ids, *args, **kwargs)
    monkeypatch.setattr(modeling.Bloom, "forward", counting)
    prompts = [EncodedPrompt(tuple(tokenizer(p)["input_ids"])) for p in reference_prompts[:2]]
    generate(network, prompts, GenerationSettings(num_beams=4, max_new_tokens=3))
    assert fed[0] == (2, max(len(p.ids) for p in prompts))          # 2 prompts, not 2 x 4 beams
    assert all(shape == (8, 1) for shape in fed[1:])
