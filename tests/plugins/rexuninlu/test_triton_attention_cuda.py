"""On a CUDA GPU only (skipped elsewhere; run with CUDA_VISIBLE_DEVICES set and TRITON_INTERPRET=0): the
compiled kernel over packed rows of real size. The interpreter tests pin the logic; these pin what the
compiler makes of it (the loop over each row block's key range)."""
import pytest
import torch

from plugins.rexuninlu import triton_attention
from plugins.rexuninlu.modeling import Structure, attend
from plugins.rexuninlu.scoring import isolation_mask

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and triton_attention.available()),
                                reason="needs a CUDA GPU and triton")


def packed_rows(B=4, L=512, seed=0):
    """Rows of windows end to end (10–300 tokens), a few prompt tokens each, padding after them."""
    g = torch.Generator().manual_seed(seed)
    segments, positions = torch.full((B, L), -1), torch.zeros(B, L, dtype=torch.long)
    slot = 0
    for b in range(B):
        at = 0
        while True:
            n = int(torch.randint(10, 300, (1,), generator=g))
            if at + n > L - 8 * b:            # each row ends with more padding than the last
                break
            segments[b, at:at + n], positions[b, at:at + n] = slot, torch.arange(n)
            slot, at = slot + 1, at + n
    groups = torch.where((positions % 9 == 4) & (positions < 40), 1, -1) * (segments >= 0)
    types = torch.where(groups == 1, 1 + positions % 2, 0)
    return positions, groups, types, segments


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_kernel_is_exact_across_its_choices_and_close_to_eager(dtype):
    positions, groups, types, segments = (t.cuda() for t in packed_rows())
    B, L = segments.shape
    H, D, S = 12, 64, 256
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, L, D, device="cuda", generator=g).to(dtype) for _ in range(3))
    c2p, p2c = (torch.randn(B, H, L, 2 * S, device="cuda", generator=g).to(dtype) for _ in range(2))
    scale = 1 / (3 * D) ** 0.5
    codes = triton_attention.kernel_codes(positions, groups, types, segments)
    whole = codes._replace(key_lo=torch.zeros_like(codes.key_lo), key_hi=torch.full_like(codes.key_hi, L))

    def run(codes, **tiles):
        return triton_attention.disentangled_attention(q, k, v, c2p, p2c, codes, scale, **tiles)

    fused = run(codes)
    assert torch.equal(run(whole), fused)                 # skipping other windows' key tiles is lossless
    mask = isolation_mask(type("P", (), {"groups": groups, "types": types, "segments": segments}))
    rel_idx = (positions[:, :, None] - positions[:, None, :] + S).clamp(0, 2 * S - 1)
    eager = attend(q.float(), k.float(), v.float(), c2p.float(), p2c.float(), Structure(positions, rel_idx, mask),
                   scale, "eager")
    real = (segments >= 0)[:, None, :, None].expand_as(eager)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(fused.float()[real], eager[real], atol=tolerance, rtol=tolerance)
    assert fused[~real].abs().max() == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_compiled_add_layer_norm_is_close_to_the_add_then_pytorchs_norm(dtype):
    from plugins.rexuninlu.triton_norm import add_layer_norm
    g = torch.Generator(device="cuda").manual_seed(1)
    norm = torch.nn.LayerNorm(768, eps=1e-7).cuda().to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(768, device="cuda", generator=g))
        norm.bias.copy_(torch.randn(768, device="cuda", generator=g))
    x, residual = (torch.randn(4, 512, 768, device="cuda", generator=g).to(dtype) for _ in range(2))
    got, want = add_layer_norm(x, residual, norm).float(), norm(x + residual).float()
    assert ((got - want).abs() <= 2 ** -7 * want.abs() + 2e-2).all()      # one bf16 step of the output, about


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backend", ["eager", "triton"])
def test_span_head_behind_a_reduced_precision_encoder_is_fp32_to_about_16_bits(rex_model, backend, dtype):
    # The split bf16 products (modeling.split_matmul) against the same head in plain fp32, on one bf16 input;
    # on the triton path with bias, rotary and split in one kernel (triton_rotary).
    import copy
    net = copy.deepcopy(rex_model.network).cuda()
    net.attention_backend = backend
    g = torch.Generator(device="cuda").manual_seed(2)
    h = torch.randn(3, 200, net.config.hidden_size, device="cuda", generator=g).to(dtype)
    positions = torch.arange(200, device="cuda").expand(3, 200)
    with torch.inference_mode():
        split = net.span_logits(h, positions)
        torch.backends.cuda.matmul.allow_tf32 = False
        plain = net.span_logits(h.float(), positions)
    assert split.dtype == torch.float32
    assert ((split - plain).abs().max() / plain.abs().max()).item() < 2e-5


def test_gelu_in_the_gemms_epilogue_is_within_a_bf16_step_of_the_erf_form(rex_model):
    import copy

    import torch.nn.functional as F
    block = copy.deepcopy(rex_model.network.plm.encoder.layer[0].intermediate).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(4, 512, block.dense.in_features, device="cuda", generator=g)
    with torch.inference_mode():
        block, x = block.to(torch.bfloat16), x.to(torch.bfloat16)
        erf, fused = F.gelu(block.dense(x)).float(), block(x, fused=True).float()     # two kernels; one
    assert ((fused - erf).abs() <= erf.abs() * 2 ** -6 + 1e-3).all()     # a bf16 step each, and 4.8e-4


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_whole_reduced_precision_stack_agrees_with_fp32_eager_on_the_released_shape(tmp_path, dtype):
    # The user's full stack (reduced precision, the Triton kernel and fused passes, CUDA graphs) against
    # plain fp32 eager: same packed batch, the released config's shape (random weights, 12 layers).
    # Stated tolerance: logits within 3 % of the largest |logit|, and every decision whose fp32 logit is
    # clear of 0 by 5 % of the largest is the same; only logits near the threshold may flip.
    from benchmarks.common import NER_SCHEMA, mixed_texts
    from plugins.rexuninlu import demo
    from plugins.rexuninlu.family import RexUniNLU
    from plugins.rexuninlu.pipeline import document_run
    from plugins.rexuninlu.scoring import run_network
    model = RexUniNLU().load(demo.write(tmp_path / "full", "full", seed=0), device="cuda")
    windows = [w for text in mixed_texts(24, seed=5) for w in document_run(model.prompter, text, NER_SCHEMA).send(None)]
    model.knobs.cuda_graphs = True                      # graph-shaped rows, run by both paths
    p = model.scorer.pack([windows[i:i + 3] for i in range(0, len(windows), 3)])
    pairs = p.valid[:, :, None] & p.valid[:, None, :]
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.inference_mode():
        model.network.attention_backend = "eager"
        fp32 = run_network(model.network, p)[pairs]
        model.set_dtype(dtype)
        model.network.attention_backend = model.knobs.attention = "triton"
        for _ in range(2):                               # capture, then replay
            stack = model.scorer.logits(p)[pairs].float()
    assert model.scorer.graph_key(p.ids.shape) in model.scorer.graphs
    top = fp32.abs().max()
    drift, clear = ((stack - fp32).abs().max() / top).item(), fp32.abs() > 0.05 * top
    flipped = ((stack > 0) != (fp32 > 0)).float().mean().item()     # on the H200: bf16 0.52 %, fp16 0.038 %
    assert drift < 0.03, f"{dtype}: logits moved {drift:.4f} of the largest |logit| (H200: bf16 0.022, fp16 0.0027)"
    assert torch.equal(stack[clear] > 0, fp32[clear] > 0), f"{dtype}: a clear decision flipped ({flipped:.3%} flipped)"
