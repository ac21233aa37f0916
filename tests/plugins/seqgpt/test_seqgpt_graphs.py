"""The memory-pool path (static KV cache, CUDA-graph decode steps) run without capture on the CPU:
its logic must give the plain path's tokens, token for token."""
import pytest
import torch

from plugins.seqgpt.generation import GenerationSettings, generate
from plugins.seqgpt.graphs import DecodeGraphs, row_bucket, spans
from tests.plugins.seqgpt.test_seqgpt_generation import MAX_NEW, encode, hf_tokens


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("num_beams", [1, 2, 4])
@pytest.mark.parametrize("repetition_penalty", [1.0, 2.0])
def test_static_steps_give_the_plain_paths_tokens(network, tokenizer, reference_prompts, attention, num_beams,
                                                  repetition_penalty):
    # 5 prompts pad to a bucket of 8 rows; 24 new tokens cross the 16-token span boundary.
    prompts = encode(tokenizer, reference_prompts)
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=repetition_penalty)
    plain = generate(network, prompts, settings, attention)
    static = generate(network, prompts, settings, attention, graphs=DecodeGraphs(capture=False))
    assert static.tokens == plain.tokens
    assert static.tokens_fed == plain.tokens_fed


@pytest.mark.parametrize("num_beams", [1, 4])
def test_static_steps_equal_hugging_face_generate(network, hf_model, tokenizer, reference_prompts, num_beams):
    expected = hf_tokens(hf_model, tokenizer, reference_prompts, num_beams=num_beams, repetition_penalty=2.0)
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    got = generate(network, encode(tokenizer, reference_prompts), settings, graphs=DecodeGraphs(capture=False))
    assert got.tokens == expected


def test_a_reused_static_run_is_reset_between_batches(network, tokenizer, reference_prompts):
    """One run (same buckets) serves different batches; nothing of the previous batch leaks."""
    graphs = DecodeGraphs(capture=False)
    settings = GenerationSettings(num_beams=4, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    first, second = encode(tokenizer, reference_prompts[:3]), encode(tokenizer, reference_prompts[2:])
    generate(network, first, settings, graphs=graphs)
    again = generate(network, second, settings, graphs=graphs)
    assert len(graphs.runs) == 1                          # 3 prompts and 3 prompts: one bucket
    assert again.tokens == generate(network, second, settings).tokens


def test_runs_are_keyed_by_bucket_and_the_oldest_is_freed(network, tokenizer, reference_prompts):
    graphs = DecodeGraphs(capture=False, keep=2)
    prompts = encode(tokenizer, reference_prompts)
    for n in (1, 2, 3, 4):                               # buckets 1, 2, 4, 4
        generate(network, prompts[:n], GenerationSettings(num_beams=1, max_new_tokens=4), graphs=graphs)
    assert [key[3] for key in graphs.runs] == [2, 4]


def test_buckets_and_spans():
    assert [row_bucket(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
    assert spans(128) == [16, 32, 64, 128] and spans(24) == [16, 24] and spans(3) == [3]


def test_loaded_model_with_the_cuda_graphs_knob_gives_the_same_results(loaded):
    from tests.plugins.seqgpt.test_seqgpt_family import SETTINGS, documents
    plain = [r.to_json() for r in loaded.extract(documents(), **SETTINGS)]
    loaded.knobs.cuda_graphs = True
    assert [r.to_json() for r in loaded.extract(documents(), **SETTINGS)] == plain
    assert loaded.graphs.runs                                     # the static path really ran


def test_a_static_step_takes_the_new_tokens_own_position_not_the_last_columns():
    """In a static cache the new token is followed by masked, unwritten columns; ALiBi distances must
    still be measured from the new token (SDPA's relative bias keeps fp16 accurate that way)."""
    from plugins.seqgpt.modeling import AttentionInputs, alibi_slopes
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]])   # pads, real keys, unwritten
    assert AttentionInputs.from_mask(mask, 1, alibi_slopes(16)).query_positions.tolist() == [[2], [6]]


@pytest.mark.parametrize("num_beams", [1, 4])
def test_static_sdpa_steps_give_the_fp32_eager_tokens(network, tokenizer, reference_prompts, num_beams):
    """The optimized path short of capture (static shapes, sdpa) against the fp32 eager reference directly."""
    prompts = encode(tokenizer, reference_prompts)
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    static = generate(network, prompts, settings, "sdpa", graphs=DecodeGraphs(capture=False))
    assert static.tokens == generate(network, prompts, settings, "eager").tokens
