"""The History page: search, open, compare, re-run, delete, export."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from workstation.ui import state

PAGE = "screens/history.py"


def button(at, label):
    return next(b for b in at.button if b.label == label)


def extract(at, text: str, schema: dict | None = None) -> int:
    at.switch_page("screens/extract.py").run()
    if schema is not None:
        at.text_area(key="schema:fakeie").input(json.dumps(schema))
    at.text_area(key="text:fakeie").input(text).run()
    button(at, "Run").click().run()
    assert not at.error
    return at.session_state["extract_run_id"]


@pytest.fixture
def two_runs(app):
    at = app.run()
    a = extract(at, "Alice met Bob in Paris.")
    b = extract(at, "Alice met Bob in Rome.", {"Alice": None, "Bob": None})
    return at.switch_page(PAGE).run(), a, b


def listed(at) -> list[int]:
    return list(at.dataframe[0].value["run"])


def test_runs_are_listed_newest_first_and_search_narrows_them(two_runs):
    at, a, b = two_runs
    assert not at.exception and listed(at) == [b, a]
    at.text_input(key="history_text").input("Rome").run()
    assert listed(at) == [b]
    at.text_input(key="history_text").input("Paris").run()
    assert listed(at) == [a]
    at.text_input(key="history_text").input("nowhere to be found").run()
    assert any("No run matches" in i.value for i in at.info)
    at.text_input(key="history_text").input("").run()
    at.selectbox(key="history_task").select("ner").run()
    assert listed(at) == [b, a]


def test_open_shows_the_run_like_extract(two_runs):
    at, a, _ = two_runs
    at.multiselect(key="history_selected").set_value([a]).run()
    button(at, "Open").click().run()
    assert not at.exception
    assert any(h.value == f"Run {a}" for h in at.subheader)
    drawn = "".join(h.value for h in at.get("html"))
    assert ">Alice</mark>" in drawn and ">Paris</mark>" in drawn
    assert any(m.label == "Wall time" for m in at.metric)


def test_compare_shows_the_span_diff(two_runs):
    at, a, b = two_runs
    assert button(at, "Compare").disabled
    at.multiselect(key="history_selected").set_value([a, b]).run()
    button(at, "Compare").click().run()
    assert not at.exception
    diff = at.dataframe[-1].value
    # The two runs read different texts under the same id ("… in Paris." / "… in Rome."): two documents.
    assert ("only in A", "Paris: Paris [17, 22)") in set(zip(diff["change"], diff["extraction"]))
    assert ("only in B", "(the whole document)") in set(zip(diff["change"], diff["extraction"]))
    assert any("1 document has the same id but a different text" in w.value for w in at.warning)
    assert next(m for m in at.metric if m.label == "Speed-up B over A").value == "—"
    assert not any("exactly the same tuples" in s.value for s in at.success)


def test_rerun_records_a_new_run_with_the_same_documents_and_settings(two_runs):
    at, a, b = two_runs
    at.multiselect(key="history_selected").set_value([b]).run()
    button(at, "Re-run").click().run()
    assert not at.exception and not at.error
    new = at.session_state["extract_run_id"]
    assert new not in (a, b)
    old, again = state.store().get_run(b), state.store().get_run(new)
    assert [d.text for d, _ in again.items] == [d.text for d, _ in old.items]
    assert [d.schema for d, _ in again.items] == [{"Alice": None, "Bob": None}]
    assert again.settings["device"] == "cpu" and again.summary.task == old.summary.task
    assert any(s.value == "Both runs read the same texts and extracted exactly the same tuples." for s in at.success)


def test_delete_removes_the_selected_runs(two_runs):
    at, a, b = two_runs
    at.multiselect(key="history_selected").set_value([a]).run()
    button(at, "Delete for good").click().run()
    assert not at.exception and listed(at) == [b]
    assert at.multiselect(key="history_selected").value == []


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "excel", "parquet", "label-studio", "doccano"])
def test_a_selection_exports_in_every_format(two_runs, fmt):
    at, a, b = two_runs
    at.multiselect(key="history_selected").set_value([a, b]).run()
    at.selectbox(key="export_format").select(fmt).run()
    button(at, "Prepare file").click().run()
    assert not at.exception and not at.error
    fmt_, ids, path, message = at.session_state["export_file"]
    assert (fmt_, ids) == (fmt, (a, b)) and Path(path).stat().st_size > 0
    assert message.startswith("2 documents")
    assert any(d.label == f"Download {Path(path).name}" for d in at.get("download_button"))
    if fmt == "jsonl":
        lines = [json.loads(x) for x in Path(path).read_text("utf-8").splitlines()]
        assert len(lines) == 2 and {s["span"] for t in lines[1]["output"] for s in t} >= {"Alice"}


def test_runs_are_listed_by_finish_time_and_the_page_says_so(app, ui_env):
    from tests.storage.sample_runs import make_report, ner_run
    docs, results = ner_run()
    store = state.store()
    long_job = store.record_run(make_report(results, started_at="2026-03-01T10:00:00+00:00"), docs, "batch")
    quick = store.record_run(make_report(results, started_at="2026-03-01T10:05:00+00:00"), docs, "ui")
    with store.engine.begin() as conn:                     # the long job started first but finished last
        conn.exec_driver_sql("UPDATE runs SET finished_at = '2026-03-01 11:00:00.000000' WHERE id = ?", (long_job,))
        conn.exec_driver_sql("UPDATE runs SET finished_at = '2026-03-01 10:05:02.000000' WHERE id = ?", (quick,))
    at = app.run().switch_page(PAGE).run()
    assert listed(at) == [long_job, quick]
    assert any("the latest finished first" in c.value for c in at.caption)
    assert list(at.dataframe[0].value.columns[:2]) == ["run", "finished"]


def test_the_runs_table_is_not_a_second_selection_control(two_runs):
    # Its row checkboxes and the "Selected runs" box used to disagree: the box is the one control.
    at, a, b = two_runs
    assert at.dataframe[0].proto.selection_mode == []
    at.multiselect(key="history_selected").set_value([a]).run()
    assert not button(at, "Open").disabled and button(at, "Compare").disabled


def test_the_compare_view_stays_when_the_selection_changes_until_closed(two_runs):
    at, a, b = two_runs
    at.multiselect(key="history_selected").set_value([a, b]).run()
    button(at, "Compare").click().run()
    assert any(m.label == "Speed-up B over A" for m in at.metric)
    at.multiselect(key="history_selected").set_value([a]).run()
    assert not at.exception and any(m.label == "Speed-up B over A" for m in at.metric)
    button(at, "Close").click().run()
    assert not any(m.label == "Speed-up B over A" for m in at.metric)
    assert at.multiselect(key="history_selected").value == [a]


def test_the_column_chooser_sets_the_table_columns(two_runs):
    at, _, _ = two_runs
    columns = list(at.dataframe[0].value.columns)
    assert "peak GPU memory" not in columns and "input" in columns
    at.multiselect(key="history_columns").set_value(["finished", "peak GPU memory"]).run()
    assert list(at.dataframe[0].value.columns) == ["run", "finished", "peak GPU memory"]


def test_a_batch_run_shows_its_input_files_name(app, ui_env):
    from contracts.domain import Document
    from tests.storage.sample_runs import make_report, ner_run
    docs, results = ner_run()
    store = state.store()
    run_id = store.record_run(make_report(results), docs, "batch")
    job_id = store.create_job([Document("d", "text")], "fakeie", "w", 4, [], {}, "news 2026.csv")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE jobs SET run_id = ? WHERE id = ?", (run_id, job_id))
    other = store.record_run(make_report(results), docs, "ui")
    at = app.run().switch_page(PAGE).run()
    frame = at.dataframe[0].value
    assert dict(zip(frame["run"], frame["input"])) == {run_id: "news 2026.csv", other: ""}


@pytest.fixture
def big_run(app, ui_env):
    """A 120-document run: every document has a 人物; every third a 地点 (confidence 0.5); document 7 holds
    markup-looking text."""
    from contracts.domain import Document, Result, Span
    from tests.storage.sample_runs import make_report
    docs, results = [], []
    for i in range(120):
        text = f"第{i}篇：张三在北京。" + ("<b>粗体</b>" if i == 7 else "")
        spans = [[Span("人物", "张三", (text.index("张三"), text.index("张三") + 2), 0.9)]]
        if i % 3 == 0:
            spans.append([Span("地点", "北京", (text.index("北京"), text.index("北京") + 2), 0.5)])
        docs.append(Document(f"doc-{i}", text, {"人物": None, "地点": None}))
        results.append(Result(f"doc-{i}", spans))
    run_id = state.store().record_run(make_report(results), docs, "batch")
    at = app.run().switch_page(PAGE).run()
    at.session_state["history_view"] = ("open", run_id)
    return at.run(), run_id


def captions(at) -> str:
    return "\n".join(c.value for c in at.caption)


def test_opening_a_large_run_shows_a_paged_document_table_with_counts_per_type(big_run):
    at, run_id = big_run
    key = f"history-docs-{run_id}"
    assert not at.exception
    table = at.dataframe(key=f"{key}-table").value
    assert len(table) == 50 and list(table.columns) == ["#", "id", "characters", "人物", "地点", "cut",
                                                        "lowest confidence"]
    assert table.iloc[0].to_dict() | {"lowest confidence": 0.5} == {
        "#": 1, "id": "doc-0", "characters": len("第0篇：张三在北京。"), "人物": 1, "地点": 1, "cut": "—",
        "lowest confidence": 0.5}
    assert "120 of 120 documents pass the filters." in captions(at)
    assert any(h.value == f"Run {run_id}" for h in at.subheader)
    at.number_input(key=f"{key}-page").set_value(3).run()
    assert list(at.dataframe(key=f"{key}-table").value["id"]) == [f"doc-{i}" for i in range(100, 120)]


def test_the_document_table_filters_by_type_confidence_and_text(big_run):
    at, run_id = big_run
    key = f"history-docs-{run_id}"
    at.multiselect(key=f"{key}-types").set_value(["地点"]).run()
    assert "40 of 120 documents pass the filters." in captions(at)
    assert list(at.dataframe(key=f"{key}-table").value["id"])[:3] == ["doc-0", "doc-3", "doc-6"]
    at.multiselect(key=f"{key}-types").set_value([]).run()
    at.slider(key=f"{key}-confidence").set_value((0.8, 1.0)).run()
    assert "80 of 120 documents pass the filters." in captions(at)
    at.text_input(key=f"{key}-text").input("第17篇").run()
    assert list(at.dataframe(key=f"{key}-table").value["id"]) == ["doc-17"]
    assert any(m.value.startswith("**Document doc\\-17**") for m in at.markdown)


def test_clicking_a_row_opens_that_document(big_run):
    at, run_id = big_run
    key = f"history-docs-{run_id}"
    at.session_state[f"{key}-table"] = {"selection": {"rows": [4], "columns": [], "cells": []}}
    at.run()
    assert not at.exception
    assert any(m.value.startswith("**Document doc\\-4**") for m in at.markdown)
    drawn = "".join(h.value for h in at.get("html"))
    assert "第4篇" in drawn and ">张三</mark>" in drawn


def test_search_lists_matching_documents_with_escaped_snippets_and_opens_one(big_run):
    at, run_id = big_run
    at.text_input(key="history_text").input("粗体").run()
    assert any(e.label == "1 document matches" for e in at.expander)
    snippets = [h.value for h in at.get("html") if "iew-snippet" in h.value]
    assert len(snippets) == 1 and "&lt;b&gt;<mark>粗体</mark>&lt;/b&gt;" in snippets[0]
    next(b for b in at.button if b.key == f"history_hits-open-{run_id}-7").click().run()
    assert not at.exception and any(m.value.startswith("**Document doc\\-7**") for m in at.markdown)
