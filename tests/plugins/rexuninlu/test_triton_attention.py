"""The fused Triton kernel against the eager attention, run by Triton's CPU interpreter."""
import pytest
import torch

from plugins.rexuninlu import triton_attention
from plugins.rexuninlu.modeling import Structure, attend
from plugins.rexuninlu.scoring import isolation_mask

pytestmark = pytest.mark.skipif(not triton_attention.available(), reason="triton is not installed")


def test_kernel_matches_eager_attention_on_packed_rows(rex_model):
    from plugins.rexuninlu.pipeline import document_run
    torch.manual_seed(0)
    docs = [("北大西洋议会春季会议在巴塞罗那闭幕", {"人物": None, "地点": None}),
            ("中央电视台由张三创办", {"组织机构": {"创始人(人物)": None, "简称": None}}),
            ("[CLASSIFY]很好看", {"正向": None, "负向": None})]
    windows = [document_run(rex_model.prompter, t, s).send(None)[0] for t, s in docs]
    p = rex_model.scorer.pack([[windows[0], windows[1]], [windows[2]]])     # a packed row and a padded one
    B, L = p.ids.shape
    H, D, S = 2, 16, 256
    q, k, v = (torch.randn(B, H, L, D) for _ in range(3))
    c2p, p2c = torch.randn(B, H, L, 2 * S), torch.randn(B, H, L, 2 * S)
    scale = 1 / (3 * D) ** 0.5
    rel_idx = (p.positions[:, :, None] - p.positions[:, None, :] + S).clamp(0, 2 * S - 1)
    eager = attend(q, k, v, c2p, p2c, Structure(p.positions, rel_idx, isolation_mask(p)), scale, "eager")
    codes = triton_attention.kernel_codes(p.positions, p.groups, p.types, p.segments)
    fused = attend(q, k, v, c2p, p2c, Structure(p.positions, codes=codes), scale, "triton")
    real = p.valid[:, None, :, None].expand_as(eager)
    assert torch.allclose(fused[real], eager[real], atol=1e-4)
    assert fused[~real].abs().max() == 0                 # padding rows: zeros, like XSoftmax


@pytest.mark.parametrize("tiles", [(16, 16), (64, 32)])          # L = 96: a multiple of both tiles, or ragged
def test_key_tiles_of_other_windows_and_padding_are_skipped_without_changing_the_output(tiles):
    # Small tiles over a row packed with three windows and padding: most (query tile, key tile) pairs
    # meet another window, and the kernel skips them; what it computes must still be the eager attention.
    from types import SimpleNamespace
    torch.manual_seed(1)
    lengths = (20, 37, 23)
    segments = torch.tensor([[s for s, n in enumerate(lengths) for _ in range(n)] + [-1] * 16])
    positions = torch.tensor([[i for n in lengths for i in range(n)] + [0] * 16])
    groups = torch.where(positions % 7 == 3, 1, -1) * (segments >= 0)        # a few prompt tokens, text global
    types = torch.where(groups == 1, 1 + positions % 2, 0)
    B, L = segments.shape
    H, D, S = 2, 16, 64
    q, k, v = (torch.randn(B, H, L, D) for _ in range(3))
    c2p, p2c = torch.randn(B, H, L, 2 * S), torch.randn(B, H, L, 2 * S)
    scale = 1 / (3 * D) ** 0.5
    mask = isolation_mask(SimpleNamespace(groups=groups, types=types, segments=segments))
    rel_idx = (positions[:, :, None] - positions[:, None, :] + S).clamp(0, 2 * S - 1)
    eager = attend(q, k, v, c2p, p2c, Structure(positions, rel_idx, mask), scale, "eager")
    codes = triton_attention.kernel_codes(positions, groups, types, segments)
    assert codes.key_lo[0, :20].tolist() == [0] * 20 and codes.key_hi[0, 20:57].tolist() == [57] * 37
    assert codes.key_lo[0, 80:].tolist() == [L] * 16 and codes.key_hi[0, 80:].tolist() == [0] * 16

    def run(codes):
        return triton_attention.disentangled_attention(q, k, v, c2p, p2c, codes, scale, block_m=tiles[0],
                                                       block_n=tiles[1])

    fused = run(codes)
    real = (segments >= 0)[:, None, :, None].expand_as(eager)
    assert torch.allclose(fused[real], eager[real], atol=1e-4)
    assert fused[~real].abs().max() == 0
    # Lossless, not merely close: every key tile visited (whole rows as the range) gives the same bits.
    whole = codes._replace(key_lo=torch.zeros_like(codes.key_lo), key_hi=torch.full_like(codes.key_hi, L))
    assert torch.equal(run(whole), fused)


