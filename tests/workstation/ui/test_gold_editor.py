"""History: correct a run's result (add, remove, retype, re-span, grow a relation) and save it as a gold example."""
from __future__ import annotations

import json

import pytest

from tests.workstation.ui.markdown import shown
from workstation.ui import state

PAGE = "screens/history.py"


def button(at, label):
    return next(b for b in at.button if b.label == label)


def open_run(at, text: str, schema: dict, task: str | None = None) -> int:
    at.switch_page("screens/extract.py").run()
    if task:
        at.selectbox(key="task:fakeie").select(task).run()
    at.text_area(key="schema:fakeie").input(json.dumps(schema))
    at.text_area(key="text:fakeie").input(text).run()
    button(at, "Run").click().run()
    run_id = at.session_state["extract_run_id"]
    at.switch_page(PAGE).run()
    at.multiselect(key="history_selected").set_value([run_id]).run()
    button(at, "Open").click().run()
    assert not at.exception
    return run_id


def key(at, *parts) -> str:
    d = at.session_state["gold_draft"]
    return "gold-" + "-".join(str(p) for p in (d["run"], d["position"], d["version"], *parts))


def pick(at, index: int) -> None:
    next(s for s in at.selectbox if s.label == "Extraction").set_value(index).run()


def draft(at) -> list:
    return at.session_state["gold_draft"]["tuples"]


def errors(at) -> list[str]:
    return [shown(e.value) for e in at.error]


@pytest.fixture
def opened(app):
    at = app.run()
    run_id = open_run(at, "Alice met Bob in Paris.", {"Alice": None, "Bob": None, "Paris": None})
    return at, run_id


def test_remove_respan_and_save_into_a_new_dataset_leaves_the_run_alone(opened):
    at, run_id = opened
    before = state.store().get_run(run_id)
    assert [t[0]["span"] for t in draft(at)] == ["Alice", "Bob", "Paris"]

    pick(at, 2)
    at.button(key=key(at, 2, "drop")).click().run()                     # remove "Paris"
    assert [t[0]["span"] for t in draft(at)] == ["Alice", "Bob"]

    pick(at, 1)           # re-span "Bob" to [0, 5) = "Alice"
    at.number_input(key=key(at, 1, 0, "end")).set_value(5)
    at.number_input(key=key(at, 1, 0, "start")).set_value(0).run()
    assert "offsets [0, 5) cover 'Alice', not 'Bob'" in " ".join(errors(at))
    assert at.button(key="gold_save").disabled                           # refused while they disagree
    covered = "".join(h.value for h in at.get("html") if "iew-covered" in h.value)
    assert "<mark" in covered and ">Alice</mark>" in covered
    at.button(key=key(at, 1, 0, "find")).click().run()                  # back to where "Bob" really is
    assert draft(at)[1][0]["offset"] == [10, 13] and not errors(at)

    at.selectbox(key=key(at, 1, 0, "type")).set_value("Paris").run()     # retype
    at.text_input(key="gold_new_dataset").input("people").run()
    at.button(key="gold_save").click().run()
    assert not at.exception and not errors(at)
    assert any("Saved gold example" in s.value for s in at.success)
    [dataset] = state.store().list_datasets("fakeie")
    [example] = state.store().gold_examples(dataset.id)
    assert example.output == [[{"type": "Alice", "span": "Alice", "offset": [0, 5]}],
                              [{"type": "Paris", "span": "Bob", "offset": [10, 13]}]]
    assert (example.run_id, example.doc_id, example.schema) == (run_id, f"run{run_id}-1", before.items[0][0].schema)
    assert state.store().get_run(run_id).items == before.items          # the history is what the model said
    assert at.selectbox(key="gold_dataset").value == dataset.id

    at.button(key="gold_save").click().run()                            # again: the same example is updated
    assert any("Updated gold example" in s.value for s in at.success)
    assert state.store().get_dataset(dataset.id).examples == 1


def test_add_an_extraction_by_its_text_and_occurrence(opened):
    at, _ = opened
    at.selectbox(key=key(at, "add-type")).set_value("Bob")
    at.text_input(key=key(at, "add-span")).input("e")
    at.number_input(key=key(at, "add-nth")).set_value(2)
    next(b for b in at.button if b.label == "Add").click().run()
    assert draft(at)[-1] == [{"type": "Bob", "span": "e", "offset": [7, 8]}]   # "Alice m[e]t": the 2nd "e"
    at.text_input(key=key(at, "add-span")).input("Zed")
    next(b for b in at.button if b.label == "Add").click().run()
    assert "“Zed” does not occur 1 time in the text." in errors(at) and len(draft(at)) == 4


def test_a_relation_tuple_grows_an_argument_found_by_its_text(app):
    at = app.run()
    open_run(at, "Alice works at Acme.", {"Alice": {"employer(Acme)": None}}, task="relation")
    assert draft(at) == [[{"type": "Alice", "span": "Alice", "offset": [0, 5]}]]
    at.button(key=key(at, 0, "grow")).click().run()
    assert draft(at)[0][1] == {"type": "employer(Acme)", "span": "", "offset": None}
    assert at.button(key="gold_save").disabled and "has no span text yet" in " ".join(errors(at))
    at.text_input(key=key(at, 0, 1, "span")).input("Acme").run()
    at.button(key=key(at, 0, 1, "find")).click().run()
    assert draft(at)[0][1] == {"type": "employer(Acme)", "span": "Acme", "offset": [15, 19]}
    assert at.button(key=key(at, 0, "grow")).disabled                    # the schema ends there
    at.text_input(key="gold_new_dataset").input("jobs").run()
    at.button(key="gold_save").click().run()
    [dataset] = state.store().list_datasets("fakeie")
    assert state.store().gold_examples(dataset.id)[0].output[0][1]["span"] == "Acme"


def test_the_model_family_refuses_a_type_outside_the_schema(app):
    at = app.run()
    open_run(at, "Alice works at Acme.", {"Alice": {"employer(Acme)": None}}, task="relation")
    at.button(key=key(at, 0, "grow")).click().run()
    at.text_input(key=key(at, 0, 1, "span")).input("Acme").run()
    at.button(key=key(at, 0, 1, "find")).click().run()
    at.selectbox(key=key(at, 0, 0, "type")).set_value("Alice")
    assert not errors(at)
    at.button(key=key(at, 0, 0, "remove")).click().run()                # the head goes: the path is broken
    assert "type 'employer(Acme)' is not in the schema at that level" in " ".join(errors(at))
    assert at.button(key="gold_save").disabled


def test_user_text_in_the_editor_is_escaped(app):
    at = app.run()
    hostile = '<script>alert(1)</script> <img src=x onerror=alert(2)>'
    open_run(at, hostile, {"<script>": None})
    covered = "".join(h.value for h in at.get("html") if "iew-covered" in h.value)
    assert "&lt;script&gt;" in covered and "<script>" not in covered and "<img" not in covered
