"""A run's document table (a page at a time, filtered, counted in SQL) and search that finds documents with
a snippet of where the words are."""
from __future__ import annotations

import pytest

from contracts.domain import Document, Result, Span
from storage.repository import DocumentFilter, NotFound
from storage.run_documents import snippet
from tests.storage.sample_runs import make_report


def _doc(i: int) -> tuple[Document, Result]:
    """Document i: 人物 张三 (confidence 0.9 - i/100), a 地点 every third, the 人物 repeated in a relation."""
    text = f"第{i}篇：张三在北京工作。" + "字" * i
    person = Span("人物", "张三", (text.index("张三"), text.index("张三") + 2), round(0.9 - i / 100, 2))
    tuples = [[person]]
    if i % 3 == 0:
        place = Span("地点", "北京", (text.index("北京"), text.index("北京") + 2), 0.5)
        tuples += [[person, place]]                     # the person again, as a relation's subject
    return Document(f"doc-{i}", text, {"人物": None, "地点": None}), Result(f"doc-{i}", tuples,
                                                                           coverage=[(0, len(text) - (i == 4))])


@pytest.fixture
def big_run(store):
    pairs = [_doc(i) for i in range(30)]
    run_id = store.record_run(make_report([r for _, r in pairs]), [d for d, _ in pairs], "batch")
    return store, run_id


def test_document_page_lists_a_page_with_lengths_counts_per_type_cut_and_lowest_confidence(big_run):
    store, run_id = big_run
    page = store.document_page(run_id, limit=10, offset=0)
    assert page.total == 30 and [r.position for r in page.rows] == list(range(10))
    first, fourth = page.rows[0], page.rows[3]
    assert first.doc_id == "doc-0" and first.characters == len("第0篇：张三在北京工作。")
    assert first.spans == {"人物": 1, "地点": 1}                    # the subject repeated in a relation counts once
    assert page.rows[1].spans == {"人物": 1}
    assert first.min_confidence == 0.5 and page.rows[1].min_confidence == 0.89
    assert fourth.cut is False and page.rows[4].cut is True
    assert page.types == {"人物": 30, "地点": 10}                  # over every document, not only the page
    assert [r.position for r in store.document_page(run_id, limit=10, offset=25).rows] == [25, 26, 27, 28, 29]


def test_document_page_filters_by_type_confidence_text_and_cut_and_counts_what_passes(big_run):
    store, run_id = big_run
    places = store.document_page(run_id, DocumentFilter(types=("地点",)), limit=100)
    assert [r.position for r in places.rows] == list(range(0, 30, 3)) and places.total == 10
    assert places.types == {"人物": 10, "地点": 10}
    uncertain = store.document_page(run_id, DocumentFilter(confidence=(0.6, 0.7)), limit=100)
    assert [r.position for r in uncertain.rows] == [20, 22, 23, 25, 26, 28, 29]   # multiples of 3 sit at 0.5
    texts = store.document_page(run_id, DocumentFilter(text="第12篇"), limit=100)
    assert [r.doc_id for r in texts.rows] == ["doc-12"]
    assert store.document_page(run_id, DocumentFilter(cut_only=True)).total == 1
    assert store.document_page(run_id, DocumentFilter(types=("地点",), text="第1")).total == 3   # 12, 15, 18


def test_document_page_text_filter_treats_like_wildcards_literally(store):
    docs = [Document("a", "100% sure"), Document("b", "1000 sure"), Document("c", "a_b"), Document("d", "axb")]
    run_id = store.record_run(make_report([Result(d.id) for d in docs]), docs, "ui")
    assert [r.doc_id for r in store.document_page(run_id, DocumentFilter(text="0%")).rows] == ["a"]
    assert [r.doc_id for r in store.document_page(run_id, DocumentFilter(text="_")).rows] == ["c"]


def test_document_page_of_a_run_without_spans_lists_every_document_with_no_counts(store):
    docs = [Document("a", "一"), Document("b", "二")]
    run_id = store.record_run(make_report([Result("a"), Result("b")]), docs, "ui")
    page = store.document_page(run_id)
    assert [(r.doc_id, r.spans, r.min_confidence, r.cut) for r in page.rows] == [("a", {}, None, None),
                                                                                ("b", {}, None, None)]
    assert page.types == {} and store.span_types(run_id) == []


