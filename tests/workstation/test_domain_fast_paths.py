"""The domain's fast paths for dense outputs are the same values as the plain ones."""
from __future__ import annotations

import dataclasses
import json

import pytest

from contracts.domain import Result, Span


def test_a_located_span_is_the_span_its_constructor_makes():
    fast, plain = Span.located("人物", "张三", (3, 5), 0.9731), Span("人物", "张三", (3, 5), 0.9731)
    assert fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
    assert dataclasses.asdict(fast) == dataclasses.asdict(plain) and fast.to_json() == plain.to_json()
    assert Span.located("x", "y", (0, 1)) == Span("x", "y", (0, 1))           # no confidence
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.span = "李四"


def test_json_text_is_to_json_on_one_line():
    result = Result("7", [[Span("组织机构", "中央电视台", (0, 5), 0.8), Span("创始人(人物)", "张三\n\"x\"", (6, 8))],
                          [Span("正向", "[CLASSIFY]", (0, 10), 0.5)], [Span("人物", "王五", None, grounded=False)]],
                    raw=["原文"], warnings=["cut"], coverage=[(0, 12)])
    text = result.to_json_text()
    assert "\n" not in text and "张三" in text                               # one line, not ASCII-escaped
    assert json.loads(text) == result.to_json()
    assert Result.from_json(json.loads(text)) == result


def test_without_empty_spans_drops_whole_tuples_only_when_one_is_empty():
    good = [Span("人物", "张三", (0, 2))]
    result = Result("1", [good, [Span("人物", "李四", (3, 5)), Span("地点", "", (3, 0))]])
    assert result.without_empty_spans().tuples == [good]
    clean = Result("2", [good])
    assert clean.without_empty_spans() is clean
