"""Decoding on hand-built links: the model is replaced by a scorer that links chosen spans."""
import dataclasses

import torch

from plugins.rexuninlu.decoding import Links, best_of_hint, decode_spans, final_selection, type_tokens
from plugins.rexuninlu.pipeline import document_run
from plugins.rexuninlu.prompting import legal_paths


def token_at(window, char):
    for i in range(window.n_hint, len(window.ids)):
        a, b = window.offsets[i]
        if a <= char < b:
            return i
    raise AssertionError(f"no token at char {char}")


def drive(prompter, text, schema, decide):
    """Run one document; decide(window) -> (positive (row, col) pairs, probs or None[, {pair: probability}]).
    Returns its tuples as JSON (the reference's dicts)."""
    run = document_run(prompter, text, schema)
    try:
        windows = run.send(None)
        while True:
            windows = run.send([links_of(*decided) for decided in map(decide, windows)])
    except StopIteration as stop:
        return [[span.to_json() for span in info] for info in stop.value]


def links_of(pairs, probs, link_probs=None):
    pairs = sorted(pairs)
    rows, cols = zip(*pairs) if pairs else ([], [])
    return Links(rows, cols, probs, None, [link_probs[p] for p in pairs] if link_probs else None)


def linker(wanted):
    """wanted: {(type, text span start, end)}; link head, tail and span for each, in every window."""
    def decide(window):
        pairs = set()
        for tok, (prefix, t) in type_tokens(window).items():
            for (wt, a, b) in wanted:
                if wt == t and (not prefix or prefix[-1][1] is not None):
                    h, tl = token_at(window, a), token_at(window, b - 1)
                    pairs |= {(h, tl), (h, tok), (tok, tl)}
        return pairs, None
    return decide


def test_linked_span_is_typed_and_offsets_index_the_text(rex_model):
    text = "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。"
    out = drive(rex_model.prompter, text, {"人物": None, "地理位置": None, "组织机构": None},
                linker({("组织机构", 0, 6), ("地理位置", 14, 17)}))
    assert out == [[{"type": "组织机构", "span": "北大西洋议会", "offset": [0, 6]}],
                   [{"type": "地理位置", "span": "西班牙", "offset": [14, 17]}]]


def test_span_without_its_tail_link_is_not_output(rex_model):
    text = "张三在北京"
    def decide(window):
        tok = next(t for t, (_, ty) in type_tokens(window).items() if ty == "人物")
        h, tl = token_at(window, 0), token_at(window, 1)
        return {(h, tl), (h, tok)}, None               # no (type, tail) link
    assert drive(rex_model.prompter, text, {"人物": None}, decide) == []


def test_relation_recurses_one_level_and_outputs_only_full_paths(rex_model):
    text = "中央电视台由张三创办"
    schema = {"组织机构": {"创始人(人物)": None}}
    out = drive(rex_model.prompter, text, schema, linker({("组织机构", 0, 5), ("创始人(人物)", 6, 8)}))
    assert out == [[{"type": "组织机构", "span": "中央电视台", "offset": [0, 5]},
                    {"type": "创始人(人物)", "span": "张三", "offset": [6, 8]}]]


def test_leading_spaces_are_skipped_in_offsets(rex_model):
    text = "abc  def"
    out = drive(rex_model.prompter, text, {"词": None}, linker({("词", 5, 8)}))
    assert out == [[{"type": "词", "span": "def", "offset": [5, 8]}]]


def test_spans_paired_on_the_device_follow_the_references_rules(rex_model):
    """Device-paired hits: a head on a space moves to the next character, a head past the text and a [TYPE]
    token no type registered give nothing, a tail on the final [SEP] gives the reference's empty [start, 0]."""
    text, schema = "abc  def 张三", {"词": None, "人": None}
    [window] = document_run(rex_model.prompter, text, schema).send(None)
    person, word = (next(t for t, (_, ty) in type_tokens(window).items() if ty == name) for name in ("人", "词"))
    a, c, d, f, zhang, san = (token_at(window, i) for i in (0, 2, 5, 7, 9, 10))
    sep = len(window.ids) - 1
    offsets = list(window.offsets)
    offsets[d], offsets[san] = (3, 6), (len(text), len(text))                 # d's token starts on a space; 三 past the end
    window = dataclasses.replace(window, offsets=offsets)
    hits = [(a, c, word, 0.9), (d, f, person, 0.8), (san, san, word, 0.7), (zhang, san, min(person, word) - 1, 0.6),
            (zhang, sep, word, 0.55), (zhang, san, person, 0.51)]
    out = decode_spans(window, Links([], [], None, hits), {(): schema}, legal_paths(schema), {})
    assert [[s.to_json() for s in t] for t in out] == [
        [{"type": "词", "span": "abc", "offset": [0, 3], "confidence": 0.9}],
        [{"type": "人", "span": "def", "offset": [5, 8], "confidence": 0.8}],
        [{"type": "词", "span": "", "offset": [9, 0], "confidence": 0.55}],
        [{"type": "人", "span": "张三", "offset": [9, 11], "confidence": 0.51}]]


