"""The Extract page, driven through Streamlit's AppTest with the fake model plugin."""
from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from contracts.model import DEMO_NOTICE
from workstation.ui import state


def button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def html(at: AppTest) -> str:
    return "".join(h.value for h in at.get("html"))


def test_a_preset_runs_and_its_spans_and_numbers_are_shown_and_recorded(app):
    at = app.run()
    assert not at.exception
    assert any(DEMO_NOTICE in w.value for w in at.warning)
    assert json.loads(at.text_area(key="schema:fakeie").value) == {"Alice": None, "Paris": None}
    button(at, "Run").click().run()
    assert not at.exception and not at.error
    drawn = html(at)
    assert ">Alice</mark>" in drawn and ">Paris</mark>" in drawn
    assert {m.label for m in at.metric} >= {"Wall time", "Tokens", "Peak GPU memory", "Device", "Precision"}
    assert next(m for m in at.metric if m.label == "Device").value == "cpu"
    run_id = at.session_state["extract_run_id"]
    detail = state.store().get_run(run_id)
    assert detail.summary.source == "ui" and detail.summary.task == "ner" and detail.summary.demo
    assert [s.span for t in detail.items[0][1].tuples for s in t] == ["Alice", "Paris"]


def test_choosing_a_task_fills_in_its_schema_and_text(app):
    at = app.run()
    at.selectbox(key="task:fakeie").select("relation").run()
    assert json.loads(at.text_area(key="schema:fakeie").value) == {"Alice": {"employer(Acme)": None}}
    assert at.text_area(key="text:fakeie").value == "Alice works at Acme."
    assert not at.text_input                             # nested schema: no flat types form


def test_the_types_form_rewrites_a_flat_schema(app):
    at = app.run()
    at.text_input[0].input("Bob， Paris,Bob\nAlice")
    button(at, "Use these types").click().run()
    assert json.loads(at.text_area(key="schema:fakeie").value) == {"Bob": None, "Paris": None, "Alice": None}


def test_broken_json_is_reported_with_its_line_and_nothing_runs(app):
    at = app.run()
    at.text_area(key="schema:fakeie").input('{\n  "Alice": null,\n}').run()
    assert not at.exception
    assert any("line 3" in e.value and "not valid JSON" in e.value for e in at.error)
    assert button(at, "Run").disabled
    assert at.text_area(key="text:fakeie").value == "Alice met Bob in Paris."   # the text is kept


def test_blank_text_is_refused_and_the_model_validation_message_is_shown(app):
    at = app.run()
    at.text_area(key="text:fakeie").input("   ").run()
    assert any("has no text" in e.value for e in at.error)
    assert button(at, "Run").disabled
    at.text_area(key="text:fakeie").input("x").run()
    at.text_area(key="schema:fakeie").input("5").run()
    assert any("this task takes a JSON object of types" in e.value and "holds a number" in e.value for e in at.error)


def test_hostile_text_and_type_names_are_escaped_everywhere(app):
    hostile = "<script>alert(1)</script>"
    at = app.run()
    at.text_area(key="schema:fakeie").input(json.dumps({hostile: None, "<b>": None})).run()
    at.text_area(key="text:fakeie").input(f"x {hostile} <b>bold</b> {hostile}").run()
    button(at, "Run").click().run()
    assert not at.exception and not at.error
    drawn = html(at)
    assert "<script" not in drawn and "<b>" not in drawn
    assert drawn.count("&lt;script&gt;alert(1)&lt;/script&gt;</mark>") == 2


def test_a_huge_paste_is_drawn_in_part_but_extracted_in_full(app):
    text = "Alice " + "x" * 60_000 + " Paris"
    at = app.run()
    at.text_area(key="text:fakeie").input(text).run()
    button(at, "Run").click().run()
    assert not at.exception
    def text_html():
        return "".join(h.value for h in at.get("html") if "iew-text" in h.value)
    assert ">Alice</mark>" in text_html() and "Paris" not in text_html()          # page 1 of the text
    assert any("Characters 0–4,000 of 60,012" in c.value for c in at.caption)
    pager = at.number_input(key="text-page-extract")
    pager.set_value(pager.max).run()
    assert ">Paris</mark>" in text_html() and "Alice" not in text_html()
    detail = state.store().get_run(at.session_state["extract_run_id"])
    assert detail.items[0][0].text == text
    assert [s.span for t in detail.items[0][1].tuples for s in t] == ["Alice", "Paris"]   # past the cut too


def test_a_generative_task_shows_the_raw_text_beside_grounded_spans_and_flags_the_rest(app):
    app.session_state["model"] = "fakegen"          # reads labels: the schema box holds a label list
    at = app.run()
    assert json.loads(at.text_area(key="schema:fakegen").value) == ["person", "place"]
    button(at, "Run").click().run()
    assert not at.exception
    assert [c.value for c in at.code] == ["person: Alice\nplace: Atlantis"]
    assert ">Alice</mark>" in html(at)
    assert any("ungrounded" in w.value and "place: Atlantis" in w.value for w in at.warning)


def test_a_model_that_cannot_load_is_an_error_message_not_a_crash(app, ui_env):
    import shutil
    shutil.rmtree(ui_env / "fake-weights")
    at = app.run()
    button(at, "Run").click().run()
    assert not at.exception
    assert any("fakeie has no weights" in e.value for e in at.error)


def test_model_options_are_passed_to_the_model_and_recorded(app):
    at = app.run()
    at.number_input(key="extract:fakeie:max_hits").set_value(1).run()
    button(at, "Run").click().run()
    detail = state.store().get_run(at.session_state["extract_run_id"])
    assert detail.summary.options == {"max_hits": 1}
    assert [s.span for t in detail.items[0][1].tuples for s in t] == ["Alice"]


