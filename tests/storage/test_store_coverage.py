"""Coverage stored with the run: read back, counted per run, listed and filtered in History, exported."""
from __future__ import annotations

import json

from sqlalchemy import inspect
from sqlalchemy import text as sql

from contracts.domain import Document, Result, Span
from storage import migrations, open_store
from storage.database import create_sqlite_engine
from storage.repository import Store
from tests.storage.sample_runs import make_report
from workstation.exports import export_runs

TEXT = "第一句话。第二句话。第三句话。"


def coverage_run() -> tuple[list[Document], list[Result]]:
    docs = [Document("whole", TEXT, task="ext", labels=["句"]), Document("cut", TEXT, task="ext", labels=["句"]),
            Document("blank", "  ", task="ext", labels=["句"])]
    results = [Result("whole", [[Span("句", "第一句话", (0, 4), grounded=True)]], ["句: 第一句话"], [], [(0, 15)]),
               Result("cut", [[Span("句", "第三句话", (10, 14), grounded=True)]], ["句: 第三句话"], [], [(10, 15)]),
               Result("blank", [], [], [], [])]
    return docs, results


def test_coverage_is_stored_and_read_back_with_the_cut_documents_counted(store):
    docs, results = coverage_run()
    run_id = store.record_run(make_report(results, model="seqgpt"), docs, "cli")
    detail = store.get_run(run_id)
    assert [r.coverage for _, r in detail.items] == [[(0, 15)], [(10, 15)], []]
    assert detail.summary.cut_documents == 1
    assert store.search_runs()[0].cut_documents == 1


def test_history_lists_and_filters_the_runs_and_documents_that_were_cut(store):
    docs, results = coverage_run()
    cut_run = store.record_run(make_report(results, model="seqgpt"), docs, "cli")
    whole_run = store.record_run(make_report([results[0]], model="seqgpt"), docs[:1], "cli")
    silent = store.record_run(make_report([Result("whole")]), docs[:1], "ui")          # reports no coverage
    assert [r.id for r in store.search_runs(cut=True)] == [cut_run] and store.count_runs(cut=True) == 1
    by_id = {r.id: r.cut_documents for r in store.search_runs()}
    assert by_id == {cut_run: 1, whole_run: 0, silent: None}
    listed, = store.cut_documents()
    assert (listed.run_id, listed.position, listed.doc_id, listed.model) == (cut_run, 1, "cut", "seqgpt")
    assert (listed.characters, listed.unread) == (15, 10)                # 第一句话。第二句话。 left unread
    assert store.cut_documents([whole_run]) == []


def test_a_database_from_before_coverage_upgrades_and_its_runs_report_none(tmp_path):
    path = tmp_path / "runs.db"
    engine = create_sqlite_engine(path)
    migrations.migrate(engine, upto="m003_datasets_and_training_runs")
    engine.dispose()
    old = Store(path, migrate=False)
    docs, results = coverage_run()
    with old._write() as s:                  # what code of that time wrote: results without the new columns
        s.execute(sql(
            "INSERT INTO runs (created_at, source, model, weights, demo, device, dtype, attention, optimizations, "
            "batch_size, options, documents, wall_seconds, tokens) VALUES ('2026-01-01 00:00:00', 'cli', 'seqgpt', "
            "'', 1, 'cpu', 'fp32', 'eager', '{}', 1, '{}', 1, 1.0, 1)"))
        s.execute(sql(
            "INSERT INTO documents (run_id, position, doc_id, text) VALUES (1, 0, 'x', 'old text')"))
        s.execute(sql(
            "INSERT INTO results (document_id, output, warnings) VALUES (1, '[]', '[]')"))
    old.close()
    store = open_store(path)
    assert {"coverage", "unread_chars"} <= {c["name"] for c in inspect(store.engine).get_columns("results")}
    detail = store.get_run(1)
    assert detail.items[0][1].coverage is None and detail.summary.cut_documents is None
    store.close()


def test_jsonl_and_excel_exports_carry_the_coverage(store, tmp_path):
    from openpyxl import load_workbook
    docs, results = coverage_run()
    run_id = store.record_run(make_report(results, model="seqgpt"), docs, "cli")
    export_runs(store, [run_id], "jsonl", tmp_path / "out.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [x["coverage"] for x in lines] == [[[0, 15]], [[10, 15]], []]
    export_runs(store, [run_id], "excel", tmp_path / "out.xlsx")
    rows = list(load_workbook(tmp_path / "out.xlsx")["Documents"].values)
    assert rows[0][-2:] == ("coverage", "unread_chars")
    assert [r[-2:] for r in rows[1:]] == [("[[0, 15]]", 0), ("[[10, 15]]", 10), ("[]", 0)]


def test_a_batch_job_keeps_each_results_coverage_in_its_run(store):
    docs, results = coverage_run()
    job = store.create_job(docs, "seqgpt", "", 2, [], {"long_text": "truncate"}, "docs.jsonl", device="cpu")
    assert store.take_job(job, "me", lambda owner: False)
    store.claim_items(job, "me", 10)
    store.complete_items(job, enumerate(results))
    run_id = store.finish_job(job, "me", demo=True, device="cpu", dtype="fp32", attention="eager", optimizations={})
    detail = store.get_run(run_id)
    assert [r.coverage for _, r in detail.items] == [[(0, 15)], [(10, 15)], []]
    assert detail.summary.cut_documents == 1 and detail.summary.options == {"long_text": "truncate"}
