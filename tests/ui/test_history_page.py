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
    assert ("only in A", "Paris: Paris [17, 22)") in set(zip(diff["change"], diff["tuple"]))
    assert ("only in B", "(the whole document)") in set(zip(diff["change"], diff["tuple"]))
    assert any("1 document(s) have the same id but a different text" in w.value for w in at.warning)
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
    assert list(at.dataframe[0].value.columns[:3]) == ["run", "finished", "started"]


def test_clicking_rows_of_the_table_selects_those_runs(two_runs):
    at, a, b = two_runs
    first = listed(at)[0]
    at.session_state["history_table"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    at.run()
    assert not at.exception and at.multiselect(key="history_selected").value == [first]
    assert not button(at, "Open").disabled
