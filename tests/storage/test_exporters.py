"""Every export format: readable back, Unicode intact, formula-safe, ungrounded spans handled."""
from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET

import openpyxl
import pandas as pd
import pyarrow.parquet as pq
import pytest

from contracts.domain import Document, Result, Span
from contracts.hookspecs import hookimpl
from plugins import exporters as ex
from tests.storage.sample_runs import make_report, ner_run
from workstation import exports
from workstation.plugins import pm

FORMATS = ["jsonl", "csv", "excel", "parquet", "label-studio", "doccano"]


@pytest.fixture
def two_runs(recorded):
    """The awkward run plus a second one whose text is long enough to hit Excel's cell limit."""
    store, first = recorded
    long_text = "长" * 40_000 + "🙂" * 10 + "\x07bell"
    second = store.record_run(make_report([Result("long", [[Span("字", "长", (0, 1))]])], model="seqgpt"),
                              [Document("long", long_text)], "batch")
    return store, [first, second]


def test_every_format_is_registered_through_the_plugin_hook():
    found = exports.exporters()
    assert [n for n in found if n in FORMATS] == FORMATS
    assert all(found[n].name == n and found[n].suffix.startswith(".") for n in FORMATS)


@pytest.mark.parametrize("value, expected", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-5", "'-5"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("a=1", "a=1"), ("北京", "北京"), ("", ""), (-5, -5), (None, None)])
def test_formula_guard_prefixes_only_text_starting_with_a_formula_character(value, expected):
    assert ex.guard_formula(value) == expected


def test_jsonl_is_our_output_format_and_round_trips(recorded, tmp_path):
    store, run_id = recorded
    report = exports.export_runs(store, [run_id], "jsonl", tmp_path / "out.jsonl")
    raw = (tmp_path / "out.jsonl").read_text("utf-8")
    assert "张三" in raw and "🙂" in raw                             # not \u-escaped
    lines = [json.loads(line) for line in raw.splitlines()]
    docs, results = ner_run()
    assert [line["id"] for line in lines] == ["d0", "d1"] and lines[0]["run_id"] == run_id
    assert [Result.from_json(line) for line in lines] == results     # ungrounded spans kept with offset null
    assert lines[1]["raw"] == results[1].raw and lines[1]["labels"] == ["公式", "数字"]
    assert (report.documents, report.spans, report.skipped) == (2, 6, 0)


def test_csv_has_one_row_per_span_utf8_bom_and_no_live_formulas(recorded, tmp_path):
    store, run_id = recorded
    path = tmp_path / "spans.csv"
    report = exports.export_runs(store, [run_id], "csv", path)
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")             # Excel reads it as UTF-8
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(ex.SPAN_COLUMNS) and len(rows) == report.spans == 6
    assert [r["span"] for r in rows] == ["张三", "北京", "阿里巴巴", "'=SUM(A1:A9)", "'-5", "七"]
    assert rows[0]["start"] == "0" and rows[0]["end"] == "2" and rows[0]["confidence"] == "0.98"
    ungrounded = rows[-1]
    assert (ungrounded["start"], ungrounded["end"], ungrounded["grounded"]) == ("", "", "False")
    assert (ungrounded["tuple_index"], ungrounded["element_index"]) == ("1", "1")
    frame = pd.read_csv(path, encoding="utf-8-sig")
    assert frame["type"].tolist()[:2] == ["人物", "出生地"] and frame["run_id"].eq(run_id).all()


def test_csv_grounded_column_says_true_for_located_spans_false_for_ungrounded_and_empty_for_labels(store, tmp_path):
    # RexUniNLU leaves Span.grounded unset (every span it returns has offsets): the UI shows such spans as
    # grounded, and the export said nothing (an empty cell on every row).
    doc = Document("r1", "张三在北京", {"人物": None, "地点": None})
    result = Result("r1", [[Span("人物", "张三", (0, 2), 0.9)], [Span("地点", "北京", (3, 5), 0.8)],
                           [Span("情感", "正面", None, 0.7)], [Span("地点", "上海", None, None, False)]])
    run_id = store.record_run(make_report([result]), [doc], "ui")
    path = tmp_path / "spans.csv"
    exports.export_runs(store, [run_id], "csv", path)
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["span"], r["grounded"]) for r in rows] == [("张三", "True"), ("北京", "True"), ("正面", ""),
                                                          ("上海", "False")]
    parquet = tmp_path / "spans.parquet"
    exports.export_runs(store, [run_id], "parquet", parquet)
    assert pd.read_parquet(parquet)["grounded"].astype(object).tolist() == [True, True, pd.NA, False]