def test_segments_that_decrease_along_a_row_are_refused():
    # The key ranges assume windows end to end with padding after them (scoring.fill); anything else
    # would silently skip allowed keys.
    codes = torch.zeros(1, 6, dtype=torch.long)
    with pytest.raises(AssertionError, match="must not decrease"):
        triton_attention.kernel_codes(codes, codes, codes, torch.tensor([[0, 0, 1, 1, 0, -1]]))
    with pytest.raises(AssertionError, match="must not decrease"):
        triton_attention.kernel_codes(codes, codes, codes, torch.tensor([[0, 0, -1, 1, 1, 1]]))


def test_tables_with_any_batch_head_row_strides_give_exactly_what_contiguous_ones_give():
    # modeling.relative_tables hands over permuted views of [H, B·L, 2S] GEMM outputs; the kernel must
    # read them in place, each table by its own strides, and a table whose rows are not contiguous is copied.
    torch.manual_seed(2)
    B, H, L, D, S = 2, 3, 40, 16, 32
    positions = torch.arange(L).repeat(B, 1) % 17
    groups, types, segments = torch.full((B, L), -1), torch.zeros(B, L, dtype=torch.long), torch.zeros(B, L).long()
    q, k, v = (torch.randn(B, H, L, D) for _ in range(3))
    c2p = torch.randn(H, B, L, 2 * S).transpose(0, 1)                     # relative_tables' layout
    p2c = torch.randn(B, L, H, 2 * S).transpose(1, 2)                     # other strides than c2p's
    scale = 1 / (3 * D) ** 0.5
    codes = triton_attention.kernel_codes(positions, groups, types, segments)

    def run(c, p):
        return triton_attention.disentangled_attention(q, k, v, c, p, codes, scale,
                                                       block_m=16, block_n=16)

    reference = run(c2p.contiguous(), p2c.contiguous())
    assert torch.equal(run(c2p, p2c), reference)
    columns_first = c2p.transpose(-1, -2).contiguous().transpose(-1, -2)  # rows strided: the copied fallback
    assert torch.equal(run(columns_first, p2c), reference)


def test_network_on_the_triton_path_matches_eager(rex_model):
    # The whole encoder: relative_tables' strided tables through the kernel, every layer.
    from plugins.rexuninlu.pipeline import document_run
    docs = [("北大西洋议会春季会议在巴塞罗那闭幕", {"人物": None, "地点": None}),
            ("中央电视台由张三创办", {"组织机构": {"创始人(人物)": None, "简称": None}})]
    windows = [document_run(rex_model.prompter, t, s).send(None)[0] for t, s in docs]
    p = rex_model.scorer.pack([[windows[0], windows[1]], [windows[1]]])    # a packed row and a padded one
    net = rex_model.network
    try:
        with torch.no_grad():
            net.attention_backend = "triton"
            fused = net(p.ids, p.positions, None, p.valid, p.segments, (p.groups, p.types, p.segments))
            net.attention_backend = "eager"
            eager = net(p.ids, p.positions, isolation_mask(p), p.valid, p.segments)
    finally:
        net.attention_backend = "eager"
    pairs = p.valid[:, :, None] & p.valid[:, None, :]
    torch.testing.assert_close(fused[pairs], eager[pairs], atol=1e-4, rtol=1e-5)


def test_add_layer_norm_is_the_add_then_pytorchs_layer_norm():
    from plugins.rexuninlu.triton_norm import add_layer_norm
    torch.manual_seed(3)
    norm = torch.nn.LayerNorm(96, eps=1e-7)
    torch.nn.init.normal_(norm.weight)
    torch.nn.init.normal_(norm.bias)
    x, residual = torch.randn(3, 7, 96) * 3, torch.randn(3, 7, 96)
    torch.testing.assert_close(add_layer_norm(x, residual, norm), norm(x + residual), atol=2e-6, rtol=1e-6)
    wide = torch.nn.LayerNorm(100)                        # a width that is not a power of two: masked columns
    x, residual = torch.randn(5, 100), torch.randn(5, 100)
    torch.testing.assert_close(add_layer_norm(x, residual, wide), wide(x + residual), atol=2e-6, rtol=1e-6)
    keep = torch.tensor([True, False, True, True, False])  # the conv layer's valid tokens
    got = add_layer_norm(x, residual, wide, keep)
    assert torch.equal(got, add_layer_norm(x.masked_fill(~keep[:, None], 0.0), residual, wide) * keep[:, None])
    assert got[~keep].abs().max() == 0


