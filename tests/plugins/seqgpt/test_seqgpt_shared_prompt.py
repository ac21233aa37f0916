"""The slot pool's shared-prompt layout (shared_prompt.py): each prompt kept once for all its beams,
with the same logits as one row per beam and the tokens one prompt at a time gets."""
import math

import pytest
import torch

from plugins.seqgpt.continuous import RowLayout, SlotPool
from plugins.seqgpt.generation import GenerationSettings
from plugins.seqgpt.graphs import DecodeGraphs
from plugins.seqgpt.shared_prompt import SharedPromptLayout, attend
from tests.plugins.seqgpt.test_seqgpt_continuous import MAX_NEW, alone, mixed_prompts, pooled  # noqa: F401


def test_attend_equals_attention_over_each_rows_own_copy_of_its_prompt():
    torch.manual_seed(0)
    items, beams, heads, dim, prompt, generated = 3, 4, 2, 8, 7, 5
    rows = items * beams
    q = torch.randn(rows, heads, 1, dim)
    kp, vp = torch.randn(items, heads, prompt, dim), torch.randn(items, heads, prompt, dim)
    kg, vg = torch.randn(rows, heads, generated, dim), torch.randn(rows, heads, generated, dim)
    bias = torch.randn(items, heads, 1, prompt + generated)
    bias[0, :, :, :3] = torch.finfo(torch.float32).min / 2          # masked keys: left pads of item 0
    got = attend(q, (kp, kg), (vp, vg), bias, beams)
    # Each row alone: its item's prompt copied in front of its own tokens, one softmax.
    k = torch.cat([kp.repeat_interleave(beams, 0), kg], dim=2)
    v = torch.cat([vp.repeat_interleave(beams, 0), vg], dim=2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dim) + bias.repeat_interleave(beams, 0)
    assert torch.allclose(got, torch.softmax(scores, -1) @ v, atol=1e-6)


def test_only_the_eager_backend_keeps_a_row_per_beam(network):
    settings = GenerationSettings(num_beams=4, max_new_tokens=MAX_NEW)
    assert isinstance(SlotPool(network, 2, 64, settings, "eager").layout, RowLayout)
    shared = SlotPool(network, 2, 64, settings, "sdpa").layout
    assert isinstance(shared, SharedPromptLayout)
    c = network.config
    # The prompt once per item (2 x 64 columns), each of the 8 rows its generated columns only.
    assert shared.prompts.shape == (c.n_layer, 2, 2, c.n_head, 64, c.head_dim)
    assert shared.generated.shape == (c.n_layer, 2, 8, c.n_head, MAX_NEW, c.head_dim)


def test_every_steps_logits_equal_the_row_per_beam_layouts(network, mixed_prompts, monkeypatch):  # noqa: F811
    """fp32, beams reordered by the search each step, slots refilled: active rows' logits agree."""
    settings = GenerationSettings(num_beams=4, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    seen = {RowLayout: [], SharedPromptLayout: []}

    def recording(layout_class):
        real = layout_class.logits

        def logits(layout, network, search, start, end, attention):
            out = real(layout, network, search, start, end, attention)
            active = (~search.done).repeat_interleave(layout.beams)
            seen[layout_class].append(torch.where(active[:, None], out.float(), 0.0))
            return out
        monkeypatch.setattr(layout_class, "logits", logits)
    recording(RowLayout)
    recording(SharedPromptLayout)
    rows = pooled(network, mixed_prompts, settings, 3, "eager")
    shared = pooled(network, mixed_prompts, settings, 3, "sdpa")
    assert shared == rows
    assert len(seen[RowLayout]) == len(seen[SharedPromptLayout]) > MAX_NEW
    for a, b in zip(seen[RowLayout], seen[SharedPromptLayout]):
        assert torch.allclose(a, b, atol=1e-4, rtol=0)


@pytest.mark.parametrize("static", [False, True], ids=["plain", "graph-steps"])
@pytest.mark.parametrize("num_beams", [1, 2, 4])
@pytest.mark.parametrize("repetition_penalty", [1.0, 2.0])
def test_a_shared_prompt_pool_gives_each_prompt_its_eager_tokens_alone(network, mixed_prompts, static,  # noqa: F811
                                                                         num_beams, repetition_penalty):
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=repetition_penalty)
    graphs = DecodeGraphs(capture=False) if static else None
    assert pooled(network, mixed_prompts, settings, 3, "sdpa", graphs=graphs) == alone(network, mixed_prompts,
                                                                                        settings)
