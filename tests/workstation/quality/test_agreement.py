"""Agreement between two runs: per-type precision/recall of B against A, exact and overlap; the review order."""
from __future__ import annotations

import pytest

from contracts.domain import Document, Result, Span
from workstation.quality.agreement import agreement, gold_output, markers_of, mentions, plain_text

TEXT = "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。"
REX = markers_of("rexuninlu")           # as the RexUniNLU plugin declares them


def ner(doc_id: str, *spans: tuple[str, int, int], text: str = TEXT) -> tuple[Document, Result]:
    return (Document(doc_id, text, schema={"地理位置": None, "组织机构": None}),
            Result(doc_id, [[Span(t, text[a:b], (a, b))] for t, a, b in spans]))


def test_identical_runs_agree_fully_on_every_type():
    a = [ner("1", ("组织机构", 0, 6), ("地理位置", 14, 17))]
    result = agreement(a, a)
    assert [d.disagreements for d in result.documents] == [[]]
    for c in result.per_type.values():
        assert c.scores()["precision (exact)"] == c.scores()["recall (overlap)"] == 1.0


def test_spans_agree_on_type_and_offsets_whatever_their_confidences():
    doc, plain = ner("1", ("组织机构", 0, 6), ("地理位置", 14, 17))
    sure = Result("1", [[Span(s.type, s.span, s.offset, confidence=0.99)] for [s] in plain.tuples])
    unsure = Result("1", [[Span(s.type, s.span, s.offset, confidence=0.51)] for [s] in plain.tuples])
    for b in (sure, unsure):
        result = agreement([(doc, plain)], [(doc, b)])
        assert result.documents[0].disagreements == [] and result.overall.exact == 2
    gold = gold_output(agreement([(doc, sure)], [(doc, unsure)]).documents[0].agreed, doc)
    assert all("confidence" not in e for t in gold for e in t)          # gold never carries a confidence


def test_precision_and_recall_of_b_against_a_exact_and_overlap():
    a = [ner("1", ("组织机构", 0, 6), ("地理位置", 14, 17), ("地理位置", 17, 21))]
    # B: the organisation one character short (overlap only), the first place exact, an extra place
    b = [ner("1", ("组织机构", 0, 5), ("地理位置", 14, 17), ("地理位置", 10, 12))]
    result = agreement(a, b)
    org, loc = result.per_type["组织机构"], result.per_type["地理位置"]
    assert (org.a, org.b, org.exact, org.overlap) == (1, 1, 0, 1)
    assert (loc.a, loc.b, loc.exact, loc.overlap) == (2, 2, 1, 1)
    s = loc.scores()
    assert s["precision (exact)"] == 0.5 and s["recall (exact)"] == 0.5
    overall = result.overall.scores()
    assert overall["precision (exact)"] == pytest.approx(1 / 3)
    assert overall["precision (overlap)"] == pytest.approx(2 / 3)
    kinds = sorted(d.kind for d in result.documents[0].disagreements)
    assert kinds == ["boundary", "only A", "only B"]


def test_overlap_matching_is_one_to_one():
    # one long span of A overlaps two short spans of B: only one of them can be its match
    a = [ner("1", ("地理位置", 14, 21))]
    b = [ner("1", ("地理位置", 14, 17), ("地理位置", 17, 21))]
    c = agreement(a, b).per_type["地理位置"]
    assert c.overlap == 1 and c.scores()["precision (overlap)"] == 0.5 and c.scores()["recall (overlap)"] == 1.0


def test_the_same_span_under_another_type_is_a_type_disagreement_and_matches_nothing():
    a = [ner("1", ("组织机构", 14, 17))]
    b = [ner("1", ("地理位置", 14, 17))]
    result = agreement(a, b)
    [d] = result.documents[0].disagreements
    assert d.kind == "type" and d.a.type == "组织机构" and d.b.type == "地理位置"
    assert result.overall.exact == result.overall.overlap == 0


def test_swapping_the_runs_swaps_precision_and_recall():
    a = [ner("1", ("地理位置", 14, 17), ("地理位置", 17, 21))]
    b = [ner("1", ("地理位置", 14, 17))]
    ab, ba = agreement(a, b).overall.scores(), agreement(b, a).overall.scores()
    assert ab["precision (exact)"] == ba["recall (exact)"] == 1.0
    assert ab["recall (exact)"] == ba["precision (exact)"] == 0.5


def test_rexuninlu_classification_marker_and_seqgpt_label_are_the_same_label():
    marker = "[CLASSIFY]"
    rex = (Document("7", marker + "很满意", schema={"正向情感": None, "负向情感": None}),
           Result("7", [[Span("正向情感", marker, (0, len(marker)), confidence=0.9)]]))
    seq = (Document("7", "很满意", task="cls", labels=["正向情感", "负向情感"]),
           Result("7", [[Span("正向情感", "正向情感", None)]]))
    result = agreement([rex], [seq], markers_a=REX, markers_b=markers_of("seqgpt"))
    assert result.documents[0].agreed[0].label and result.documents[0].disagreements == []
    other = (seq[0], Result("7", [[Span("负向情感", "负向情感", None)]]))
    [d] = agreement([rex], [other], markers_a=REX).documents[0].disagreements
    assert d.kind == "type" and (d.a.type, d.b.type) == ("正向情感", "负向情感")


