"""The network and the batched pipeline on a tiny random checkpoint."""
import json
import math
import random
import shutil

import pytest
import torch

from contracts.domain import Document, WeightsError
from plugins.rexuninlu import loading
from plugins.rexuninlu.family import PRESETS, RexUniNLU
from plugins.rexuninlu.pipeline import document_groups, document_run
from plugins.rexuninlu.scoring import isolation_mask
from workstation.run_config import RunConfig

NER = {"人物": None, "地理位置": None, "组织机构": None, "时间": None, "作品": None}


def mixed_documents(n=40, seed=0):
    rng = random.Random(seed)
    chars = "北大西洋议会春季会议日在西班牙巴塞罗那闭幕中央电视台和中国电视剧制作中心根据古典文学名著摄制的一部古装连续剧"
    docs = []
    for i in range(n):
        length = rng.choice([5, 30, 120, 400, 700])
        text = "".join(rng.choice(chars) for _ in range(length))
        preset = PRESETS[i % len(PRESETS)]
        prefix = "[CLASSIFY]" if preset.text.startswith("[CLASSIFY]") else \
            "[MULTICLASSIFY]" if preset.text.startswith("[MULTICLASSIFY]") else ""
        docs.append(Document(str(i), prefix + text, preset.schema if i % 3 else NER))
    return docs


def outputs(model, docs, batch_size):
    return [r.to_json()["output"] for r in model.extract(docs, batch_size=batch_size)]


# One step of the 4-decimal rounding. Another batch shape or attention kernel sums the encoder's fp32
# reductions in another order (padding length changes the softmax's), and a confidence near a rounding
# edge can land one step away (seen: 0.5086 vs 0.5085, raw 0.508551 vs 0.508548); the tuples do not move.
ONE_STEP = 1e-4 + 1e-9


def at_threshold(t, step: float) -> bool:
    """A tuple holding a span whose confidence is within `step` of 0.5: its logit is within about 2e-4 of 0,
    the decision threshold, so whether it is kept follows the order in which a kernel adds up."""
    return any(abs(e["confidence"] - 0.5) <= step for e in t if e.get("confidence") is not None)


def assert_same_outputs(a, b, confidence_step=0.0):
    """The same tuples in the same order; each confidence equal, or within `confidence_step`. With a step, a
    tuple at the threshold (at_threshold) may be in one run and not the other: another batch shape or kernel
    adds the same fp32 products in another order, and which CPU kernels run depends on the machine."""
    if confidence_step:
        a, b = ([[[t for t in o if not at_threshold(t, confidence_step)] for o in x] for x in (a, b)])
    strip = [[[[{k: v for k, v in e.items() if k != "confidence"} for e in t] for t in o] for o in x] for x in (a, b)]
    assert strip[0] == strip[1]
    conf = [[e.get("confidence") for o in x for t in o for e in t] for x in (a, b)]
    assert all((x is None) == (y is None) for x, y in zip(*conf))
    worst = max((abs(x - y) for x, y in zip(*conf) if x is not None), default=0.0)
    assert worst <= confidence_step, f"a confidence moved by {worst}"


def test_sdpa_attention_matches_eager(rex_model):
    docs = mixed_documents(16)
    net = rex_model.network
    w = rex_model.scorer
    windows = [win for d in docs[:6] for win in document_run(rex_model.prompter, d.text, d.schema).send(None)]
    p = w.pack([[win] for win in windows])
    mask = isolation_mask(p)
    with torch.no_grad():
        net.attention_backend = "eager"
        eager = net(p.ids, p.positions, mask, p.valid)
        net.attention_backend = "sdpa"
        sdpa = net(p.ids, p.positions, mask, p.valid)
        net.attention_backend = "eager"
    pairs = p.valid[:, :, None] & p.valid[:, None, :]
    assert torch.allclose(eager[pairs], sdpa[pairs], atol=1e-4, rtol=1e-5)
    rex_model.knobs.attention = "sdpa"
    try:
        via_sdpa = outputs(rex_model, docs, 8)
    finally:
        rex_model.knobs.attention = "eager"
    assert_same_outputs(via_sdpa, outputs(rex_model, docs, 8), ONE_STEP)


