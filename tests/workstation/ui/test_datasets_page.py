"""The Datasets page: import a file (with the schema built from its labels), browse, export train/dev."""
from __future__ import annotations

import json
from pathlib import Path

from tests.workstation.ui.markdown import shown
from workstation.ui import state

PAGE = "screens/datasets.py"
TEXT = "Alice works at Acme in Paris."


def label_studio(*texts: str) -> bytes:
    tasks = []
    for n, text in enumerate(texts):
        tasks.append({"id": n + 1, "data": {"text": text}, "annotations": [{"result": [
            {"id": "a", "type": "labels", "value": {"start": 0, "end": 5, "text": "Alice", "labels": ["Alice"]}},
            {"id": "b", "type": "labels", "value": {"start": 15, "end": 19, "text": "Acme", "labels": ["Acme"]}},
            {"id": "p", "type": "labels", "value": {"start": 23, "end": 28, "text": "Paris", "labels": ["Paris"]}},
            {"type": "relation", "from_id": "a", "to_id": "b", "labels": ["employer"]}]}]})
    return json.dumps(tasks).encode()


def upload(at, name: str, data: bytes):
    at.file_uploader(key="import_upload").set_value((name, data, "application/json")).run()
    assert not at.exception
    return at


def button(at, label):
    return next(b for b in at.button if b.label == label)


def schema_area(at):
    return next(t for t in at.text_area if t.label == "Schema (JSON) for the examples")


def test_a_label_studio_export_is_imported_with_the_schema_built_from_its_labels(app):
    at = upload(app.run().switch_page(PAGE).run(), "jobs.json", label_studio(TEXT, TEXT))
    assert any("2 examples, 6 gold tuples" in shown(c.value) for c in at.caption)
    # the relation's tail is an entity of its own too (it has its own label, not the relation's)
    assert json.loads(schema_area(at).value) == {"Alice": {"employer(Acme)": None}, "Acme": None, "Paris": None}
    button(at, "Import").click().run()
    assert not at.exception and not at.error
    assert any("imported 2 examples" in shown(s.value) for s in at.success)
    [dataset] = state.store().list_datasets("fakeie")
    assert (dataset.name, dataset.examples) == ("jobs", 2)
    example = state.store().gold_examples(dataset.id)[0]
    assert example.schema == {"Alice": {"employer(Acme)": None}, "Acme": None, "Paris": None}
    assert example.source == "label-studio" and len(example.output) == 3
    assert at.selectbox(key="datasets_open").value == dataset.id
    drawn = "".join(h.value for h in at.get("html"))
    assert ">Acme</mark>" in drawn                                        # the example is shown like a result


def test_a_schema_edited_in_the_dialog_is_checked_and_can_leave_types_out(app):
    at = upload(app.run().switch_page(PAGE).run(), "jobs.json", label_studio(TEXT))
    schema_area(at).input(json.dumps({"Alice": {"employer(Acme)": None}, "Acme": None})).run()
    button(at, "Import").click().run()
    assert any("Nothing was imported: task 1 (id 1): " in shown(e.value) and "'Paris' is not in the schema" in shown(e.value)
               for e in at.error)
    assert state.store().list_datasets() == []
    at.checkbox(key="import_drop").check().run()
    button(at, "Import").click().run()
    assert any("1 extractions outside the schema were left out" in shown(s.value) for s in at.success)
    schema_area(at).input("{not json").run()
    assert button(at, "Import").disabled and any("not valid JSON" in shown(e.value) for e in at.error)


def test_a_broken_file_names_the_line_and_imports_nothing(app):
    good = {"id": "a", "text": "Alice", "schema": {"Alice": None},
            "output": [[{"type": "Alice", "span": "Alice", "offset": [0, 5]}]]}
    data = (json.dumps(good) + "\n" + json.dumps({**good, "output": [[{"type": "Bob", "span": "Alice",
                                                                        "offset": [0, 5]}]]})).encode()
    at = upload(app.run().switch_page(PAGE).run(), "gold.jsonl", data)
    assert any("Every line brings its own schema." in shown(c.value) for c in at.caption)
    button(at, "Import").click().run()
    assert any("Nothing was imported: line 2: " in shown(e.value) for e in at.error)
    assert state.store().list_datasets() == []
    at = upload(at, "bad.jsonl", b'{"text": "x", "output": []}\n{"text": ')
    assert any("Cannot import bad.jsonl: line 2: malformed JSON" in shown(e.value) for e in at.error)
    spans = (json.dumps(good) + "\n" + json.dumps({**good, "output": [[{"type": "Alice", "span": "Bob",
                                                                         "offset": [0, 5]}]]})).encode()
    at = upload(at, "spans.jsonl", spans)                 # offsets that do not cover their span: refused at once
    assert any("Cannot import spans.jsonl: line 2: output tuple 1: offset [0, 5] covers 'Alice', not the span 'Bob'"
               in shown(e.value) for e in at.error)


def test_a_dataset_exports_train_and_dev_files(app):
    store = state.store()
    from contracts.domain import Document
    store.add_gold_examples("people", "fakeie", [(Document(f"d{i}", "Alice", {"Alice": None}),
                                                  [[{"type": "Alice", "span": "Alice", "offset": [0, 5]}]])
                                                 for i in range(10)], "jsonl")
    at = app.run().switch_page(PAGE).run()
    at.slider(key="datasets_dev").set_value(0.2).run()
    button(at, "Prepare gold JSONL").click().run()
    assert not at.exception and any("8 training examples, 2 held out" in shown(c.value) for c in at.caption)
    train, dev = (Path(p) for p in at.session_state["datasets_exported"][1:3])
    assert [d.label for d in at.get("download_button")] == [f"Download {train.name}", f"Download {dev.name}"]
    lines = [json.loads(x) for x in train.read_text("utf-8").splitlines()]
    assert len(lines) == 8 and list(lines[0]) == ["id", "text", "schema", "output"]
    button(at, "Delete this example").click().run()
    assert store.list_datasets()[0].examples == 9
