"""The domain's fast paths for dense outputs are the same values as the plain ones."""
from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import orjson
import pytest

from contracts.domain import Result, Span

LOCATED = [Span.located("人物", "张三", (3, 5), 0.9731), Span.located("x", "y", (0, 1))]      # with, without confidence


@pytest.mark.parametrize("fast", LOCATED, ids=["confidence", "no-confidence"])
def test_a_located_span_is_the_span_its_constructor_makes(fast):
    plain = Span(fast.type, fast.span, fast.offset, fast.confidence)
    assert fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
    assert (fast.confidence, fast.grounded) == (plain.confidence, plain.grounded)
    assert dataclasses.asdict(fast) == dataclasses.asdict(plain) and dataclasses.astuple(fast) == dataclasses.astuple(plain)
    assert fast.to_json() == plain.to_json() and not fast.empty
    assert dataclasses.replace(fast, span="李四") == dataclasses.replace(plain, span="李四")
    for again in (pickle.loads(pickle.dumps(fast)), copy.copy(fast), copy.deepcopy(fast)):
        assert again == plain and again.to_json() == plain.to_json()
    for name in ("span", "confidence", "grounded"):                 # fields it holds and fields it leaves out
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(fast, name, None)


@pytest.mark.parametrize("fast", LOCATED, ids=["confidence", "no-confidence"])
def test_a_located_span_holds_exactly_what_to_json_emits(fast):
    """Result.to_json_text hands a located span's __dict__ to orjson as it is: same keys, same order."""
    assert list(vars(fast)) == list(fast.to_json())
    assert orjson.dumps(vars(fast)) == orjson.dumps(fast.to_json())


def old_json_text(result: Result) -> str:
    """to_json_text as it was before the fast path: the definition the fast path must keep to the byte."""
    return orjson.dumps(result.to_json()).decode()


def every_kind_of_result() -> list[Result]:
    located = Span.located("组织机构", "中央电视台", (0, 5), 0.8)
    plain = Span("创始人(人物)", "张三\n\"x\"", (6, 8))
    return [
        Result("7", [[located, plain], [Span("正向", "[CLASSIFY]", (0, 10), 0.5)], [Span("人物", "王五", None, grounded=False)]],
               raw=["原文"], warnings=["cut"], coverage=[(0, 12)]),
        Result("rex", [[Span.located("人物", "张三", (0, 2), 0.9731)], [Span.located("地点", "北京", (3, 5))],
                       [located, Span.located("创始人(人物)", "张三", (6, 8), 0.6)]], coverage=[(0, 12)]),
        Result("seqgpt", [[Span("人物", "李四", (1, 3), grounded=True)], [Span("地点", "火星", None, grounded=False)],
                          [Span("label", "体育", None, 0.5, True)]], raw=["人物: 李四", "地点: 火星"], coverage=[(0, 4)]),
        Result("copied", [[pickle.loads(pickle.dumps(located)), dataclasses.replace(located, confidence=None),
                           Span.from_json(located.to_json()), copy.deepcopy(Span.located("x", "y", (0, 1)))]]),
        Result("empty"), Result("blank tuple", [[]], coverage=[]),
    ]


@pytest.mark.parametrize("result", every_kind_of_result(), ids=lambda r: r.document_id)
def test_json_text_is_to_json_on_one_line_to_the_byte(result):
    text = result.to_json_text()
    assert text == old_json_text(result)
    assert "\n" not in text and json.loads(text) == result.to_json()
    assert Result.from_json(json.loads(text)) == result


def test_without_empty_spans_drops_whole_tuples_only_when_one_is_empty():
    good = [Span("人物", "张三", (0, 2))]
    result = Result("1", [good, [Span("人物", "李四", (3, 5)), Span("地点", "", (3, 0))]])
    assert result.without_empty_spans().tuples == [good]
    clean = Result("2", [good])
    assert clean.without_empty_spans() is clean