def test_batched_windows_match_one_window_at_a_time(rex_model):
    docs = mixed_documents(24)
    alone = outputs(rex_model, docs, 1)
    assert any(alone), "the tiny checkpoint should produce some outputs"
    assert_same_outputs(outputs(rex_model, docs, 16), alone, ONE_STEP)
    assert_same_outputs(outputs(rex_model, list(reversed(docs)), 7), list(reversed(alone)), ONE_STEP)


@pytest.mark.parametrize("batch_size, sizes", [(8, [8, 16, 32, 64, 64, 16]), (64, [64, 128, 8]), (1, [1, 2, 4, 8, 16, 32, 64, 64, 9])])
def test_document_groups_start_with_one_batch_and_keep_input_order(batch_size, sizes):
    docs = list(range(200))
    groups = document_groups(docs, batch_size)
    assert [len(g) for g in groups] == sizes
    assert [d for g in groups for d in g] == docs


@pytest.mark.parametrize("batch_size", [1, 2])
def test_results_follow_input_order_across_growing_groups(rex_model, batch_size):
    # batch 1: the second group holds blank texts only, so it has nothing for the device
    docs = [Document(str(i), t, NER) for i, t in enumerate(["张三在北京。", "", " ", "李四"] * 10)]
    assert [r.document_id for r in rex_model.extract(docs, batch_size=batch_size)] == [d.id for d in docs]


def test_the_next_groups_first_batches_are_queued_before_a_group_is_decoded(rex_model, monkeypatch):
    """The device works while the host decodes: group k + 1's first windows are launched before any of
    group k's Results exists, and the outputs stay those of one window at a time."""
    from plugins.rexuninlu import pipeline
    docs = [Document(str(i), f"第{i}号：张三在北京{'见到了李四' * (i % 5)}。", NER) for i in range(30)]
    events: list[tuple[str, set]] = []
    real_launch, real_result = rex_model.scorer.launch, pipeline.to_result

    def launch(rows):
        events.append(("launch", {w.text for row in rows for w in row}))
        return real_launch(rows)
    monkeypatch.setattr(rex_model.scorer, "launch", launch)
    monkeypatch.setattr(pipeline, "to_result", lambda doc, tuples: (events.append(("result", {doc.text})),
                                                                    real_result(doc, tuples))[1])
    got = [r.to_json()["output"] for r in rex_model.extract(docs, batch_size=2)]
    groups = pipeline.document_groups(docs, 2)
    for k in range(len(groups) - 1):
        first_result = next(i for i, (kind, texts) in enumerate(events)
                            if kind == "result" and texts <= {d.text for d in groups[k]})
        queued = set().union(*(texts for kind, texts in events[:first_result] if kind == "launch"))
        assert queued & {d.text for d in groups[k + 1]}, f"group {k + 1} was not queued before group {k} decoded"
    monkeypatch.undo()
    assert_same_outputs(got, outputs(rex_model, docs, 1), ONE_STEP)


