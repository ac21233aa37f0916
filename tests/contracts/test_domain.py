"""Span and Result are plain values, and a Result's JSON line is its to_json() on one line, to the byte."""
from __future__ import annotations

import copy
import json
import pickle
import random

import msgspec
import orjson
import pytest

from contracts.domain import Result, Span, read_output


def test_a_span_is_a_frozen_value_that_copies_and_pickles_as_itself():
    span = Span("人物", "张三", (3, 5), 0.9731)
    assert span == Span("人物", "张三", (3, 5), confidence=0.9731) and hash(span) == hash(Span("人物", "张三", (3, 5), 0.9731))
    assert span != Span("人物", "张三", (3, 5)) and (span.grounded, Span("x", "y", None).confidence) == (None, None)
    for again in (pickle.loads(pickle.dumps(span)), copy.copy(span), copy.deepcopy(span), msgspec.structs.replace(span)):
        assert again == span and again.to_json() == span.to_json()
    with pytest.raises(AttributeError):
        span.span = "李四"


def old_json_text(result: Result) -> str:
    """The definition the JSON line keeps to the byte: to_json() as orjson writes it."""
    return orjson.dumps(result.to_json()).decode()


def every_kind_of_result() -> list[Result]:
    span = Span("组织机构", "中央电视台", (0, 5), 0.8)
    return [
        Result("7", [[span, Span("创始人(人物)", "张三\n\"x\"", (6, 8))], [Span("正向", "[CLASSIFY]", (0, 10), 0.5)],
                     [Span("人物", "王五", None, grounded=False)]], raw=["原文"], warnings=["cut"], coverage=[(0, 12)]),
        Result("rex", [[Span("人物", "张三", (0, 2), 0.9731)], [Span("地点", "北京", (3, 5))],
                       [span, Span("创始人(人物)", "张三", (6, 8), 1e-7)]], coverage=[(0, 12)]),
        Result("seqgpt", [[Span("人物", "李四", (1, 3), grounded=True)], [Span("地点", "火星", None, grounded=False)],
                          [Span("label", "体育", None, 0.5, True)]], raw=["人物: 李四", "地点: 火星"], coverage=[(0, 4)]),
        Result("controls", [[Span("x\u2028", "\x00\x1f\x7f</script>\\", (0, 1), 0.0), Span("😀", "\ud7ff", [0, 1], 1)]]),
        Result("empty"), Result("blank tuple", [[]], coverage=[]),
    ]


@pytest.mark.parametrize("result", every_kind_of_result(), ids=lambda r: r.document_id)
def test_json_text_is_to_json_on_one_line_to_the_byte(result):
    text = result.to_json_text()
    assert text == old_json_text(result) and result.to_json_line() == text.encode()
    assert "\n" not in text and json.loads(text) == result.to_json()
    assert Result.from_json(json.loads(text)).to_json() == result.to_json()
    assert json.loads(result.output_json_text()) == result.to_json()["output"]


def test_confidences_are_written_as_orjson_writes_them():
    rng = random.Random(5)
    confidences = [rng.random() for _ in range(2000)] + [round(rng.random(), 4) for _ in range(2000)] + [1e-5, 1.0]
    result = Result("c", [[Span("x", "y", (0, 1), c)] for c in confidences])
    assert result.to_json_text() == old_json_text(result)


def test_an_output_reads_back_from_its_json_as_the_same_spans():
    for result in every_kind_of_result():
        back = read_output(result.output_json())
        assert [[s.to_json() for s in t] for t in back] == result.to_json()["output"]


def test_without_empty_spans_drops_whole_tuples_only_when_one_is_empty():
    good = [Span("人物", "张三", (0, 2))]
    result = Result("1", [good, [Span("人物", "李四", (3, 5)), Span("地点", "", (3, 0))]])
    assert result.without_empty_spans().tuples == [good]
    clean = Result("2", [good])
    assert clean.without_empty_spans() is clean


@pytest.mark.parametrize("span", [Span("x", "", (3, 0)), Span("x", "ab", (2, 2)), Span("x", "", (0, 2)),
                                  Span("x", "ab", (5, 1)), Span("x", "", (3, 0), 0.6), Span("x", "ab", (0, 2)),
                                  Span("x", "ab", (0, 2), 0.5), Span("正向情感", "", None), Span("x", "ab", None)])
def test_without_empty_spans_tests_each_span_as_span_empty_does(span):
    good = [Span("人物", "张三", (0, 2))]
    result = Result("1", [good, [span]])
    assert result.without_empty_spans().tuples == ([good] if span.empty else [good, [span]])


def test_a_result_is_a_plain_value_with_no_hidden_state():
    result = Result("7", [[Span("人物", "张三", (0, 2), 0.9)]], warnings=["w"])
    assert not hasattr(result, "__dict__")                      # its fields are all it holds
    assert pickle.loads(pickle.dumps(result)) == result == copy.deepcopy(result)
    assert result.tuple_count == 1