@pytest.mark.parametrize("span", [Span("x", "", (3, 0)), Span("x", "ab", (2, 2)), Span("x", "", (0, 2)),
                                  Span("x", "ab", (5, 1)), Span.located("x", "", (3, 0), 0.6), Span("x", "ab", (0, 2)),
                                  Span.located("x", "ab", (0, 2)), Span("正向情感", "", None), Span("x", "ab", None)])
def test_without_empty_spans_tests_each_span_as_span_empty_does(span):
    good = [Span("人物", "张三", (0, 2))]
    result = Result("1", [good, [span]])
    assert result.without_empty_spans().tuples == ([good] if span.empty else [good, [span]])


def dense_result() -> Result:
    return Result("7", [[Span.located("人物", "张三", (3, 5), 0.9731), Span("x", "y", (0, 1), None, True)],
                        [Span("e", "", (4, 4))], [Span.located("地点", "北京", (9, 11))]],
                  warnings=["w"], coverage=[(0, 12)])


def test_a_serialised_result_is_its_json_text_and_reads_back_as_the_result():
    plain = dense_result().without_empty_spans()
    sent = pickle.loads(pickle.dumps(dense_result().serialised()))
    assert "tuples" not in vars(sent)                                    # crossed as JSON, not as Spans
    assert isinstance(vars(sent)["_output"], bytes)                      # UTF-8 as written: nothing decoded
    assert sent.to_json_line() == plain.to_json_line() == plain.to_json_text().encode()
    assert sent.output_json_text() == plain.output_json_text() and "\\u" not in sent.to_json_text()
    assert sent.to_json_text() == plain.to_json_text() and sent.to_json() == plain.to_json()
    assert sent.tuple_count == 2 and sent.without_empty_spans() is sent
    assert sent == plain and sent.tuples == plain.tuples                  # parsed when read, then plain
    assert "_output" not in vars(sent) and sent.tuple_count == 2
    for again in (copy.deepcopy(dense_result().serialised()), dataclasses.replace(dense_result().serialised())):
        assert again == plain and again.to_json_text() == plain.to_json_text()


@pytest.mark.parametrize("change", ["tuples", "warnings", "document_id"])
def test_setting_a_field_of_a_serialised_result_is_never_hidden_by_its_old_text(change):
    sent = dense_result().serialised()
    value = {"tuples": [], "warnings": ["other"], "document_id": "8"}[change]
    setattr(sent, change, value)
    expected = dataclasses.replace(dense_result().without_empty_spans(), **{change: value})
    assert sent.to_json_text() == expected.to_json_text() and sent == expected


def test_the_tuple_cap_keeps_the_first_tuples_of_a_serialised_result():
    from workstation.engine import capped
    sent = capped(dense_result().serialised(), 1)
    assert [[s.span for s in t] for t in sent.tuples] == [["张三", "y"]]
    assert json.loads(sent.to_json_text())["warnings"][-1].startswith("1 more tuple(s) were dropped")
    assert capped(dense_result().serialised(), 2).to_json_text() == dense_result().without_empty_spans().to_json_text()


def test_history_stores_a_serialised_results_output_text_without_parsing_it(store):
    """Recording dense outputs parsed every span back and dumped it again, costing more than the run's decoding:
    the output's JSON text goes into the JSON column as it is, and reads back as the same Result."""
    from contracts.domain import Document
    from contracts.report import RunReport
    plain = dense_result().without_empty_spans()
    sent = pickle.loads(pickle.dumps(dense_result().serialised()))
    assert json.loads(sent.output_json_text()) == plain.to_json()["output"]
    writer = store.run_writer("cli")
    report = RunReport("rexuninlu", "w", True, "cpu", "fp32", "eager", {}, 8, {}, "2026-12-04T00:00:00")
    writer.start(report)
    writer.add(Document("7", "0123张三5678北京1", {"人物": None}), sent)
    assert "_output" in vars(sent)                                    # still its text: nothing was parsed
    report.documents, report.wall_seconds = 1, 1.0
    [(_, stored)] = store.get_run(writer.finish(report)).items
    assert stored.to_json() == plain.to_json()
