"""Greedy and beam search against transformers 5.17.0 `generate` (BloomForCausalLM, fp32, CPU)."""
import pytest
import torch

from plugins.seqgpt.generation import EncodedPrompt, GenerationSettings, generate

MAX_NEW = 24


def hf_tokens(hf_model, tokenizer, prompts, **settings):
    """`generate` on one left-padded batch; each row's new tokens up to (not including) EOS."""
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf_model.generate(**batch, do_sample=False, max_new_tokens=MAX_NEW, **settings)
    rows = out[:, batch["input_ids"].shape[1]:].tolist()
    return [row[:row.index(2)] if 2 in row else row for row in rows]


def encode(tokenizer, prompts):
    """As the pipeline does: a row's PAD is penalised when it is shorter than the longest of its batch."""
    ids = [tuple(tokenizer(p)["input_ids"]) for p in prompts]
    longest = max(len(i) for i in ids)
    return [EncodedPrompt(i, penalize_pad=len(i) < longest) for i in ids]


@pytest.mark.parametrize("num_beams", [1, 2, 4])
@pytest.mark.parametrize("repetition_penalty", [1.0, 2.0])
def test_tokens_equal_hugging_face_generate_on_a_left_padded_batch(network, hf_model, tokenizer, reference_prompts,
                                                                    num_beams, repetition_penalty):
    expected = hf_tokens(hf_model, tokenizer, reference_prompts, num_beams=num_beams,
                         repetition_penalty=repetition_penalty)
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=repetition_penalty)
    assert generate(network, encode(tokenizer, reference_prompts), settings).tokens == expected


def test_the_fixture_exercises_early_eos_and_the_length_limit(hf_model, tokenizer, reference_prompts):
    lengths = [len(t) for t in hf_tokens(hf_model, tokenizer, reference_prompts, num_beams=4)]
    assert min(lengths) < MAX_NEW and max(lengths) == MAX_NEW


@pytest.mark.parametrize("num_beams", [1, 4])
def test_each_prompt_alone_equals_hugging_face_alone(network, hf_model, tokenizer, reference_prompts, num_beams):
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    for prompt in reference_prompts[:3]:
        expected = hf_tokens(hf_model, tokenizer, [prompt], num_beams=num_beams, repetition_penalty=2.0)
        assert generate(network, encode(tokenizer, [prompt]), settings).tokens == expected


@pytest.mark.parametrize("num_beams", [1, 4])
def test_batch_composition_does_not_change_a_prompts_tokens(network, tokenizer, reference_prompts, num_beams):
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    prompts = encode(tokenizer, reference_prompts)
    together = generate(network, prompts, settings).tokens
    alone = [generate(network, [p], settings).tokens[0] for p in prompts]
    reversed_ = generate(network, prompts[::-1], settings).tokens[::-1]
    assert together == alone == reversed_


def test_sdpa_generates_the_same_tokens_as_eager(network, tokenizer, reference_prompts):
    settings = GenerationSettings(num_beams=4, max_new_tokens=MAX_NEW)
    prompts = encode(tokenizer, reference_prompts)
    assert generate(network, prompts, settings, "sdpa").tokens == generate(network, prompts, settings).tokens


def test_tokens_fed_counts_real_prompt_tokens_and_decode_steps(network, tokenizer, reference_prompts):
    prompts = encode(tokenizer, reference_prompts[:1])
    g = generate(network, prompts, GenerationSettings(num_beams=1, max_new_tokens=3))
    fed_after_prefill = len(prompts[0].ids)
    assert g.tokens_fed == fed_after_prefill + min(len(g.tokens[0]) + 1, 3) - 1


@pytest.mark.parametrize("bad", [dict(num_beams=0), dict(max_new_tokens=0), dict(repetition_penalty=0.0)])
def test_settings_are_checked(bad):
    with pytest.raises(ValueError):
        GenerationSettings(**bad)