def weighted_linker(wanted):
    """wanted: {(type, start, end): (p_span, p_head, p_tail)}; links as `linker`, each with its probability."""
    def decide(window):
        probs = {}
        for tok, (prefix, t) in type_tokens(window).items():
            for (wt, a, b), (p_span, p_head, p_tail) in wanted.items():
                if wt == t and (not prefix or prefix[-1][1] is not None):
                    h, tl = token_at(window, a), token_at(window, b - 1)
                    probs.update({(h, tl): p_span, (h, tok): p_head, (tok, tl): p_tail})
        return set(probs), None, probs
    return decide


def test_a_span_is_as_confident_as_its_weakest_link(rex_model):
    text = "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。"
    out = drive(rex_model.prompter, text, {"人物": None, "地理位置": None, "组织机构": None},
                weighted_linker({("组织机构", 0, 6): (0.9, 0.61234, 0.8), ("地理位置", 14, 17): (0.7, 0.99, 0.97)}))
    assert out == [[{"type": "组织机构", "span": "北大西洋议会", "offset": [0, 6], "confidence": 0.6123}],
                   [{"type": "地理位置", "span": "西班牙", "offset": [14, 17], "confidence": 0.7}]]


def test_each_element_of_a_relation_carries_its_own_links_confidence(rex_model):
    text = "中央电视台由张三创办"
    schema = {"组织机构": {"创始人(人物)": None}}
    out = drive(rex_model.prompter, text, schema,
                weighted_linker({("组织机构", 0, 5): (0.9, 0.8, 0.95), ("创始人(人物)", 6, 8): (0.7, 0.99, 0.6)}))
    assert out == [[{"type": "组织机构", "span": "中央电视台", "offset": [0, 5], "confidence": 0.8},
                    {"type": "创始人(人物)", "span": "张三", "offset": [6, 8], "confidence": 0.6}]]


def test_a_prefix_found_by_several_windows_keeps_its_highest_confidence(rex_model):
    text = "中央电视台由张三创办"
    schema = {"组织机构": {"创始人(人物)": None}}
    [window] = document_run(rex_model.prompter, text, schema).send(None)
    tok = next(t for t, (_, ty) in type_tokens(window).items() if ty == "组织机构")
    head, tail = token_at(window, 0), token_at(window, 4)
    next_map, confidences = {}, {}
    for conf in (0.7, 0.9, 0.8):                      # as if three overlapping windows had found it
        decode_spans(window, Links([], [], None, [(head, tail, tok, conf)]), {(): schema}, legal_paths(schema),
                     next_map, confidences)
    assert confidences == {(("组织机构", "中央电视台", (0, 5)),): 0.9}


def cls_probs(window, winner, high=0.95, low=0.3):
    """probs where the cls token (first text token) links strongly to the `winner` type only."""
    n = len(window.ids)
    probs = torch.full((n, n), low)
    nh = window.n_hint
    for tok, (_, t) in type_tokens(window).items():
        if t == winner:
            probs[tok, nh] = probs[nh, tok] = high
    probs[nh, nh] = high
    return probs


def test_single_label_takes_the_best_mean_confidence(rex_model):
    text = "[CLASSIFY]这部电影太好看了"
    def decide(window):
        nh = window.n_hint
        pairs = {(nh, nh)}
        for tok in type_tokens(window):
            pairs |= {(nh, tok), (tok, nh)}
        return pairs, cls_probs(window, "正向")
    out = drive(rex_model.prompter, text, {"正向": None, "负向": None}, decide)
    assert out == [[{"type": "正向", "span": "[CLASSIFY]", "offset": [0, 10], "confidence": 0.95}]]


def test_blank_fallback_picks_by_confidence_when_nothing_links(rex_model):
    text = "[CLASSIFY]这部电影太难看了"
    out = drive(rex_model.prompter, text, {"正向": None, "负向": None},
                lambda w: (set(), cls_probs(w, "负向")))
    assert out == [[{"type": "负向", "span": "[CLASSIFY]", "offset": [0, 10], "confidence": 0.95}]]


def test_hierarchical_classification_recurses_with_the_cls_token(rex_model):
    text = "[CLASSIFY]雨刷刮不干净怎么办"
    schema = {"APP": {"蓝牙": None}, "电器": {"雨刮": None, "电子": None}}
    out = drive(rex_model.prompter, text, schema, lambda w: (set(), cls_probs(w, "电器" if len(type_tokens(w)) == 2
                                                                             else "雨刮")))
    assert out == [[{"type": "电器", "span": "[CLASSIFY]", "offset": [0, 10], "confidence": 0.95},
                    {"type": "雨刮", "span": "[CLASSIFY]", "offset": [0, 10], "confidence": 0.95}]]


def test_multi_label_keeps_those_above_point_nine_else_the_best():
    a = [{"type": "a", "confidence": 0.95}]
    b = [{"type": "b", "confidence": 0.92}]
    c = [{"type": "c", "confidence": 0.5}]
    assert final_selection([a, b, c], "multi_cls") == [a, b]
    assert final_selection([c, [{"type": "d", "confidence": 0.7}]], "multi_cls") == [[{"type": "d", "confidence": 0.7}]]
    assert final_selection([c, a], "cls") == [a]


def test_hint_candidate_averages_occurrences_per_key():
    found = {"x": [[{"confidence": 0.9}], [{"confidence": 0.5}]], "y": [[{"confidence": 0.8}]]}
    assert best_of_hint(found) == ("y", [0.8])
    assert best_of_hint({"x": [[{"confidence": 0.1}]]}) == ("x", [0.1])
    assert best_of_hint({}) is None
