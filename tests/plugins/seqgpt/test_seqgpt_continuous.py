"""Continuous batching (continuous.py): a refilled slot pool gives every prompt the tokens it gets
alone through `generate`, whatever its neighbours, slot or admission time."""
import pytest

from plugins.seqgpt.continuous import SlotPool, stream_generate
from plugins.seqgpt.generation import EncodedPrompt, GenerationSettings, generate
from plugins.seqgpt.graphs import DecodeGraphs
from plugins.seqgpt.prompting import prompt_text
from tests.plugins.seqgpt.conftest import TEXTS

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


@pytest.mark.parametrize("static", [False, True], ids=["plain", "graph-steps"])
def test_a_prompt_longer_than_the_pool_gets_a_bigger_pool_after_the_rest_drain(network, mixed_prompts, static,
                                                                                 monkeypatch):
    """Shortest first: the first pool is sized for short prompts, so later ones need a new one."""
    ordered = sorted(mixed_prompts, key=lambda p: len(p.ids))
    settings = GenerationSettings(num_beams=2, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    capacities, real_init = [], SlotPool.__init__

    def init(pool, network, items, prompt_capacity, *args, **kwargs):
        capacities.append(prompt_capacity)
        real_init(pool, network, items, prompt_capacity, *args, **kwargs)
    monkeypatch.setattr(SlotPool, "__init__", init)
    graphs = DecodeGraphs(capture=False, keep=4) if static else None
    assert pooled(network, ordered, settings, 2, graphs=graphs) == alone(network, ordered, settings)
    assert len(capacities) > 1 and capacities == sorted(capacities)
    if static:
        assert len(graphs.runs) == 1                              # the smaller pools were freed


@pytest.mark.parametrize("num_beams", [1, 4])
def test_the_pool_feeds_exactly_the_tokens_one_prompt_at_a_time_feeds(network, mixed_prompts, num_beams):
    """Empty and finished slots are stepped but not counted: tokens_fed stays honest."""
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW)
    fed = []
    pooled(network, mixed_prompts, settings, 4, on_fed=fed.append)
    assert sum(fed) == sum(generate(network, [p], settings).tokens_fed for p in mixed_prompts)


def test_sdpa_pool_gives_the_eager_tokens(network, mixed_prompts):
    settings = GenerationSettings(num_beams=4, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    got = pooled(network, mixed_prompts, settings, 3, "sdpa", graphs=DecodeGraphs(capture=False))
    assert got == alone(network, mixed_prompts, settings)


def test_prompts_finish_out_of_order_and_slots_are_refilled_while_others_run(network, mixed_prompts, monkeypatch):
    settings = GenerationSettings(num_beams=2, max_new_tokens=MAX_NEW)
    admitted, real_admit = [], SlotPool.admit

    def admit(pool, slots, prompts):
        admitted.append(len(slots))
        return real_admit(pool, slots, prompts)
    monkeypatch.setattr(SlotPool, "admit", admit)
    order = [key for key, _ in stream_generate(network, enumerate(mixed_prompts), 3, settings)]
    assert sorted(order) == list(range(len(mixed_prompts))) and order != sorted(order)
    assert admitted[0] == 3 and len(admitted) > len(mixed_prompts) // 3    # refilled one or two at a time


def test_a_bad_prompt_is_an_error_not_a_hang(network):
    settings = GenerationSettings(num_beams=1, max_new_tokens=4)
    pool = SlotPool(network, 2, 64, settings, "eager")
    with pytest.raises(ValueError, match="does not fit"):
        pool.admit([0], [EncodedPrompt(tuple(range(5, 70)))])


@pytest.mark.parametrize("num_beams", [1, 4])
def test_the_prompts_end_at_different_steps_so_slots_free_up_one_by_one(network, mixed_prompts, num_beams):
    lengths = [len(t) for t in alone(network, mixed_prompts, GenerationSettings(num_beams=num_beams,
                                                                                max_new_tokens=MAX_NEW))]
    assert len(set(lengths)) >= 3 and max(lengths) == MAX_NEW


@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_refilled_pool_gives_hugging_face_generate_one_prompt_at_a_time(network, hf_model, tokenizer,
                                                                          reference_prompts, num_beams):
    from tests.plugins.seqgpt.test_seqgpt_generation import hf_tokens
    prompts = [EncodedPrompt(tuple(tokenizer(p)["input_ids"])) for p in reference_prompts]
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=24, repetition_penalty=2.0)
    expected = [hf_tokens(hf_model, tokenizer, [p], num_beams=num_beams, repetition_penalty=2.0)[0]
                for p in reference_prompts]
    assert pooled(network, prompts, settings, 2, graphs=DecodeGraphs(capture=False)) == expected
