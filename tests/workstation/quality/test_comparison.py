"""Two recorded runs compared tuple by tuple (History's compare): quality.comparison over the store's runs."""
from __future__ import annotations

import pytest

from contracts.domain import Document, Result, Span
from storage import open_store
from storage.views import NotFound
from tests.storage.sample_runs import make_report
from workstation.quality.comparison import compare_runs


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "runs.db")
    yield s
    s.close()


def test_compare_runs_splits_tuples_into_only_a_only_b_and_both(store):
    docs = [Document("p", "阿里巴巴在杭州"), Document("q", "腾讯在深圳")]
    common = [Span("组织", "阿里巴巴", (0, 4))]
    a = store.record_run(make_report([Result("p", [common, [Span("地点", "杭州", (5, 7))]]), Result("q", [])],
                                     wall_seconds=4.0, peak=1000), docs, "ui")
    b = store.record_run(make_report([Result("p", [common]), Result("q", [[Span("地点", "深圳", (3, 5))]])],
                                     wall_seconds=1.0, peak=500, dtype="fp16"), docs, "ui")
    cmp = compare_runs(store, a, b)
    p, q = cmp.documents
    assert (p.doc_id, p.both, p.only_a, p.only_b) == ("p", [(("组织", "阿里巴巴", (0, 4)),)],
                                                       [(("地点", "杭州", (5, 7)),)], [])
    assert (q.only_a, q.only_b) == ([], [(("地点", "深圳", (3, 5)),)])
    assert (cmp.only_a, cmp.only_b, cmp.both, cmp.identical) == (1, 1, 1, False)
    assert (cmp.a.wall_seconds, cmp.b.wall_seconds, cmp.a.peak_memory_bytes, cmp.b.dtype) == (4.0, 1.0, 1000, "fp16")
    assert compare_runs(store, a, a).identical


def test_compare_runs_over_different_inputs_marks_missing_documents(store):
    a = store.record_run(make_report([Result("p", [[Span("x", "a", (0, 1))]])]), [Document("p", "a")], "ui")
    b = store.record_run(make_report([Result("z", [])]), [Document("z", "b")], "ui")
    rows = compare_runs(store, a, b).documents
    assert [(r.doc_id, r.in_a, r.in_b, len(r.only_a)) for r in rows] == [("p", True, False, 1), ("z", False, True, 0)]


def test_compare_runs_matches_documents_by_id_and_text_and_names_texts_that_differ(store):
    same = [Span("x", "a", (0, 1))]
    a = store.record_run(make_report([Result("p", [same]), Result("q", [same])]),
                         [Document("p", "a"), Document("q", "a b")], "ui")
    b = store.record_run(make_report([Result("p", [same]), Result("q", [same])]),
                         [Document("p", "a"), Document("q", "a c")], "ui")
    cmp = compare_runs(store, a, b)
    assert cmp.texts_differ == ["q"] and not cmp.same_inputs and not cmp.identical
    assert [(d.doc_id, d.text, d.in_a, d.in_b) for d in cmp.documents] == [
        ("p", "a", True, True), ("q", "a b", True, False), ("q", "a c", False, True)]
    assert compare_runs(store, a, a).same_inputs and compare_runs(store, a, a).identical


def test_comparing_a_run_that_is_not_in_the_history_is_not_found(store):
    a = store.record_run(make_report([Result("p", [])]), [Document("p", "a")], "ui")
    with pytest.raises(NotFound):
        compare_runs(store, a, a + 1)


def test_the_store_keeps_only_queries_and_compares_nothing(store):
    # Comparing is the application's (quality.comparison); storage hands out the runs.
    import storage.views
    assert not hasattr(store, "compare_runs") and not hasattr(storage.views, "RunComparison")
