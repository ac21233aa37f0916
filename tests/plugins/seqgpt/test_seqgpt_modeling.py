"""Our BLOOM against Hugging Face's BloomForCausalLM, and the attention backends against each other."""
import pytest
import torch

from plugins.seqgpt.modeling import ATTENTION_BACKENDS, alibi_slopes

# The fixture's logits reach ~5; summing in another order moves fp32 values by ~1e-6 there.
ATOL = 2e-5


@pytest.fixture(scope="module")
def padded_batch(tokenizer, reference_prompts):
    batch = tokenizer(reference_prompts, return_tensors="pt", padding=True)
    assert (batch["attention_mask"] == 0).any()          # the batch is really left-padded
    return batch["input_ids"], batch["attention_mask"]


def test_eager_logits_equal_hugging_face_bit_for_bit_on_a_left_padded_batch(network, hf_model, padded_batch):
    ids, mask = padded_batch
    with torch.no_grad():
        ours = network(ids, mask, last_only=False)
        reference = hf_model(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert torch.equal(ours[real], reference[real])


def test_a_padded_row_matches_the_same_prompt_alone(network, tokenizer, reference_prompts):
    alone = tokenizer(reference_prompts[2:3], return_tensors="pt")
    padded = tokenizer(reference_prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        a = network(alone["input_ids"], alone["attention_mask"])[0]
        b = network(padded["input_ids"], padded["attention_mask"])[2]
    torch.testing.assert_close(a, b, rtol=0, atol=ATOL)


@pytest.mark.parametrize("n_head", [16, 12, 6])
def test_alibi_slopes_match_hugging_face_for_any_head_count(n_head):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    mask = torch.ones(1, 2, dtype=torch.long)
    reference = build_alibi_tensor(mask, n_head, torch.float32).reshape(n_head, 2)[:, 1]   # slope * position 1
    assert torch.equal(alibi_slopes(n_head), reference)


def test_sdpa_backend_matches_eager(network, padded_batch):
    ids, mask = padded_batch
    with torch.no_grad():
        eager = network(ids, mask, last_only=False, attention="eager")
        sdpa = network(ids, mask, last_only=False, attention="sdpa")
    assert not sdpa.isnan().any()                        # fully masked pad rows stay finite
    real = mask.bool()
    torch.testing.assert_close(sdpa[real], eager[real], rtol=1e-4, atol=ATOL)


def test_kv_cache_decoding_matches_full_recompute(network, padded_batch):
    ids, mask = padded_batch
    follow = torch.tensor([[5, 17, 40]] * ids.shape[0])
    full_ids = torch.cat([ids, follow], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(follow)], dim=1)
    for attention in ATTENTION_BACKENDS:
        with torch.no_grad():
            full = network(full_ids, full_mask, last_only=False, attention=attention)
            cache = network.new_cache(ids.shape[0], full_ids.shape[1])
            steps = [network(ids, mask, cache, attention)]
            for j in range(follow.shape[1]):
                steps.append(network(follow[:, j:j + 1], full_mask[:, :ids.shape[1] + j + 1], cache, attention))
        for j, step in enumerate(steps):
            torch.testing.assert_close(step[:, 0], full[:, ids.shape[1] - 1 + j], rtol=1e-5, atol=ATOL)


def test_cache_rows_can_be_reordered_like_beams_in_place(network, padded_batch):
    ids, mask = padded_batch
    order = torch.tensor([2, 0, 0, 1, 4])
    with torch.no_grad():
        cache = network.new_cache(ids.shape[0], ids.shape[1] + 1)
        network(ids, mask, cache)
        buffer = cache.buffer
        cache.reorder(order, 0, cache.length)
        assert cache.buffer is buffer                    # no second cache
        token = torch.full((len(order), 1), 9)
        step = network(token, torch.cat([mask[order], torch.ones_like(token)], 1), cache)
        full = network(torch.cat([ids[order], token], 1), torch.cat([mask[order], torch.ones_like(token)], 1))
    torch.testing.assert_close(step, full, rtol=1e-5, atol=ATOL)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_stays_finite_and_close_on_a_padded_batch(hf_checkpoint, padded_batch, dtype):
    from plugins.seqgpt.loading import load_network
    ids, mask = padded_batch
    reference = load_network(hf_checkpoint)
    low = load_network(hf_checkpoint).to(dtype)
    real = mask.bool()
    with torch.no_grad():
        expected = reference(ids, mask, last_only=False)[real]
        for attention in ATTENTION_BACKENDS:
            got = low(ids, mask, last_only=False, attention=attention).float()
            assert got.isfinite().all()
            # reduced precision moves logits by a few hundredths of their range
            assert (got[real] - expected).abs().max() < 0.05 * expected.abs().max()
