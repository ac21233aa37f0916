"""The host builds inputs from what a model declares it reads (`ModelFamily.reads`), never from the input's type.

`fakegen` (tests/workstation/ui/fake_plugin.py) reads a task and labels, as SeqGPT does, and its presets hold label
lists only (one a tuple); `fakeie` reads a schema, as RexUniNLU does.
"""
from __future__ import annotations

import json

import pytest

from contracts.domain import Document, InputError
from contracts.names import Reads
from tests.workstation.ui.fake_plugin import FakeFamily, FakeLabelsFamily, FakePlugin
from workstation.inputs import defaults_for, read_valid_documents
from workstation.ui import runs, schema_editor
from workstation.ui.gold_editor import allowed_types


def test_a_document_of_the_other_kind_is_named_as_such():
    schema_model, label_model = FakeFamily(), FakeLabelsFamily()
    with pytest.raises(InputError, match=r'^line 3: fakegen reads "task" and "labels" .* but document \'a\' gives '
                                         r'a "schema" instead'):
        label_model.check(Document("a", "Alice met Bob.", schema={"person": None}, line=3))
    with pytest.raises(InputError, match=r'fakeie reads "schema" .* gives "task"/"labels" instead'):
        schema_model.check(Document("a", "Alice met Bob.", task="ext", labels=["person"]))
    with pytest.raises(InputError, match="fakeie reads \"schema\" .* gives a list of labels as its \"schema\""):
        schema_model.check(Document("a", "Alice met Bob.", schema=["person"]))
    label_model.check(Document("a", "Alice met Bob.", task="ext", labels=["person"]))
    schema_model.check(Document("a", "Alice met Bob.", schema={"person": None}))


def test_a_default_is_read_as_the_model_reads_it_not_by_its_shape():
    # A schema whose types are called "task" and "labels" is a schema for a schema model.
    assert defaults_for(Reads.SCHEMA, {"task": None, "labels": None}) == {"schema": {"task": None, "labels": None}}
    assert defaults_for(Reads.LABELS, ["person", "place"]) == {"labels": ["person", "place"]}
    assert defaults_for(Reads.LABELS, {"task": "cls", "labels": ["a"]}) == {"task": "cls", "labels": ["a"]}
    assert defaults_for(Reads.SCHEMA, None) == defaults_for(Reads.LABELS, None) == {}
    with pytest.raises(InputError, match="^--schema: this model reads a task and labels; .* not a JSON object"):
        defaults_for(Reads.LABELS, {"person": None})
    with pytest.raises(InputError, match="^--schema: this model reads a schema; .* not a list$"):
        defaults_for(Reads.SCHEMA, ["person"])


def test_a_label_list_default_fills_the_lines_of_a_label_model(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"id": "1", "text": "Alice met Bob.", "task": "ext"}) + "\n"
                    + json.dumps({"id": "2", "text": "Bob left.", "task": "cls", "labels": ["parting"]}) + "\n",
                    "utf-8")
    docs, _ = read_valid_documents(path, FakeLabelsFamily(), ["person", "place"])
    assert [(d.task, d.labels, d.schema) for d in docs] == [("ext", ["person", "place"], None),
                                                             ("cls", ["parting"], None)]
    with pytest.raises(InputError, match="this model reads a task and labels"):
        read_valid_documents(path, FakeLabelsFamily(), {"person": None})


def test_the_ui_helpers_follow_what_a_label_model_reads():
    family = FakeLabelsFamily()
    preset = family.tasks["cls"]                          # its labels are a tuple: no dict anywhere
    doc = runs.document_for(family, preset, ["meeting", "parting"], "Alice met Bob.")
    assert (doc.task, doc.labels, doc.schema) == ("cls", ["meeting", "parting"], None)
    family.check(doc)
    with pytest.raises(InputError, match=r'this task takes a list of labels .*such as \["meeting", "parting"\]; '
                                         r'it holds a JSON object$'):
        runs.document_for(family, preset, {"meeting": None}, "Alice met Bob.")
    assert schema_editor.flat_types(["meeting", "parting"], family.reads) == ["meeting", "parting"]
    assert schema_editor.flat_types({"meeting": None}, family.reads) is None
    assert schema_editor.flat_schema(["a", "b"], family.reads) == ["a", "b"]
    assert schema_editor.flat_schema(["a", "b"], Reads.SCHEMA) == {"a": None, "b": None}
    assert allowed_types(doc, [], 0, family.reads) == ["meeting", "parting"]
    assert allowed_types(doc, [{"type": "meeting"}], 1, family.reads) == []


def test_the_ui_helpers_follow_what_a_schema_model_reads():
    family = FakeFamily()
    doc = runs.document_for(family, family.tasks["ner"], {"Alice": None}, "Alice met Bob.")
    assert (doc.schema, doc.labels) == ({"Alice": None}, None)
    with pytest.raises(InputError, match=r"this task takes a JSON object of types .*; it holds a list$"):
        runs.document_for(family, None, ["Alice"], "Alice met Bob.")     # no preset: still checked
    relation = Document("1", "Alice works at Acme.", schema={"Alice": {"employer(Acme)": None}})
    assert allowed_types(relation, [{"type": "Alice"}], 1, family.reads) == ["employer(Acme)"]


@pytest.fixture
def label_api(tmp_path):
    """The HTTP API serving only `fakegen`."""
    from fastapi.testclient import TestClient

    from tests.fake_monitor import FakeMonitor
    from workstation import plugins
    from workstation.api.app import create_app
    from workstation.settings import ApiSettings, ModelSettings, Settings
    plugins.load_plugins()
    plugin = FakePlugin()
    plugins.pm.register(plugin, name="undo-fake-ie")
    weights = plugin.labels_family.write_demo_weights(tmp_path / "weights")
    s = Settings(database=str(tmp_path / "runs.db"), demo_weights_dir=str(tmp_path / "demo"))
    s.models["fakegen"] = ModelSettings(weights=str(weights), device="cpu", batch_size=4)
    s.api = ApiSettings(models=["fakegen"], batch_wait_ms=5.0)
    client = TestClient(create_app(s, monitor_factory=lambda: FakeMonitor.steady(gpus=1)),
                        raise_server_exceptions=False)
    try:
        with client:
            yield client
            client.app.state.api.store.close()
    finally:
        plugins.pm.unregister(name="undo-fake-ie")


def test_the_api_checks_documents_by_what_the_model_reads(label_api):
    [model] = label_api.get("/v1/models").json()["models"]
    assert (model["name"], model["reads"]) == ("fakegen", "labels")
    ok = label_api.post("/v1/extract", json={"model": "fakegen", "optimizations": [], "task": "ext",
                                             "labels": ["person"], "documents": [{"text": "Alice met Bob."}]})
    assert ok.status_code == 200, ok.text
    assert ok.json()["results"][0]["output"][0][0]["span"] == "Alice"
    bad = label_api.post("/v1/extract", json={"model": "fakegen", "optimizations": [],
                                              "documents": [{"text": "Alice met Bob.", "schema": {"person": None}}]})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["line"] == 1 and 'fakegen reads "task" and "labels"' in error["message"]
    upload = label_api.post("/v1/jobs", files={"file": ("in.txt", b"Alice met Bob.\n", "text/plain")},
                            data={"model": "fakegen", "schema": json.dumps({"person": None})},
                            headers={"X-IEW-Request": "1"})
    assert upload.status_code == 400 and "schema: this model reads a task and labels" in upload.text