@pytest.mark.parametrize("packed", [False, True])
def test_conv_taps_are_the_padded_unfolded_neighbours_masked_by_segment(packed):
    from plugins.rexuninlu.triton_norm import conv_taps
    torch.manual_seed(4)
    emb = torch.randn(2, 11, 24)
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, -1, -1, -1], [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4]])
    want = []
    for t in range(11):                                   # tap i of token t: emb[t + i - 1], or zero
        row = []
        for i in range(3):
            src = t + i - 1
            inside = torch.full((2,), 0 <= src < 11)
            if packed and 0 <= src < 11:
                inside &= segments[:, src] == segments[:, t]
            row.append(torch.where(inside[:, None], emb[:, min(max(src, 0), 10)], 0.0))
        want.append(torch.cat(row, -1))
    assert torch.equal(conv_taps(emb, 3, segments if packed else None), torch.stack(want, 1))


def test_rotary_parts_sums_the_terms_adds_the_bias_rotates_and_lays_out_the_bf16_parts():
    from plugins.rexuninlu.modeling import Rotary
    from plugins.rexuninlu.triton_rotary import rotary_parts
    torch.manual_seed(6)
    D = 24                                                # 24 pairs for q and k: a block with masked lanes
    rotary = Rotary(D)
    bias = torch.randn(2 * D)
    for terms in (1, 2):
        projection = torch.randn(2, 5, terms * 2 * D) * 3
        summed = sum(projection.split(2 * D, -1)) + bias
        for positions in (torch.randint(0, 500, (2, 5)), torch.arange(5).expand(2, 5)):
            q, k = rotary_parts(projection, bias, *rotary.angles(positions, torch.float32))
            want_q, want_k = (rotary(side, positions) for side in summed.split(D, -1))
            assert q.dtype == k.dtype == torch.bfloat16 and q.shape == k.shape == (2, 5, 3 * D)
            q_hi, q_lo, q_hi2 = q.split(D, -1)
            k_hi, k_hi2, k_lo = k.split(D, -1)
            assert torch.equal(q_hi, q_hi2) and torch.equal(k_hi, k_hi2)
            for high, low, want in ((q_hi, q_lo, want_q), (k_hi, k_lo, want_k)):
                assert ((high.float() - want).abs() <= want.abs() * 2 ** -7).all()   # bf16 (the interpreter truncates)
                assert ((high.float() + low.float() - want).abs() <= want.abs() * 2 ** -15 + 1e-6).all()
            logits = q.float() @ k.float().mT                 # one product over the parts: the head's q·kᵀ
            exact = want_q.double() @ want_k.double().mT
            # about 2⁻¹⁶ (split_matmul's test: < 2e-5); the interpreter truncates, twice rounding's error
            assert ((logits.double() - exact).abs().max() / exact.abs().max()).item() < 5e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_head_is_the_fp32_head_to_about_16_bits(rex_model, dtype):
    # The fused path's head (projection, kernel, product) against the plain fp32 head, from a bf16 or fp16
    # encoder output (fp16 is split into two bf16 parts as well).
    from plugins.rexuninlu.modeling import fused_head_logits
    net = rex_model.network
    torch.manual_seed(9)
    h = torch.randn(2, 30, net.config.hidden_size).to(dtype)
    positions = torch.arange(30).expand(2, 30)
    with torch.no_grad():
        fused = fused_head_logits(h, net.ffnq, net.ffnk, net.rotary_emb, positions)
        plain = net.span_logits(h.float(), positions)
    assert fused.dtype == torch.float32 and fused.shape == plain.shape
    assert ((fused - plain).abs().max() / plain.abs().max()).item() < 5e-5   # the interpreter truncates: 2 × 2⁻¹⁶


@pytest.mark.parametrize("packed", [False, True])
def test_fused_conv_layer_is_the_unfused_one(rex_model, packed):
    # Taps by conv_taps, the mask inside add_layer_norm: the unfused layer's result (fp32: GELU's erf form in both).
    conv = rex_model.network.plm.encoder.conv
    assert not conv.training                               # the fused path is inference's
    torch.manual_seed(5)
    emb, x = torch.randn(2, 12, conv.conv.in_channels), torch.randn(2, 12, conv.conv.in_channels)
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 1, -1, -1, -1], [2] * 12])
    with torch.no_grad():
        fused = conv(emb, x, segments >= 0, segments if packed else None, fused=True)
        unfused = conv(emb, x, segments >= 0, segments if packed else None)
    torch.testing.assert_close(fused, unfused, atol=2e-6, rtol=1e-6)
    assert fused[0, 9:].abs().max() == 0                  # padding: zeros, as the unfused layer's mask gives
