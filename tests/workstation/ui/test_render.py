"""Span and tuple rendering: escaping, overlaps, long texts, offsets from a misbehaving model."""
from __future__ import annotations

import re
from types import SimpleNamespace

from contracts.domain import Result, Span
from workstation.ui import render

HOSTILE = '<script>alert("x")</script>'


def test_script_in_text_and_type_names_never_appears_unescaped():
    text = f"{HOSTILE} Alice <img src=x onerror=alert(1)>"
    spans = [Span(HOSTILE, "Alice", (text.index("Alice"), text.index("Alice") + 5)),
             Span('"><b onmouseover=alert(1)>', HOSTILE, (0, len(HOSTILE)))]
    html = render.spans_html(text, spans) + render.legend_html(s.type for s in spans)
    assert "<script" not in html and "<img" not in html and "<b " not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x" in html
    assert 'title="&lt;script&gt;' in html          # attribute values are escaped with quotes too
    assert '&quot;&gt;&lt;b onmouseover' in html


def test_each_span_is_underlined_with_its_type_whole_at_its_start():
    text = "Alice met Bob in Paris."
    spans = [Span("person", "Alice", (0, 5)), Span("place", "Paris", (17, 22))]
    html = render.spans_html(text, spans)
    assert ">Alice</mark>" in html and ">Paris</mark>" in html
    assert html.index(">person</span>") < html.index(">Alice</mark>") < html.index(">place</span>") \
        < html.index(">Paris</mark>")
    chip = html[html.rindex("<span", 0, html.index(">person</span>")):html.index(">person</span>")]
    assert "white-space:nowrap" in chip and "display:inline-block" in chip     # never broken across lines
    assert " met Bob in " in html


def bars(mark: str) -> list[tuple[str, str]]:
    """(colour, vertical position) of each underline bar in a drawn segment."""
    images = re.search(r"background-image:([^;]*);", mark).group(1)
    positions = re.search(r"background-position:([^;]*);", mark).group(1)
    return list(zip(re.findall(r"linear-gradient\((#[0-9a-f]{6}),", images), positions.split(",")))


def test_nested_spans_are_stacked_underlines_each_on_its_own_level():
    text = "New York City"
    outer, inner = Span("city", text, (0, 13)), Span("state", "New York", (0, 8))
    html = render.spans_html(text, [outer, inner])
    both = html[html.index("<mark"):html.index(">New York</mark>")]
    city, state = render.type_color("city", strong=True), render.type_color("state", strong=True)
    assert sorted(c for c, _ in bars(both)) == sorted([city, state])
    assert len({position for _, position in bars(both)}) == 2                   # two levels, not one bar
    only_city = html[html.rindex("<mark"):html.index("> City</mark>")]
    assert bars(only_city) == [(city, dict(bars(both))[city])]                  # the outer bar keeps its level
    assert html.count(">city</span>") == 1 and html.count(">state</span>") == 1
    assert html.index(">city</span>") < html.index(">state</span>") < html.index(">New York</mark>")
    assert 'title="city: New York City / state: New York"' in html


def test_overlapping_spans_take_the_lowest_free_level():
    spans = sorted([Span("a", "", (0, 5)), Span("b", "", (3, 8)), Span("c", "", (6, 9)), Span("d", "", (1, 2))],
                   key=lambda s: (s.offset[0], -s.offset[1]))
    levels = render.span_levels(spans)
    # in order a (0-5), d (1-2), b (3-8), c (6-9): d and b share level 1, c fits under a's level once a ends
    assert [levels[i] for i in range(4)] == [0, 1, 1, 0]
def test_long_text_is_drawn_up_to_the_limit_with_a_note():
    text = "a" * 50 + "Alice" + "b" * 100
    spans = [Span("person", "Alice", (50, 55)), Span("late", "b", (120, 121)), Span("cut", "aAl", (48, 52))]
    html = render.spans_html(text, spans, limit=51)
    assert "Showing the first 51 of 155 characters" in html
    assert ">late</span>" not in html                   # starts past the cut: not drawn (the table has it)
    assert ">cut</span>" in html and ">person</span>" in html   # running past the cut: labelled at the edge
    assert "b" * 10 not in html


def test_offsets_a_model_got_wrong_do_not_break_the_drawing():
    text = "short"
    spans = [Span("empty", "", (2, 2)), Span("reversed", "x", (4, 1)), Span("beyond", "x", (10, 20)),
             Span("negative", "x", (-3, 2)), Span("ok", "ort", (2, 5)), Span("label", "yes", None)]
    html = render.spans_html(text, spans)
    assert ">ok</span>" in html
    for name in ("empty", "reversed", "beyond", "negative", "label"):
        assert f">{name}</span>" not in html
    assert "sh" in html and "ort</mark>" in html


def test_tuples_read_as_lines_and_labels_and_ungrounded_spans_are_told_apart():
    result = Result("1", [
        [Span("组织机构", "央视", (0, 2)), Span("创始人(人物)", "某人", (5, 7))],
        [Span("正向情感", "正向情感", None, confidence=0.93)],
        [Span("place", "Atlantis", None, grounded=False)],
    ])
    rows = render.tuple_rows(result)
    assert rows[0]["extraction"] == "组织机构: 央视 → 创始人(人物): 某人" and rows[0]["kind"] == "2 linked spans"
    assert rows[0]["offsets"] == "[0, 2); [5, 7)"
    assert rows[1]["confidence"] == 0.93
    assert rows[2]["grounded"] is False
    assert [s.type for s in render.labels(result)] == ["正向情感"]
    assert [s.span for s in render.ungrounded(result)] == ["Atlantis"]
    assert [s.span for s in render.located_spans(result)] == ["央视", "某人"]


