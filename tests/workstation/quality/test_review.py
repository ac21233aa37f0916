"""The review queue's documents for both models and decisions turned into gold."""
from __future__ import annotations

import pytest

from contracts.domain import Document, InputError, Result, Span
from tests.workstation.ui.fake_plugin import FakeFamily, FakeLabelsFamily
from workstation.quality.agreement import agreement, label_set
from workstation.quality.review import NEITHER, documents_for, gold_for, keep_all, label_driven, options, split_types


def test_types_split_on_commas_and_lines_once_each():
    assert split_types("人物, 地点，组织\n人物\n\n") == ["人物", "地点", "组织"]


def test_each_model_reads_the_same_types_its_own_way():
    schema_family, label_family = FakeFamily(), FakeLabelsFamily()
    assert not label_driven(schema_family) and label_driven(label_family)
    texts = ["张三在北京", "", "李四很满意"]
    rex = documents_for(schema_family, "cls", ["正向", "负向"], texts)
    seq = documents_for(label_family, "cls", ["正向", "负向"], texts)
    assert [d.id for d in rex] == [d.id for d in seq] == ["1", "2"]
    assert rex[0].text == "[CLASSIFY]张三在北京" and rex[0].schema == {"正向": None, "负向": None}
    assert seq[0].text == "张三在北京" and (seq[0].task, seq[0].labels) == ("cls", ["正向", "负向"])
    ner = documents_for(schema_family, "ner", ["人物"], texts)
    assert ner[0].text == "张三在北京"
    assert documents_for(label_family, "ner", ["人物"], texts)[0].task == "ext"


@pytest.mark.parametrize("kind, types, texts, words", [
    ("ner", [], ["a"], "type"), ("ner", ["x", "x"], ["a"], "twice"), ("ner", ["x"], ["  "], "text"),
    ("relation", ["x"], ["a"], "unknown kind")])
def test_bad_review_input_says_what_to_fix(kind, types, texts, words):
    with pytest.raises(InputError, match=words):
        documents_for(FakeFamily(), kind, types, texts)


def _disagreeing():
    text = "张三在北京见到李四"
    doc = Document("1", text, schema={"人物": None, "地点": None})
    a = Result("1", [[Span("人物", "张三", (0, 2))], [Span("地点", "北京", (3, 5))], [Span("人物", "李四", (7, 9))]])
    b = Result("1", [[Span("人物", "张三", (0, 2))], [Span("地点", "北京见", (3, 6))],
                     [Span("人物", "王五", None, grounded=False)]])
    return doc, agreement([(doc, a)], [(doc, b)]).documents[0]


def test_decisions_become_the_agreed_spans_plus_each_chosen_version():
    doc, review = _disagreeing()
    kinds = [d.kind for d in review.disagreements]
    assert kinds == ["only B", "boundary", "only A"]             # in text order, what has no place first
    assert options(review.disagreements[0]) == [NEITHER]          # a span not in the text cannot be gold
    assert options(review.disagreements[1]) == ["A", "B", NEITHER]
    gold = gold_for(review, [NEITHER, "B", NEITHER], doc)
    assert gold == [[{"type": "人物", "span": "张三", "offset": [0, 2]}],
                    [{"type": "地点", "span": "北京见", "offset": [3, 6]}]]
    gold = gold_for(review, [NEITHER, "A", "A"], doc)
    assert [t[0]["span"] for t in gold] == ["张三", "北京", "李四"]
    assert gold_for(review, [None, None, None], doc) == [[{"type": "人物", "span": "张三", "offset": [0, 2]}]]
    with pytest.raises(ValueError):
        gold_for(review, ["A"], doc)


def test_keeping_all_of_one_model_makes_its_output_the_gold():
    doc, review = _disagreeing()             # only B (not in the text), boundary, only A
    assert keep_all(review, "A") == [NEITHER, "A", "A"]
    assert [t[0]["span"] for t in gold_for(review, keep_all(review, "A"), doc)] == ["张三", "北京", "李四"]
    assert keep_all(review, "B") == [NEITHER, "B", NEITHER]      # B's 王五 has no place in the text
    assert [t[0]["span"] for t in gold_for(review, keep_all(review, "B"), doc)] == ["张三", "北京见"]
    with pytest.raises(ValueError):
        keep_all(review, "C")


def test_the_label_set_is_the_labels_or_every_schema_key_at_any_depth():
    assert label_set(Document("1", "x", task="ext", labels=["人物", "地点"])) == {"人物", "地点"}
    relation = Document("1", "x", schema={"人物": {"雇主(组织)": None}, "组织": {"成立于(时间)": {"地点": None}}})
    assert label_set(relation) == {"人物", "雇主(组织)", "组织", "成立于(时间)", "地点"}
    assert label_set(Document("1", "x")) is None


def test_a_label_outside_the_label_set_is_apart_and_counts_only_under_all_types():
    doc = Document("1", "张三在北京", task="ext", labels=["人物"])
    a = Result("1", [[Span("人物", "张三", (0, 2))]])
    b = Result("1", [[Span("人物", "张三", (0, 2))], [Span("城市", "北京", (3, 5))], [Span("城市", "北京", None)]])
    result = agreement([(doc, a)], [(doc, b)])
    assert set(result.per_type) == {"人物"} and [r["type"] for r in result.rows()] == ["人物", "(all types)"]
    assert (result.outside["城市"].a, result.outside["城市"].b) == (0, 2)
    assert result.overall.scores()["precision (exact)"] == pytest.approx(1 / 3)
    [document] = result.documents
    assert document.disagreements == [] and [m.text for m in document.outside_b] == ["北京", "北京"]


def test_a_schema_model_marks_a_classification_with_its_own_first_marker_or_is_refused_without_one():
    class OtherMarkers(FakeFamily):
        classification_markers = ("<cls>", "<multi>")

    class NoMarkers(FakeFamily):
        classification_markers = ()
    docs = documents_for(OtherMarkers(), "cls", ["正向"], ["很满意", "<multi>都行"])
    assert [d.text for d in docs] == ["<cls>很满意", "<multi>都行"]
    with pytest.raises(InputError, match="fakeie declares no classification marker"):
        documents_for(NoMarkers(), "cls", ["正向"], ["很满意"])
    assert documents_for(NoMarkers(), "ner", ["人物"], ["张三"])[0].text == "张三"
