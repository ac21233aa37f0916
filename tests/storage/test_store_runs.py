"""Recording, finding, reading and deleting runs."""
from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

import pytest

from contracts.domain import Document, Result, Span
from storage import open_store, record_cli_run
from storage.repository import NotFound, weights_checksum
from tests.storage.sample_runs import make_report, ner_run


def test_recorded_run_reads_back_identical(recorded):
    store, run_id = recorded
    docs, results = ner_run()
    detail = store.get_run(run_id)
    assert [d for d, _ in detail.items] == docs
    assert [r for _, r in detail.items] == results                 # offsets, confidence, grounded, raw, warnings
    s = detail.summary
    assert (s.source, s.model, s.task, s.documents, s.tokens, s.demo) == ("ui", "rexuninlu", "relation", 2, 123, True)
    assert s.docs_per_second == pytest.approx(1.0) and s.wall_seconds == 2.0
    assert s.created_at == datetime(2026, 3, 1, 10, tzinfo=timezone.utc)
    assert detail.settings == {"x": 1}


def test_json_is_stored_readably_not_as_unicode_escapes(recorded):
    store, run_id = recorded
    with sqlite3.connect(store.path) as conn:
        stored = conn.execute("SELECT schema FROM documents WHERE doc_id = 'd0'").fetchone()[0]
    assert "人物" in stored and "\\u" not in stored


def test_record_refuses_results_that_do_not_match_the_documents(store):
    docs, results = ner_run()
    with pytest.raises(ValueError, match="2 documents"):
        store.record_run(make_report(results[:1]), docs, "ui")
    with pytest.raises(ValueError, match="order"):
        store.record_run(make_report(results[::-1]), docs, "ui")
    with pytest.raises(ValueError, match="source"):
        store.record_run(make_report(results), docs, "web")
    assert store.search_runs() == []


def test_weights_checksum_sees_a_changed_config_or_weight_file(tmp_path):
    weights = tmp_path / "ckpt"
    weights.mkdir()
    (weights / "config.json").write_text('{"hidden_size": 768}')
    (weights / "pytorch_model.bin").write_bytes(b"\0" * 100)
    first = weights_checksum(weights)
    assert first == weights_checksum(weights) and len(first) == 64
    (weights / "config.json").write_text('{"hidden_size": 1024}')
    second = weights_checksum(weights)
    assert second != first
    (weights / "pytorch_model.bin").write_bytes(b"\0" * 101)
    assert weights_checksum(weights) != second
    assert weights_checksum(tmp_path / "missing") is None and weights_checksum("") is None


def test_run_stores_the_weights_checksum(store, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    docs, results = ner_run()
    run_id = store.record_run(make_report(results, weights=str(tmp_path)), docs, "cli")
    assert store.get_run(run_id).summary.weights_checksum == weights_checksum(tmp_path)


def _record(store, text, model="rexuninlu", task=None, when="2026-03-01T10:00:00+00:00", spans=(), label=None):
    doc = Document("x", text, {"类型": None})
    result = Result("x", [[s] for s in spans])
    return store.record_run(make_report([result], model=model, started_at=when), [doc], "ui", task, label=label)


def test_search_finds_chinese_words_of_any_length_and_span_text(store):
    a = _record(store, "我在北京大学读书", spans=[Span("机构", "北京大学", (2, 6))])
    b = _record(store, "上海的天气很好", spans=[Span("地点", "沪", None, grounded=False)])
    assert [r.id for r in store.search_runs("北京")] == [a]               # 2 characters: LIKE fallback
    assert [r.id for r in store.search_runs("北京大学")] == [a]           # 3+: trigram index
    assert [r.id for r in store.search_runs("沪")] == [b]                 # only in a generated span
    assert [r.id for r in store.search_runs("类型")] == [b, a]            # in the schema
    assert [r.id for r in store.search_runs("天气 上海")] == [b]          # every term must match
    assert store.search_runs("北京 天气") == []


def test_search_treats_like_wildcards_literally(store):
    pct = _record(store, "打折 50% off")
    plain = _record(store, "nothing special_here")
    assert [r.id for r in store.search_runs("%")] == [pct]
    assert [r.id for r in store.search_runs("_")] == [plain]
    assert [r.id for r in store.search_runs('"quoted')] == []              # a quote cannot break the query


def test_search_filters_by_model_task_time_label_and_pages_newest_first(store):
    old = _record(store, "文本一", model="seqgpt", task="ner", when="2026-01-01T00:00:00+00:00")
    mid = _record(store, "文本二", model="rexuninlu", task="ner", when="2026-02-01T00:00:00+00:00", label="基线")
    new = _record(store, "文本三", model="rexuninlu", task="cls", when="2026-03-01T00:00:00+00:00")
    assert [r.id for r in store.search_runs()] == [new, mid, old]
    assert [r.id for r in store.search_runs(model="rexuninlu")] == [new, mid]
    assert [r.id for r in store.search_runs(task="ner")] == [mid, old]
    jan15 = datetime(2026, 1, 15, tzinfo=timezone.utc)
    assert [r.id for r in store.search_runs(since=jan15)] == [new, mid]
    assert [r.id for r in store.search_runs(until=jan15)] == [old]
    assert [r.id for r in store.search_runs(limit=1, offset=1)] == [mid]
    assert [r.id for r in store.search_runs("基线")] == [mid]
    assert store.count_runs(model="rexuninlu") == 2
    assert store.run_filters() == {"model": ["rexuninlu", "seqgpt"], "task": ["cls", "ner"], "source": ["ui"]}


def test_update_run_sets_and_clears_label_and_note(recorded):
    store, run_id = recorded
    store.update_run(run_id, label="fp16 试验", note="looks fine")
    assert [r.id for r in store.search_runs("试验")] == [run_id]
    store.update_run(run_id)
    assert store.get_run(run_id).summary.label is None


def test_delete_run_removes_documents_results_and_search_entries(recorded):
    store, run_id = recorded
    assert store.delete_run(run_id) is True
    with pytest.raises(NotFound):
        store.get_run(run_id)
    with sqlite3.connect(store.path) as conn:
        counts = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("documents", "results", "document_search")]
    assert counts == [0, 0, 0]
    assert store.search_runs("北京") == []
    assert store.delete_run(run_id) is False


def test_cli_records_through_record_cli_run(tmp_path):
    docs, results = ner_run()
    db = tmp_path / "new" / "dir" / "runs.db"
    run_id = record_cli_run(make_report(results), docs, db, task="ner")
    store = open_store(db)
    assert store.get_run(run_id).summary.source == "cli"
    store.close()