def test_a_span_in_several_tuples_is_drawn_once():
    head = Span("org", "Acme", (0, 4))
    result = Result("1", [[head, Span("founder", "Ann", (10, 13))], [head, Span("hq", "Oslo", (20, 24))]])
    assert [s.span for s in render.located_spans(result)] == ["Acme", "Ann", "Oslo"]


def test_type_colours_are_stable_and_differ_between_types():
    assert render.type_color("人物") == render.type_color("人物")
    assert render.type_color("人物") != render.type_color("地理位置")
    assert render.type_color(HOSTILE).startswith("#") and len(render.type_color(HOSTILE)) == 7


def test_comparison_rows_list_what_differs_per_document():
    docs = [SimpleNamespace(doc_id="d1", in_a=True, in_b=True, both=[(("p", "Al", (0, 2)),)],
                            only_a=[(("p", "Bo", (3, 5)),)], only_b=[(("p", "Cy", None),)]),
            SimpleNamespace(doc_id="d2", in_a=False, in_b=True, both=[], only_a=[], only_b=[])]
    rows = render.comparison_rows(docs)
    assert rows == [
        {"document": "d1", "change": "only in A", "extraction": "p: Bo [3, 5)"},
        {"document": "d1", "change": "only in B", "extraction": "p: Cy"},
        {"document": "d2", "change": "only in B", "extraction": "(the whole document)"},
    ]


def test_user_text_in_markdown_cannot_become_a_link_image_or_formatting():
    from workstation.ui.render import md_text
    assert md_text("![x](http://evil/a.png)") == r"\!\[x\]\(http://evil/a\.png\)"
    assert md_text("**bold** `code` $x$") == r"\*\*bold\*\* \`code\` \$x\$"
    assert md_text("人物-数据集_1") == r"人物\-数据集\_1"


def test_the_unread_part_is_greyed_out_and_still_escaped():
    text = f"{HOSTILE} was cut. Alice read."
    start = text.index("Alice")
    html = render.spans_html(text, [Span("person", "Alice", (start, start + 5))], unread=[(0, start - 1)])
    grey = html[:html.index("<mark")]
    assert 'class="iew-unread"' in grey and "&lt;script&gt;" in grey and "<script" not in html
    assert html.count('class="iew-unread"') == 1                     # the read part is drawn as before
    assert 'class="iew-unread"' not in html[html.index("<mark"):]


def test_the_coverage_note_says_how_much_was_read():
    assert render.coverage_note("abc def", None) is None
    assert "all of the text" in render.coverage_note("abc def", [(0, 7)])
    assert "read 3 of 6 characters" in render.coverage_note("abc def", [(4, 7)])


def test_a_huge_text_is_cut_into_pages_that_cover_it_without_splitting_words():
    text = ("word " * 9 + "end\n") * 1_000                     # 48,000 characters
    pages = render.text_pages(text)
    assert pages[0][0] == 0 and pages[-1][1] == len(text) and len(pages) >= len(text) // render.PAGE_CHARS
    assert all(a[1] == b[0] for a, b in zip(pages, pages[1:]))
    assert all(end - start <= render.PAGE_CHARS and text[end - 1] == "\n" for start, end in pages[:-1])
    assert render.text_pages("") == [(0, 0)] and render.text_pages("abc") == [(0, 3)]


def test_a_page_draws_only_its_window_with_spans_shifted_and_clipped():
    text = "aaaa BBBB cccc DDDD"
    spans = [Span("b", "BBBB", (5, 9)), Span("d", "DDDD", (15, 19)), Span("x", "cccc DD", (10, 17))]
    html = render.spans_html(text, spans, limit=9, start=10)      # "cccc DDDD"
    assert "BBBB" not in html and "aaaa" not in html
    assert ">cccc </mark>" in html and ">DD</mark>" in html      # offsets shifted to the window; overlaps nest
    assert html.count(">x</span>") == 1 and html.count(">d</span>") == 1


def test_a_huge_result_renders_in_pages():
    from streamlit.testing.v1 import AppTest
    script = '''
import streamlit as st
from contracts.domain import Document, Result, Span
from workstation.ui import results
text = ("张三在北京工作。" * 2_500)                                   # 20,000 characters
spans = [Span("人物", "张三", (i, i + 2)) for i in range(0, len(text), 8)]
results.document_result(Document("1", text), Result("1", [[s] for s in spans]), key="big")
'''
    at = AppTest.from_string(script, default_timeout=60).run()
    assert not at.exception
    drawn = [h.value for h in at.get("html") if "iew-text" in h.value]
    assert len(drawn) == 1 and drawn[0].count("<mark") <= render.PAGE_CHARS // 8 + 1
    pager = at.number_input(key="text-page-big")
    assert pager.max == len(render.text_pages("张三在北京工作。" * 2_500)) >= 5
    pager.set_value(3).run()
    drawn = [h.value for h in at.get("html") if "iew-text" in h.value]
    assert len(drawn) == 1 and any("Characters 8,000" in c.value for c in at.caption)


def test_confidence_is_a_number_column_or_absent_never_the_text_none():
    import pandas as pd

    from workstation.ui.results import with_confidence
    mixed = with_confidence(pd.DataFrame([{"tuple": "a", "confidence": 0.5}, {"tuple": "b", "confidence": None}]))
    assert str(mixed["confidence"].dtype) == "float64" and mixed["confidence"].isna().tolist() == [False, True]
    none = with_confidence(pd.DataFrame([{"tuple": "a", "confidence": None}]))
    assert "confidence" not in none.columns