def test_run_document_and_run_header_read_one_document_without_the_rest(big_run):
    store, run_id = big_run
    doc, result = store.run_document(run_id, 12)
    assert (doc, result) == _doc(12)
    header = store.run_header(run_id)
    assert header.items == [] and header.summary.documents == 30 and header.summary.cut_documents == 1
    with pytest.raises(NotFound, match="position 30"):
        store.run_document(run_id, 30)
    assert store.span_types(run_id) == ["人物", "地点"]


def test_search_documents_returns_each_matching_document_with_the_words_marked(big_run):
    store, run_id = big_run
    other = store.record_run(make_report([Result("x")]), [Document("x", "李四在上海，张三也在。")], "ui")
    hits = store.search_documents("张三 上海")
    assert [(h.run_id, h.doc_id) for h in hits] == [(other, "x")]
    assert hits[0].snippet == [("李四在", False), ("上海", True), ("，", False), ("张三", True), ("也在。", False)]
    assert hits[0].in_text
    assert store.count_documents("张三") == 31 and len(store.search_documents("张三", limit=5)) == 5
    assert [h.doc_id for h in store.search_documents("第7篇")] == ["doc-7"]
    assert store.search_documents("   ") == [] and store.count_documents("") == 0


def test_search_documents_found_by_an_extracted_span_or_schema_says_the_words_are_not_in_the_text(store):
    doc = Document("a", "一段文字", {"人物类型": None})
    store.record_run(make_report([Result("a")]), [doc], "ui")
    (hit,) = store.search_documents("人物类型")
    assert hit.snippet == [("一段文字", False)] and not hit.in_text


def test_snippet_cuts_long_text_around_the_first_match_case_insensitively():
    text = "a" * 100 + "Beijing" + "b" * 100
    pieces, in_text = snippet(text, ["beijing"], width=5)
    assert in_text and pieces == [("…", False), ("aaaaa", False), ("Beijing", True), ("bbbbb…", False)]
    pieces, _ = snippet("<b>x</b> & y", ["x"])
    assert pieces == [("<b>", False), ("x", True), ("</b> & y", False)]     # plain text: the UI escapes it


def test_document_positions_then_rows_page_through_a_filter_read_once(big_run):
    store, run_id = big_run
    places = store.document_positions(run_id, DocumentFilter(types=("地点",)))
    assert places == list(range(0, 30, 3))
    rows = store.document_rows(run_id, places[2:4])
    assert [(r.position, r.spans, r.min_confidence) for r in rows] == [(6, {"人物": 1, "地点": 1}, 0.5),
                                                                      (9, {"人物": 1, "地点": 1}, 0.5)]
    assert rows == store.document_page(run_id, DocumentFilter(types=("地点",)), limit=2, offset=2).rows
    assert store.document_positions(run_id) == list(range(30)) and store.document_rows(run_id, []) == []


def test_search_documents_keeps_to_the_runs_model_and_task(store):
    doc = Document("a", "张三在北京")
    rex = store.record_run(make_report([Result("a")]), [doc], "ui", task="ner")
    gen = store.record_run(make_report([Result("a")], model="seqgpt"), [doc], "ui", task="ext")
    assert [h.run_id for h in store.search_documents("北京")] == [gen, rex]
    assert [h.run_id for h in store.search_documents("北京", model="rexuninlu")] == [rex]
    assert [h.run_id for h in store.search_documents("北京", task="ext")] == [gen]
    assert store.count_documents("北京", model="seqgpt", task="ner") == 0


def test_span_counts_count_the_spans_of_the_documents_that_pass(big_run):
    store, run_id = big_run
    assert store.span_counts(run_id) == {"人物": 30, "地点": 10}
    assert store.span_counts(run_id, DocumentFilter(text="第1")) == {"人物": 11, "地点": 3}    # 1, 10-19; 12, 15, 18