def test_windows_holding_layout_lists_pack_like_the_pipelines_arrays(rex_model):
    from dataclasses import replace
    windows = [w for t in ("张三在北京。", "北大西洋议会" * 100) for w in document_run(rex_model.prompter, t, NER).send(None)]
    as_lists = [replace(w, positions=list(w.positions), groups=list(w.groups), types=list(w.types)) for w in windows]
    a, b = (rex_model.scorer.pack([ws[:1], ws[1:]]) for ws in (windows, as_lists))
    for field in ("ids", "positions", "groups", "types", "segments", "is_text", "is_type"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field


def test_padding_does_not_change_logits_of_real_tokens(rex_model):
    short, long_ = mixed_documents(2)[0], Document("l", "北大西洋议会" * 50, NER)
    ws = [document_run(rex_model.prompter, d.text, d.schema).send(None)[0] for d in (short, long_)]
    s = rex_model.scorer
    with torch.no_grad():
        def logits(rows):
            p = s.pack(rows)
            return rex_model.network(p.ids, p.positions, isolation_mask(p), p.valid, p.segments)
        alone = logits([[ws[0]]])[0]
        batched = logits([[w] for w in ws])[0]
        packed = logits([[ws[1], ws[0]]])[0]
    n1 = len(ws[1].ids)
    n = len(ws[0].ids)
    assert torch.allclose(alone[:n, :n], packed[n1:n1 + n, n1:n1 + n], atol=1e-3)
    n = len(ws[0].ids)
    assert torch.allclose(alone[:n, :n], batched[:n, :n], atol=1e-5)


def test_every_preset_runs_and_gives_the_task_shape(rex_model):
    docs = [Document(p.name, p.text, p.schema) for p in PRESETS]
    for preset, result in zip(PRESETS, rex_model.extract(docs, batch_size=4)):
        depth = max(1, max_depth(preset.schema))
        for info in result.tuples:
            assert len(info) == depth
            for span in info:
                assert span.offset is not None
                assert 0 <= span.confidence <= 1 and span.confidence == round(span.confidence, 4)
                text = preset.text
                if preset.text.startswith("["):
                    assert span.span in ("[CLASSIFY]", "[MULTICLASSIFY]")
                else:
                    assert text[span.offset[0]:span.offset[1]] == span.span
        if preset.text.startswith("[CLASSIFY]"):
            assert len(result.tuples) == 1, preset.name    # single label: exactly one answer


def max_depth(schema):
    return 0 if not schema else 1 + max(max_depth(v) for v in schema.values())


def test_long_text_runs_in_overlapping_windows(rex_model):
    text = "".join(random.Random(1).choice("北大西洋议会春季会议日在西班牙巴塞罗那") for _ in range(3000))
    enc = rex_model.prompter.encode("[PREFIX][TYPE]人物", text, "no_cls")
    assert len(enc.ids) > 5
    result = next(rex_model.extract([Document("x", text, NER)], batch_size=4))
    for info in result.tuples:
        a, b = info[0].offset
        assert text[a:b] == info[0].span


def test_200k_character_text_scores_in_bounded_steps(rex_model, monkeypatch):
    """The pipeline, not the network, is under test: a cheap stand-in network links every
    [TYPE] to each window's first 组织机构 span, so offsets are checked across 400+ windows."""
    from plugins.rexuninlu import pipeline, scoring
    seen = []
    original = scoring.WindowScorer.submit
    monkeypatch.setattr(scoring.WindowScorer, "submit",
                        lambda self, ws, bs, ahead=0: (seen.append(len(ws)), original(self, ws, bs, ahead))[1])

    def stand_in(ids, pos, mask, valid, segments=None, codes=None):
        logits = torch.full(ids.shape + ids.shape[-1:], -1.0)
        for b in range(ids.shape[0]):
            sep = (ids[b] == 2).nonzero()[0, 0].item()
            t = (ids[b] == rex_model.prompter.type_id).nonzero()[0, 0].item()
            h, tl = sep + 2, sep + 6
            logits[b, h, tl] = logits[b, h, t] = logits[b, t, tl] = 1.0
        return logits
    stand_in.attention_backend = "eager"
    monkeypatch.setattr(rex_model.scorer, "network", stand_in)
    text = ("中央电视台和中国电视剧制作中心。" * 12500)[:200_000]
    result = next(rex_model.extract([Document("huge", text, {"组织机构": None})], batch_size=32))
    assert max(seen) <= pipeline.WINDOWS_PER_STEP and sum(seen) > 400
    assert len(result.tuples) == sum(seen)
    assert all(text[s.offset[0]:s.offset[1]] == s.span and len(s.span) == 5 for t in result.tuples for s in t)


def test_empty_text_gives_empty_output(rex_model):
    assert outputs(rex_model, [Document("e", "", NER), Document("s", "   ", NER)], 4) == [[], []]


# ---------------------------------------------------------------- loading

def corrupt_copy(src, tmp_path, edit):
    dst = tmp_path / "w"
    shutil.copytree(src, dst)
    state = torch.load(dst / "pytorch_model.bin", weights_only=True)
    edit(state)
    torch.save(state, dst / "pytorch_model.bin")
    return dst


def test_missing_key_is_named(rex_tiny, tmp_path):
    d = corrupt_copy(rex_tiny, tmp_path, lambda s: s.pop("plm.encoder.conv.conv.weight"))
    with pytest.raises(WeightsError, match="missing keys: plm.encoder.conv.conv.weight"):
        RexUniNLU().load(d)


def test_unexpected_key_is_named_but_position_ids_buffer_is_benign(rex_tiny, tmp_path):
    d = corrupt_copy(rex_tiny, tmp_path, lambda s: s.update({"plm.pooler.dense.weight": torch.zeros(1),
                                                             "plm.embeddings.position_ids": torch.arange(512)}))
    with pytest.raises(WeightsError, match="unexpected keys: plm.pooler.dense.weight$"):
        RexUniNLU().load(d)


def test_misshaped_key_is_named(rex_tiny, tmp_path):
    d = corrupt_copy(rex_tiny, tmp_path, lambda s: s.update({"ffnq.bias": torch.zeros(3)}))
    with pytest.raises(WeightsError, match=r"ffnq.bias has shape \(3,\)"):
        RexUniNLU().load(d)


def test_vocab_size_must_match_vocab_txt(rex_tiny, tmp_path):
    d = tmp_path / "w"
    shutil.copytree(rex_tiny, d)
    with open(d / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("多余\n")
    with pytest.raises(WeightsError, match="vocab_size=12800 but vocab.txt has 12801 lines"):
        RexUniNLU().load(d)


def test_corrupt_or_missing_weights_give_clear_errors(rex_tiny, tmp_path):
    d = tmp_path / "w"
    shutil.copytree(rex_tiny, d)
    (d / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsError, match="could not be read"):
        RexUniNLU().load(d)
    (d / "pytorch_model.bin").unlink()
    with pytest.raises(WeightsError, match="has no weights"):
        RexUniNLU().load(d)
    with pytest.raises(WeightsError, match="does not exist"):
        RexUniNLU().load(tmp_path / "nowhere")
    (d / "config.json").write_text("{", "utf-8")
    with pytest.raises(WeightsError, match="not valid JSON"):
        loading.read_config(d)


def test_safetensors_layout_loads_the_same(rex_tiny, tmp_path, rex_model):
    from safetensors.torch import save_file
    d = tmp_path / "st"
    shutil.copytree(rex_tiny, d)
    state = torch.load(d / "pytorch_model.bin", weights_only=True)
    (d / "pytorch_model.bin").unlink()
    save_file(state, str(d / "model.safetensors"))
    docs = mixed_documents(6)
    assert outputs(RexUniNLU().load(d), docs, 4) == outputs(rex_model, docs, 4)


def test_demo_checkpoint_is_the_released_architecture(tmp_path):
    from plugins.rexuninlu import demo
    from plugins.rexuninlu.modeling import RexModel
    cfg = demo.SIZES["full"]
    assert sum(p.numel() for p in RexModel(cfg).parameters()) == 98_237_568
    assert json.loads(json.dumps(cfg.to_dict()))["vocab_size"] == 12800


def test_conv_layer_as_one_gemm_equals_conv1d(rex_model):
    conv = rex_model.network.plm.encoder.conv
    emb, x = torch.randn(3, 37, conv.conv.in_channels), torch.randn(3, 37, conv.conv.in_channels)
    valid = torch.ones(3, 37, dtype=torch.bool)
    valid[1, 30:] = False
    with torch.no_grad():
        ref = conv.conv((emb * valid[..., None]).transpose(1, 2)).transpose(1, 2)
        ref = conv.LayerNorm(x + torch.nn.functional.gelu(ref.masked_fill(~valid[..., None], 0))) * valid[..., None]
        assert torch.allclose(conv(emb * valid[..., None], x, valid), ref, atol=1e-5)


def test_device_side_link_filter_is_lossless(rex_model):
    """Decoding every positive entry gives the same tuples as decoding the filtered ones."""
    from plugins.rexuninlu.decoding import Links, decode_spans
    from plugins.rexuninlu.prompting import legal_paths
    s = rex_model.scorer
    doc = mixed_documents(3)[1]
    windows = document_run(rex_model.prompter, doc.text, NER).send(None)
    p = s.pack([[w] for w in windows])
    with torch.no_grad():
        logits = rex_model.network(p.ids, p.positions, isolation_mask(p), p.valid)
        logits = logits - logits[0].flatten().quantile(0.6)                    # many positives
    no_window_paired = torch.zeros_like(p.valid)            # every link decoding may read goes to the host
    kept = s.window_local(s.selected_links(logits, p, no_window_paired).other.nonzero(), p.starts).tolist()
    level = {(): NER}
    for b, w in enumerate(windows):
        n = len(w.ids)
        every = (logits[b, :n, :n] > 0).nonzero().tolist()
        mine = [(r, c) for bb, r, c in kept if bb == b]
        assert len(mine) < len(every)
        full = decode_spans(w, Links([r for r, _ in every], [c for _, c in every], None), level, legal_paths(NER), {})
        filt = decode_spans(w, Links([r for r, _ in mine], [c for _, c in mine], None), level, legal_paths(NER), {})
        assert full == filt and full


def test_packed_windows_give_the_same_outputs_as_padded(rex_model):
    docs = mixed_documents(24, seed=3)
    padded = outputs(rex_model, docs, 8)
    rex_model.knobs.unpad = True
    try:
        assert_same_outputs(outputs(rex_model, docs, 8), padded, ONE_STEP)
        assert_same_outputs(outputs(rex_model, docs, 1), padded, ONE_STEP)
    finally:
        rex_model.knobs.unpad = False


def test_packing_fills_rows_without_passing_512_tokens():
    from plugins.rexuninlu.scoring import arrange
    lengths = [500, 40, 300, 200, 30, 12, 512, 100]
    batches = arrange(lengths, 2, pack=True)
    rows = [row for batch in batches for row in batch]
    assert sorted(i for row in rows for i in row) == list(range(8))
    assert all(sum(lengths[i] for i in row) <= 512 for row in rows)
    assert len(rows) < 8 and all(len(b) <= 2 for b in batches)
    assert [row for b in arrange(lengths, 3, pack=False) for row in b] == [[6], [0], [2], [3], [7], [1], [4], [5]]


def test_spans_paired_on_the_device_decode_like_every_link_paired_on_the_host(rex_model):
    """selected_links pairs head, tail and [TYPE] on the device; decoding those typed hits gives
    exactly the tuples (and order) of decoding every positive entry on the host, packed rows too."""
    from plugins.rexuninlu.decoding import Links, decode_spans
    from plugins.rexuninlu.prompting import legal_paths
    s = rex_model.scorer
    texts = [d.text for d in mixed_documents(6, seed=5)]
    windows = [w for t in texts for w in document_run(rex_model.prompter, t, NER).send(None)]
    rows = [[windows[0], windows[1]], [windows[2]], windows[3:5]]         # packed rows and a lone one
    flat = [w for row in rows for w in row]
    p = s.fill(rows, len(rows), 1024)
    with torch.no_grad():
        logits = rex_model.network(p.ids, p.positions, isolation_mask(p), p.valid, p.segments)
        logits = logits - logits[0].flatten().quantile(0.7)                    # dense: many positives
    extract = torch.ones(len(flat) + 1, dtype=torch.bool)
    typed, _ = s.pick(s.selected_links(logits, p, extract[p.segments]))
    confidence, _ = s.link_probabilities(logits, typed, typed[:0, :3])
    hits = s.window_local(typed, p.starts).tolist()
    level, legal, checked = {(): NER}, legal_paths(NER), 0
    for k, w in enumerate(flat):
        row, start = p.starts[k]
        n = len(w.ids)
        window = logits[row, start:start + n, start:start + n]
        every = (window > 0).nonzero().tolist()
        probs = [sigmoid(window[r, c].item()) for r, c in every]
        host = decode_spans(w, Links([r for r, _ in every], [c for _, c in every], None, None, probs), level, legal, {})
        mine = [(r, c, t, round(conf, 4)) for (ww, r, c, t), conf in zip(hits, confidence.tolist()) if ww == k]
        device = decode_spans(w, Links([], [], None, mine), level, legal, {})
        assert device == host
        assert all(0.5 < e.confidence <= 1 for info in host for e in info)
        checked += len(host)
    assert checked > 20


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_span_confidence_is_the_weakest_of_its_three_links(rex_model):
    """Each extracted span's confidence, recomputed from the network's raw logits of its window: the
    smallest of sigmoid(head->tail), sigmoid(head->[TYPE]) and sigmoid([TYPE]->tail), all three > 0.5."""
    from plugins.rexuninlu.decoding import type_tokens
    texts = [d.text.split("CLASSIFY]")[-1] for d in mixed_documents(40, seed=4)]
    docs = [Document(str(i), t, NER) for i, t in enumerate(texts) if len(t) < 400]
    results = list(rex_model.extract(docs, batch_size=1))
    checked = 0
    for doc, result in zip(docs, results):
        [w] = document_run(rex_model.prompter, doc.text, doc.schema).send(None)       # one window each
        p = rex_model.scorer.pack([[w]])
        with torch.no_grad():
            logits = rex_model.network(p.ids, p.positions, isolation_mask(p), p.valid, p.segments)[0]
        token_of = {t: tok for tok, (_, t) in type_tokens(w).items()}
        text_tokens = range(w.n_hint, len(w.ids))
        for [span] in result.tuples:
            head = next(i for i in text_tokens if w.offsets[i][0] == span.offset[0])
            tail = next(i for i in text_tokens if w.offsets[i][1] == span.offset[1])
            t = token_of[span.type]
            links = [logits[head, tail].item(), logits[head, t].item(), logits[t, tail].item()]
            assert min(links) > 0                                    # the decoder's acceptance rule
            assert span.confidence == round(min(sigmoid(x) for x in links), 4)
            assert span.confidence > 0.5
            checked += 1
    assert checked > 20


def test_an_out_of_memory_batch_is_halved_and_the_run_report_says_so(rex_model, monkeypatch):
    from workstation import engine
    docs = [d for d in mixed_documents(12, seed=2) if "CLASSIFY" not in d.text]
    expected = outputs(rex_model, docs, 8)
    real_launch, calls = rex_model.scorer.launch, []

    def launch(rows):
        calls.append(len(rows))
        if len(rows) > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_launch(rows)
    monkeypatch.setattr(rex_model.scorer, "launch", launch)
    report = engine.run(rex_model, docs, RunConfig(batch_size=8))
    assert_same_outputs([r.to_json()["output"] for r in report.results], expected, ONE_STEP)
    assert report.backoffs and {b["rows"] for b in report.backoffs} <= {1, 2, 3, 4}
    assert all(b["at_seconds"] >= 0 for b in report.backoffs)
    assert set(report.stages) >= {"prepare", "device", "decode", "write"}


def test_relative_tables_of_the_triton_path_equal_the_per_head_matmul():
    # relative_tables batches the GEMM over heads, not [B,H], so it sums in another order: close, not equal.
    from plugins.rexuninlu.modeling import relative_tables
    torch.manual_seed(0)
    B, L, H, d, S = 3, 20, 4, 8, 16
    qkv = torch.randn(B, L, 3 * H * d)                   # q, k, v side by side, as the fused projection
    qx, kx = qkv[..., :H * d], qkv[..., H * d:2 * H * d]
    pq, pk = torch.randn(2 * S, H * d), torch.randn(2 * S, H * d)

    def split(x):
        return x.view(*x.shape[:-1], H, d).transpose(-3, -2)

    c2p, p2c = relative_tables(qkv, pq, pk, H)
    torch.testing.assert_close(c2p, split(qx) @ split(pk).transpose(-1, -2))
    torch.testing.assert_close(p2c, split(kx) @ split(pq).transpose(-1, -2))
    # Views of one [2H, B·L, 2S] GEMM output: heads outermost, rows of 2S contiguous (the kernel reads them
    # in place), p2c's heads after c2p's.
    assert c2p.shape == p2c.shape == (B, H, L, 2 * S)
    assert c2p.stride() == p2c.stride() == (L * 2 * S, B * L * 2 * S, 2 * S, 1)
    assert p2c.data_ptr() - c2p.data_ptr() == H * B * L * 2 * S * c2p.element_size()


def test_rotary_takes_each_angle_once_and_gives_the_references_bits():
    from plugins.rexuninlu.modeling import Rotary
    torch.manual_seed(4)
    rotary = Rotary(64)
    t, positions = torch.randn(2, 30, 64), torch.randint(0, 500, (2, 30))
    angle = (positions.float()[..., None] * rotary.freqs).repeat_interleave(2, dim=-1)   # the reference's way
    pairs = t.unflatten(-1, (-1, 2))
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    assert torch.equal(rotary(t, positions), t * angle.cos() + rotated * angle.sin())


@pytest.mark.parametrize("left_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_split_matmul_is_fp32_to_about_16_bits(left_dtype):
    from plugins.rexuninlu.modeling import split_matmul
    torch.manual_seed(5)
    a, w, k = torch.randn(2, 40, 96).to(left_dtype), torch.randn(96, 96) / 10, torch.randn(2, 96, 40)
    for got, exact in ((split_matmul(a, w), a.double() @ w.double()), (split_matmul(a.float(), k), a.double() @ k.double())):
        assert got.dtype == torch.float32 and got.shape == exact.shape
        error = ((got.double() - exact).abs().max() / exact.abs().max()).item()
        assert error < 2e-5, error                            # bf16 alone: ~2e-3; fp32: ~5e-7


def test_fused_intermediate_takes_gelus_tanh_form_in_the_gemm_at_reduced_precision_only(rex_model):
    import copy

    import torch.nn.functional as F
    block = copy.deepcopy(rex_model.network.plm.encoder.layer[0].intermediate).eval()
    torch.manual_seed(7)
    x = torch.randn(2, 9, block.dense.in_features)
    assert torch.equal(block(x, fused=True), F.gelu(block.dense(x)))        # fp32: the erf form, unchanged
    block, x = block.to(torch.bfloat16), x.to(torch.bfloat16)
    fused, erf = block(x, fused=True).float(), block(x).float()
    torch.testing.assert_close(fused, F.gelu(block.dense(x).float(), approximate="tanh"), atol=2e-2, rtol=2 ** -7)
    assert ((fused - erf).abs() <= erf.abs() * 2 ** -7 + 2e-3).all()           # within about a bf16 step
    assert fused.shape == (2, 9, block.dense.out_features)


def test_fused_qkv_weights_are_kept_until_a_weight_changes(rex_model):
    import copy

    from plugins.rexuninlu.modeling import forget_fused_projections
    net = copy.deepcopy(rex_model.network)
    attention = net.plm.encoder.layer[0].attention.self
    with torch.no_grad():
        kept = attention.fused_projection()
        assert attention.fused_projection() is kept                        # no concatenation per forward
        attention.value_proj.bias.add_(1.0)                                  # an optimizer step: a new version
        stepped = attention.fused_projection()
        assert stepped is not kept and torch.equal(stepped[1][-attention.value_proj.bias.numel():],
                                                   attention.value_proj.bias)
        net.half()                                                           # a dtype switch: new data, new dtype
        assert attention.fused_projection()[0].dtype == torch.float16
        forget_fused_projections(net)
        assert attention._fused is None
    assert attention.fused_projection()[0].requires_grad                     # recording gradients: built afresh
