"""Continuous batching (continuous.py): a refilled slot pool gives every prompt the tokens it gets
alone through `generate`, whatever its neighbours, slot or admission time."""
import pytest
import torch

from plugins.seqgpt.continuous import SlotPool, stream_generate
from plugins.seqgpt.generation import EncodedPrompt, GenerationSettings, generate
from plugins.seqgpt.graphs import DecodeGraphs
from plugins.seqgpt.prompting import prompt_text
from tests.seqgpt.conftest import TEXTS

MAX_NEW = 20


@pytest.fixture(scope="module")
def mixed_prompts(tokenizer, reference_prompts):
    """13 prompts from 3 to ~200 tokens, some with the PAD penalty flag a padded reference batch sets."""
    texts = [prompt_text(TEXTS["ner_zh"] * n, "ext", ["人物", "地点"]) for n in (1, 4, 7)]
    texts += [prompt_text(TEXTS["bank"] * n, "cls", ["a", "b", "c"]) for n in (1, 9)]
    texts += reference_prompts + [prompt_text("我", "ext", ["x"]), "输", prompt_text(TEXTS["moon"] * 3, "cls", ["p"])]
    ids = [tuple(tokenizer(t)["input_ids"]) for t in texts]
    return [EncodedPrompt(i, penalize_pad=n % 3 == 1) for n, i in enumerate(ids)]


def alone(network, prompts, settings, attention="eager"):
    return [generate(network, [p], settings, attention).tokens[0] for p in prompts]


def pooled(network, prompts, settings, items, attention="eager", graphs=None, **options):
    out = dict((key, done.tokens()) for key, done in stream_generate(
        network, enumerate(prompts), items, settings, attention, graphs=graphs, **options))
    return [out[i] for i in range(len(prompts))]


@pytest.mark.parametrize("static", [False, True], ids=["plain", "graph-steps"])
@pytest.mark.parametrize("num_beams", [1, 2, 4])
@pytest.mark.parametrize("repetition_penalty", [1.0, 2.0])
def test_a_refilled_pool_gives_each_prompt_its_tokens_alone(network, mixed_prompts, static, num_beams,
                                                            repetition_penalty):
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=repetition_penalty)
    graphs = DecodeGraphs(capture=False) if static else None
    assert pooled(network, mixed_prompts, settings, 3, graphs=graphs) == alone(network, mixed_prompts, settings)
