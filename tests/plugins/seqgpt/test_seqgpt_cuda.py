"""On a CUDA GPU only (skipped elsewhere; run with CUDA_VISIBLE_DEVICES set): the captured graphs
replay the plain path's tokens, and our search matches `generate` on the GPU too."""
import pytest
import torch

from plugins.seqgpt.generation import GenerationSettings, generate
from plugins.seqgpt.graphs import DecodeGraphs
from tests.plugins.seqgpt.test_seqgpt_generation import MAX_NEW, encode

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def networks(hf_checkpoint):
    from plugins.seqgpt.loading import load_network
    return {dtype: load_network(hf_checkpoint, dtype).cuda() for dtype in (torch.float32, torch.float16)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("num_beams, penalty", [(1, 1.0), (1, 2.0), (4, 1.0), (4, 2.0)])
def test_captured_graphs_replay_the_static_steps(networks, tokenizer, reference_prompts, dtype, attention,
                                                 num_beams, penalty):
    """Capture changes nothing: the same kernels on the same shapes. Against the plain path the static
    shapes (more masked keys, padded rows) may round differently, so fp32 is compared there; in fp16
    the benchmark reports that agreement."""
    network = networks[dtype]
    prompts = encode(tokenizer, reference_prompts)
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=penalty)
    uncaptured = generate(network, prompts, settings, attention, graphs=DecodeGraphs(capture=False))
    graphs = DecodeGraphs(capture=True)
    captured = generate(network, prompts, settings, attention, graphs=graphs)
    (run,) = graphs.runs.values()
    assert set(run.graphs) == set(run.spans)                      # every step was a replay
    assert captured.tokens == uncaptured.tokens
    assert captured.tokens_fed == uncaptured.tokens_fed
    again = generate(network, prompts[::-1], settings, attention, graphs=graphs)    # the same run, reset
    assert again.tokens == generate(network, prompts[::-1], settings, attention,
                                    graphs=DecodeGraphs(capture=False)).tokens
    if dtype == torch.float32:
        assert captured.tokens == generate(network, prompts, settings, attention).tokens


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generation_equals_hugging_face_generate_on_the_gpu(networks, hf_model, tokenizer, reference_prompts,
                                                            num_beams):
    hf = hf_model.cuda()
    try:
        batch = tokenizer(reference_prompts, return_tensors="pt", padding=True).to("cuda")
        with torch.no_grad():
            out = hf.generate(**batch, do_sample=False, max_new_tokens=MAX_NEW, num_beams=num_beams,
                              repetition_penalty=2.0)
        rows = out[:, batch["input_ids"].shape[1]:].tolist()
        expected = [row[:row.index(2)] if 2 in row else row for row in rows]
    finally:
        hf.cpu()
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    prompts = encode(tokenizer, reference_prompts)
    assert generate(networks[torch.float32], prompts, settings).tokens == expected
    assert generate(networks[torch.float32], prompts, settings, graphs=DecodeGraphs(capture=True)).tokens == expected


def test_graphs_can_be_captured_again_after_clearing(networks, tokenizer, reference_prompts):
    """A cleared (or fully evicted) set of runs takes a new memory pool: the allocator retires a pool
    whose graphs are all gone, and capturing into it again fails."""
    prompts = encode(tokenizer, reference_prompts)
    settings = GenerationSettings(num_beams=1, max_new_tokens=MAX_NEW)
    graphs = DecodeGraphs(capture=True, keep=1)
    first = generate(networks[torch.float16], prompts, settings, graphs=graphs).tokens
    graphs.clear()
    assert generate(networks[torch.float16], prompts, settings, graphs=graphs).tokens == first
    generate(networks[torch.float16], prompts[:1], settings, graphs=graphs)        # evicts the only run
    assert generate(networks[torch.float16], prompts, settings, graphs=graphs).tokens == first