def test_a_validator_that_crashes_is_reported_not_raised(app, fake_plugin, monkeypatch):
    def broken(document):
        raise TypeError("unhashable type: 'list'")
    monkeypatch.setattr(fake_plugin.family, "validate", broken)
    at = app.run()
    assert not at.exception
    assert any("cannot be checked: TypeError" in e.value for e in at.error)
    assert button(at, "Run").disabled


def test_typed_text_survives_task_and_model_switches_and_each_keeps_its_own_schema(app):
    mine = "Carol met Alice in Rome."
    at = app.run()
    at.text_area(key="schema:fakeie").input('{"Carol": null}')
    at.text_area(key="text:fakeie").input(mine).run()
    at.selectbox(key="task:fakeie").select("relation").run()
    assert at.text_area(key="text:fakeie").value == mine                      # not the preset's example
    assert json.loads(at.text_area(key="schema:fakeie").value) == {"Alice": {"employer(Acme)": None}}
    at.selectbox(key="model").select("fakegen").run()
    assert at.text_area(key="text:fakegen").value == mine
    assert json.loads(at.text_area(key="schema:fakegen").value) == ["person", "place"]
    at.selectbox(key="model").select("fakeie").run()
    at.selectbox(key="task:fakeie").select("ner").run()
    assert at.text_area(key="text:fakeie").value == mine
    assert json.loads(at.text_area(key="schema:fakeie").value) == {"Carol": None}   # this model and task's edit


def test_a_result_is_marked_stale_once_the_form_changes(app):
    at = app.run()
    button(at, "Run").click().run()
    assert not any("press Run to update" in w.value for w in at.warning)
    at.text_area(key="text:fakeie").input("Alice alone.").run()
    stale = [w.value for w in at.warning if "press Run to update" in w.value]
    assert stale and "the text" in stale[0] and "schema" not in stale[0]
    button(at, "Run").click().run()
    assert not any("press Run to update" in w.value for w in at.warning)


def test_the_demo_warning_is_shown_once_with_a_result(app):
    at = app.run()
    button(at, "Run").click().run()
    assert sum(DEMO_NOTICE in w.value for w in at.warning) == 1


def test_a_label_model_calls_its_box_labels_and_options_have_human_names(app):
    app.session_state["model"] = "fakegen"
    at = app.run()
    assert at.text_area(key="schema:fakegen").label == "Labels (JSON list)"
    assert at.number_input(key="extract:fakegen:max_hits").label == "Most hits"
    assert "max_hits" in at.number_input(key="extract:fakegen:max_hits").help
    assert any(c.value.startswith("Device: cpu") for c in at.caption)


def test_counts_per_type_head_the_table_and_filter_it_by_type(app):
    at = app.run()
    at.text_area(key="text:fakeie").input("Alice and Alice met in Paris.").run()
    button(at, "Run").click().run()
    assert any("iew-count" in h.value and ">Alice</span>2" in h.value and ">Paris</span>1" in h.value
               for h in at.get("html"))
    table = next(d for d in at.dataframe if "extraction" in d.value.columns)
    assert len(table.value) == 3
    at.multiselect(key="types-extract").set_value(["Paris"]).run()
    table = next(d for d in at.dataframe if "extraction" in d.value.columns)
    assert list(table.value["extraction"]) == ["Paris: Paris"]
    assert any("1 of 3 shown" in c.value for c in at.caption)


def test_a_slow_run_shows_progress_and_cancel_stops_it_without_recording(app, monkeypatch):
    import time

    from workstation.ui import extraction
    monkeypatch.setattr(extraction, "wait_s", 0.0)
    at = app.run()
    at.text_area(key="text:fakeie").input("[CRAWL] Alice met Bob in Paris.").run()
    button(at, "Run").click().run()
    job = at.session_state["extract:running"]
    assert not job.done
    assert any("Running fakeie" in m.value for m in at.markdown)
    assert button(at, "Run").disabled                       # one run at a time
    time.sleep(0.3)
    at.run()                                                # the fragment redraws what the model has done
    line = next(c.value for c in at.caption if "model step" in c.value)
    assert "prompts" in line and " s · " in line
    button(at, "Cancel").click().run()
    assert job.cancel.is_set()
    deadline = time.monotonic() + 10
    while not job.done and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.cancelled and job.elapsed() < 10            # stopped long before its 20 s
    at.run()
    assert any("Cancelled after" in i.value for i in at.info)
    assert state.store().count_runs() == 0
    assert "extract_run_id" not in at.session_state


def test_a_run_that_ended_in_the_background_shows_its_result_and_frees_run(app, monkeypatch):
    import time

    from workstation.ui import extraction
    monkeypatch.setattr(extraction, "wait_s", 0.0)          # every run goes on in the background
    started, start = [], extraction.BackgroundRun.start
    # The run is held here, not read from the session: on a loaded machine it may end, and be shown, before
    # the click's own rerun is over.
    monkeypatch.setattr(extraction.BackgroundRun, "start", lambda self: started.append(self) or start(self))
    at = app.run()
    button(at, "Run").click().run()
    [job] = started
    deadline = time.monotonic() + 30
    while not job.done and time.monotonic() < deadline:
        time.sleep(0.05)
    at.run()                                                # the rerun the progress fragment asks for
    assert not button(at, "Run").disabled
    assert at.session_state["extract_run_id"] == job.run_id and ">Alice</mark>" in html(at)