def test_excel_has_runs_documents_spans_within_cell_limits_and_no_formulas(two_runs, tmp_path):
    store, run_ids = two_runs
    path = tmp_path / "runs.xlsx"
    exports.export_runs(store, run_ids, "excel", path)
    book = openpyxl.load_workbook(path)
    assert book.sheetnames == ["Runs", "Documents", "Spans"]
    runs = list(book["Runs"].values)
    assert runs[0][:2] == ("id", "created_at (UTC)") and [r[0] for r in runs[1:]] == run_ids
    cells = [c for row in book.worksheets for line in row.iter_rows() for c in line]
    assert not any(c.data_type == "f" for c in cells)
    spans = {c.value: c for c in book["Spans"]["F"][1:]}
    assert {"=SUM(A1:A9)", "-5", "阿里巴巴", "七"} <= set(spans)      # no literal apostrophe in the value
    assert spans["=SUM(A1:A9)"].quotePrefix and spans["-5"].quotePrefix and spans["=SUM(A1:A9)"].data_type == "s"
    assert not spans["阿里巴巴"].quotePrefix
    documents = book["Documents"]
    assert "🙂" in documents["D2"].value and documents["D3"].value.startswith("=SUM") and documents["D3"].quotePrefix
    long_text = documents["D4"].value
    assert len(long_text.encode("utf-16-le")) // 2 <= ex.EXCEL_CELL_LIMIT and long_text.endswith(ex.TRUNCATED)
    frame = pd.read_excel(path, sheet_name="Spans")
    assert len(frame) == 7 and frame["start"].isna().sum() == 1


def test_excel_cell_text_drops_control_characters_and_counts_emoji_as_two_units():
    assert ex.excel_text("a\x07b\x00c") == "abc"
    text = "🙂" * 20_000                                           # 40,000 UTF-16 units in 20,000 characters
    cut = ex.excel_text(text)
    assert len(cut.encode("utf-16-le")) // 2 <= ex.EXCEL_CELL_LIMIT and cut.endswith(ex.TRUNCATED)
    assert cut.startswith("🙂" * 100)


def test_excel_refuses_more_rows_than_a_sheet_holds(recorded, tmp_path, monkeypatch):
    store, run_id = recorded
    monkeypatch.setattr(ex, "EXCEL_ROW_LIMIT", 4)
    with pytest.raises(ValueError, match="CSV or Parquet"):
        exports.export_runs(store, [run_id], "excel", tmp_path / "out" / "big.xlsx")
    assert list((tmp_path / "out").iterdir()) == []                  # nothing half-written left behind


def test_parquet_reads_back_typed_with_nulls_for_ungrounded_spans(two_runs, tmp_path):
    store, run_ids = two_runs
    path = tmp_path / "spans.parquet"
    exports.export_runs(store, run_ids, "parquet", path)
    frame = pd.read_parquet(path)
    assert list(frame.columns) == list(ex.SPAN_COLUMNS) and len(frame) == 7
    assert str(frame["start"].dtype) == str(frame["end"].dtype) == "Int64"     # not float64 with NaN
    assert frame["span"].tolist()[:4] == ["张三", "北京", "阿里巴巴", "=SUM(A1:A9)"]   # data, not a spreadsheet
    assert frame["start"].isna().tolist() == [False] * 5 + [True, False]
    assert frame.loc[6, "type"] == "字"
    schema = pq.read_schema(path)                                  # typed in the file: nullable int64 offsets
    assert str(schema.field("start").type) == "int64" and str(schema.field("grounded").type) == "bool"
    assert str(pd.read_parquet(path, dtype_backend="numpy_nullable")["start"].dtype) == "Int64"
    assert frame["grounded"].tolist()[3:6] == [True, True, False]