def test_a_generated_span_not_in_the_text_never_matches():
    a = [ner("1", ("地理位置", 14, 17))]
    doc = Document("1", TEXT, task="ext", labels=["地理位置"])
    b = [(doc, Result("1", [[Span("地理位置", "西班牙", (14, 17), grounded=True)],
                            [Span("地理位置", "马德里", None, grounded=False)]]))]
    c = agreement(a, b).per_type["地理位置"]
    assert (c.b, c.exact) == (2, 1)
    assert [d.kind for d in agreement(a, b).documents[0].disagreements] == ["only B"]


def test_documents_are_paired_by_id_and_text_and_the_rest_reported():
    a = [ner("1", ("地理位置", 14, 17)), ner("2", ("地理位置", 14, 17))]
    b = [ner("2", ("地理位置", 14, 17)), ner("3"), ner("1", ("地理位置", 14, 17), text=TEXT + "另一段")]
    result = agreement(a, b)
    assert [d.doc_id for d in result.documents] == ["2"]
    assert (result.documents[0].position_a, result.documents[0].position_b) == (1, 0)
    assert result.only_in_a == ["1"] and sorted(result.only_in_b) == ["1", "3"]


def test_type_map_renames_b_types_before_comparing():
    a = [ner("1", ("地理位置", 14, 17))]
    doc = Document("1", TEXT, task="ext", labels=["LOC"])
    b = [(doc, Result("1", [[Span("LOC", "西班牙", (14, 17))]]))]
    assert agreement(a, b).overall.exact == 0
    assert agreement(a, b, type_map={"LOC": "地理位置"}).overall.exact == 1


def test_review_order_puts_the_most_disagreement_first():
    a = [ner("calm", ("地理位置", 14, 17)), ner("torn", ("地理位置", 14, 17)), ner("mixed", ("地理位置", 14, 17))]
    b = [ner("calm", ("地理位置", 14, 17)), ner("torn", ("组织机构", 0, 6)),
         ner("mixed", ("地理位置", 14, 17), ("组织机构", 0, 6))]
    ranked = agreement(a, b).ranked()
    assert [d.doc_id for d in ranked] == ["torn", "mixed", "calm"]
    assert ranked[0].score == 1.0 and ranked[-1].score == 0.0


def test_gold_output_follows_the_reading_models_convention():
    marker = "[CLASSIFY]"
    rex_doc = Document("1", marker + "很满意", schema={"正向情感": None})
    seq_doc = Document("1", "很满意", task="cls", labels=["正向情感"])
    [label] = [m for m in mentions(rex_doc.text, Result("1", [[Span("正向情感", marker, (0, 10))]]), markers=REX)]
    assert gold_output([label], rex_doc, REX) == [[{"type": "正向情感", "span": marker, "offset": [0, 10]}]]
    assert gold_output([label], seq_doc, markers_of("seqgpt")) == [[{"type": "正向情感", "span": "正向情感",
                                                                     "offset": None}]]
    _, result = ner("1", ("地理位置", 14, 17))
    [span] = mentions(TEXT, result)
    assert gold_output([span], Document("1", TEXT)) == [[{"type": "地理位置", "span": "西班牙", "offset": [14, 17]}]]


def test_a_family_with_other_markers_is_paired_and_read_by_its_own_markers():
    """The markers are the family's declaration: another model's `<分类>` works as RexUniNLU's `[CLASSIFY]` does,
    and a text that merely starts with `[CLASSIFY]` is plain text to a run whose model declares no such marker."""
    mine = ("<分类>", "<多分类>")
    marked = (Document("7", "<分类>很满意", schema={"正向情感": None, "负向情感": None}),
              Result("7", [[Span("正向情感", "<分类>", (0, 4), confidence=0.9)]]))
    seq = (Document("7", "很满意", task="cls", labels=["正向情感", "负向情感"]),
           Result("7", [[Span("正向情感", "正向情感", None)]]))
    result = agreement([marked], [seq], markers_a=mine)
    assert result.documents[0].text == "很满意"
    assert result.documents[0].agreed[0].label and result.documents[0].disagreements == []
    assert gold_output(result.documents[0].agreed, marked[0], mine) == [[{"type": "正向情感", "span": "<分类>",
                                                                          "offset": [0, 4]}]]
    assert plain_text("[CLASSIFY]很满意", mine) == "[CLASSIFY]很满意"
    unpaired = agreement([marked], [seq])                   # no markers declared: the texts differ
    assert unpaired.documents == [] and unpaired.only_in_a == ["7"]


def test_markers_of_asks_the_installed_family(monkeypatch):
    from workstation import plugins

    class Family:
        classification_markers = ("<cls>",)
    monkeypatch.setattr(plugins, "model_families", lambda: {"othermodel": Family()})
    assert markers_of("othermodel") == ("<cls>",)
    assert markers_of("rexuninlu") == ()                    # not installed here: no markers
