"""On a CUDA GPU only (skipped elsewhere): the continuous-batching pool with captured steps, pinned
copies and lagged done flags gives the tokens of its uncaptured steps, and in fp32 those of one
prompt at a time."""
import pytest
import torch

from plugins.seqgpt.continuous import SlotPool, stream_generate
from plugins.seqgpt.generation import GenerationSettings, generate
from plugins.seqgpt.graphs import DecodeGraphs
from tests.plugins.seqgpt.test_seqgpt_continuous import MAX_NEW, mixed_prompts  # noqa: F401 - a fixture

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def networks(hf_checkpoint):
    from plugins.seqgpt.loading import load_network
    return {dtype: load_network(hf_checkpoint, dtype).cuda() for dtype in (torch.float32, torch.float16)}


def pooled(network, prompts, settings, items, attention, graphs):
    out = {key: done.tokens() for key, done in stream_generate(network, enumerate(prompts), items, settings,
                                                                  attention, graphs=graphs)}
    return [out[i] for i in range(len(prompts))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("num_beams, penalty", [(1, 1.0), (2, 2.0), (4, 1.0), (4, 2.0)])
def test_captured_pool_steps_replay_the_uncaptured_ones(networks, mixed_prompts, dtype, attention,  # noqa: F811
                                                        num_beams, penalty, monkeypatch):
    network = networks[dtype]
    settings = GenerationSettings(num_beams=num_beams, max_new_tokens=MAX_NEW, repetition_penalty=penalty)
    uncaptured = pooled(network, mixed_prompts, settings, 3, attention, DecodeGraphs(capture=False))
    eager_steps, real_step = [], SlotPool._step

    def counted(pool, start, end):
        if not torch.cuda.is_current_stream_capturing():
            eager_steps.append((start, end))
        return real_step(pool, start, end)
    graphs = DecodeGraphs(capture=True, keep=4)
    captured_once = pooled(network, mixed_prompts, settings, 3, attention, graphs)     # captures, then replays
    monkeypatch.setattr(SlotPool, "_step", counted)
    captured = pooled(network, mixed_prompts, settings, 3, attention, graphs)          # pools reused: replays only
    assert captured == captured_once == uncaptured
    assert eager_steps == []
    if dtype == torch.float32:
        assert captured == [generate(network, [p], settings, attention).tokens[0] for p in mixed_prompts]


def test_plain_pool_on_the_gpu_gives_one_prompt_at_a_time(networks, mixed_prompts):  # noqa: F811
    settings = GenerationSettings(num_beams=4, max_new_tokens=MAX_NEW, repetition_penalty=2.0)
    network = networks[torch.float32]
    got = pooled(network, mixed_prompts, settings, 3, "eager", None)
    assert got == [generate(network, [p], settings).tokens[0] for p in mixed_prompts]