def test_label_studio_predictions_have_labels_and_relations_and_skip_ungrounded(recorded, tmp_path):
    store, run_id = recorded
    path = tmp_path / "ls.json"
    report = exports.export_runs(store, [run_id], "label-studio", path)
    tasks = json.loads(path.read_text("utf-8"))
    assert [t["data"]["doc_id"] for t in tasks] == ["d0", "d1"]
    for task in tasks:
        items = task["predictions"][0]["result"]
        regions = {i["id"]: i for i in items if i["type"] == "labels"}
        for region in regions.values():
            v = region["value"]
            assert task["data"]["text"][v["start"]:v["end"]] == v["text"] and region["to_name"] == "text"
        for rel in (i for i in items if i["type"] == "relation"):
            assert rel["from_id"] in regions and rel["to_id"] in regions
    first = tasks[0]["predictions"][0]["result"]
    assert [r["value"]["labels"] for r in first if r["type"] == "labels"] == [["人物"], ["出生地"], ["组织"]]
    relations = [(r["from_id"], r["to_id"], r["labels"]) for r in first if r["type"] == "relation"]
    assert relations == [("r0", "r1", ["出生地"])]
    second = tasks[1]["predictions"][0]["result"]
    assert [r["value"]["text"] for r in second] == ["=SUM(A1:A9)", "-5"]    # '七' has no offset
    assert (report.spans, report.relations, report.skipped) == (5, 1, 1)
    assert "skipped" in report.message()
    config = ET.fromstring(ex.label_studio_config([store.get_run(run_id)]))
    assert {e.get("value") for e in config.iter("Label")} == {"人物", "出生地", "组织", "公式", "数字"}
    assert {e.get("value") for e in config.iter("Relation")} == {"出生地"}


def test_doccano_relation_project_lines_with_unique_ids(two_runs, tmp_path):
    store, run_ids = two_runs
    path = tmp_path / "doccano.jsonl"
    report = exports.export_runs(store, run_ids, "doccano", path)
    lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert len(lines) == 3 and lines[0]["text"].startswith("张三")
    entity_ids = [e["id"] for line in lines for e in line["entities"]]
    assert len(entity_ids) == len(set(entity_ids)) == report.spans == 6
    first = lines[0]
    by_id = {e["id"]: e for e in first["entities"]}
    assert [(e["label"], first["text"][e["start_offset"]:e["end_offset"]]) for e in first["entities"]] == [
        ("人物", "张三"), ("出生地", "北京"), ("组织", "阿里巴巴")]
    (relation,) = first["relations"]
    assert (by_id[relation["from_id"]]["label"], by_id[relation["to_id"]]["label"], relation["type"]) == (
        "人物", "出生地", "出生地")
    assert lines[1]["relations"] == [] and report.skipped == 1        # '-5'—'七' needs the ungrounded '七'


def test_a_failing_exporter_leaves_no_file_behind(recorded, tmp_path):
    store, run_id = recorded

    def explode(runs, path):
        path.write_text("half")
        raise RuntimeError("disk full")

    class BrokenExporterPlugin:
        __name__ = "BrokenExporterPlugin"

        @hookimpl
        def register_exporters(self, register):
            register(ex.Exporter("broken", ".txt", explode))
    pm.register(BrokenExporterPlugin(), name="undo-broken-exporter")
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            exports.export_runs(store, [run_id], "broken", tmp_path / "out" / "out.txt")
        assert list((tmp_path / "out").iterdir()) == []
    finally:
        pm.unregister(name="undo-broken-exporter")
    with pytest.raises(ValueError, match="available: jsonl"):
        exports.export_runs(store, [run_id], "broken", tmp_path / "out.txt")


def test_export_bytes_gives_a_download_name_and_content(recorded):
    store, run_id = recorded
    data, name, report = exports.export_bytes(store, [run_id], "csv")
    assert name == f"runs-{run_id}.csv" and data.startswith(b"\xef\xbb\xbf") and report.spans == 6


def test_unguard_formula_undoes_the_csv_guard_only():
    for value in ("=1+1", "-5", "@x", "北京", "'quoted", ""):
        assert ex.unguard_formula(ex.guard_formula(value)) == value


@pytest.mark.parametrize("fmt", FORMATS)
def test_tuples_with_misplaced_offsets_are_left_out_of_every_format_and_counted(store, tmp_path, fmt):
    text = "张三出生于北京。"
    bad = [[Span("地点", "", (7, 0))],                                # the reference's empty [start, 0]
           [Span("人物", "张三", (0, 2)), Span("出生地", "北京", (5, 99))],  # outside the text
           [Span("人物", "李四", (0, 2))]]                              # covers other text
    run_id = store.record_run(make_report([Result("d", [[Span("人物", "张三", (0, 2))], *bad])]),
                              [Document("d", text, {"人物": None})], "ui")
    report = exports.export_runs(store, [run_id], fmt, tmp_path / f"out{exports.exporters()[fmt].suffix}")
    assert report.invalid == 3 and report.spans == 1 and "3 tuples were left out" in report.message()
    if fmt in ("jsonl", "csv", "label-studio", "doccano"):
        written = report.path.read_text("utf-8-sig")
        assert "李四" not in written and "出生地" not in written
