"""Gold datasets and fine-tuning runs in the store; the gold JSONL the fine-tuner reads."""
from __future__ import annotations

import json

import pytest

from contracts.domain import Document, InputError
from storage.datasets import export_dataset, split_examples
from storage.views import NotFound
from tests.storage.sample_runs import ner_run

CORRECTED = [[{"type": "人物", "span": "张三", "offset": [0, 2]}, {"type": "出生地", "span": "北京", "offset": [5, 7]}],
             [{"type": "组织", "span": "阿里巴巴", "offset": [12, 16], "confidence": 0.5}]]


def test_a_correction_is_saved_as_its_own_row_and_the_run_is_unchanged(recorded):
    store, run_id = recorded
    before = store.get_run(run_id)
    doc = before.items[0][0]
    example_id, created = store.save_gold_example("people", "rexuninlu", doc, CORRECTED, run_id=run_id, position=0)
    assert created
    after = store.get_run(run_id)
    assert after.items == before.items                                  # the history keeps what the model said
    [dataset] = store.list_datasets()
    assert (dataset.name, dataset.model, dataset.examples) == ("people", "rexuninlu", 1)
    example = store.gold_example(example_id)
    assert (example.run_id, example.document_id is not None, example.source) == (run_id, True, "history")
    assert example.output[1] == [{"type": "组织", "span": "阿里巴巴", "offset": [12, 16]}]   # no confidence
    assert example.gold_line() == {"id": "d0", "text": doc.text, "schema": doc.schema, "output": example.output}


def test_saving_the_same_document_again_replaces_its_example(recorded):
    store, run_id = recorded
    doc = store.get_run(run_id).items[0][0]
    first, _ = store.save_gold_example("people", "rexuninlu", doc, CORRECTED, run_id=run_id, position=0)
    again, created = store.save_gold_example("people", "rexuninlu", doc, CORRECTED[:1], run_id=run_id, position=0)
    assert (again, created) == (first, False)
    assert store.gold_example(first).output == CORRECTED[:1]
    other = store.create_dataset("other", "rexuninlu")
    store.save_gold_example(other, "rexuninlu", doc, CORRECTED, run_id=run_id, position=0)
    saved = store.gold_examples_of_document(run_id, 0)
    assert [(d.name, len(e.output)) for d, e in saved] == [("people", 1), ("other", 2)]


def test_deleting_the_run_keeps_its_gold_examples_unlinked(recorded):
    store, run_id = recorded
    doc = store.get_run(run_id).items[0][0]
    example_id, _ = store.save_gold_example("people", "rexuninlu", doc, CORRECTED, run_id=run_id, position=0)
    store.delete_run(run_id)
    example = store.gold_example(example_id)
    assert (example.run_id, example.document_id, example.text) == (None, None, doc.text)


def test_a_dataset_is_per_model(recorded):
    store, run_id = recorded
    doc = store.get_run(run_id).items[0][0]
    seq = store.create_dataset("people", "seqgpt")
    with pytest.raises(InputError, match="holds seqgpt examples"):
        store.save_gold_example(seq, "rexuninlu", doc, CORRECTED)
    with pytest.raises(InputError, match="holds seqgpt examples; run .* is rexuninlu"):
        store.save_gold_example("people", "seqgpt", doc, CORRECTED, run_id=run_id, position=0)
    store.create_dataset("people", "rexuninlu")                          # the same name for another model is fine
    with pytest.raises(InputError, match="already exists"):
        store.create_dataset(" people ", "rexuninlu")
    with pytest.raises(InputError, match="name"):
        store.create_dataset("  ", "rexuninlu")
    assert [d.model for d in store.list_datasets("seqgpt")] == ["seqgpt"]


def test_deleting_a_dataset_takes_its_examples(store):
    dataset_id, n = store.add_gold_examples("d", "rexuninlu", [(Document("a", "张三"), [])] * 3, "jsonl")
    assert n == 3 and store.get_dataset(dataset_id).examples == 3
    assert store.delete_dataset(dataset_id)
    with pytest.raises(NotFound):
        store.gold_examples(dataset_id)


def test_a_bad_output_shape_adds_nothing(store):
    with pytest.raises(InputError, match="tuple 1 must be a non-empty list"):
        store.add_gold_examples("d", "rexuninlu", [(Document("a", "x"), []), (Document("b", "y"), [[]])], "jsonl")
    assert store.list_datasets() == []


def test_the_split_is_seeded_complete_and_keeps_order():
    examples = list(range(10))
    train, dev = split_examples(examples, 0.2, seed=3)
    assert len(dev) == 2 and sorted(train + dev) == examples and train == sorted(train)
    assert split_examples(examples, 0.2, seed=3) == (train, dev)
    assert split_examples(examples, 0.2, seed=4) != (train, dev)
    assert split_examples(examples, 0.0) == (examples, [])
    assert len(split_examples([1, 2], 0.01)[1]) == 1 and len(split_examples([1, 2], 0.9)[0]) == 1
    with pytest.raises(InputError):
        split_examples([1], 0.5)


def test_export_writes_the_gold_jsonl_the_finetuner_reads(recorded, tmp_path):
    store, run_id = recorded
    docs, _ = ner_run()
    dataset_id, _ = store.add_gold_examples("d", "rexuninlu", [
        (Document(f"x{i}", docs[0].text, docs[0].schema), CORRECTED) for i in range(5)], "jsonl")
    report = export_dataset(store, dataset_id, tmp_path / "train.jsonl", tmp_path / "dev.jsonl", 0.4, seed=1)
    assert (report.train_examples, report.dev_examples) == (3, 2)
    lines = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text("utf-8").splitlines()]
    assert list(lines[0]) == ["id", "text", "schema", "output"] and lines[0]["schema"] == docs[0].schema
    assert "张三" in (tmp_path / "train.jsonl").read_text("utf-8")      # not \u-escaped
    empty = store.create_dataset("empty", "rexuninlu")
    with pytest.raises(InputError, match="no examples"):
        export_dataset(store, empty, tmp_path / "e.jsonl")


def test_a_training_run_is_created_updated_and_listed(store):
    run_id = store.create_training_run("rexuninlu", "/w", "/out", ["--epochs", "1"],
                                       datasets={"train": {"name": "people", "examples": 4}})
    run = store.update_training_run(run_id, step=3, total_steps=8, loss=[[1, 0.5], [2, 0.4], [3, 0.3]],
                                    evaluation_before={"overall": {"f1": 0.1}})
    assert (run.status, run.step, run.loss[-1], run.train_name, run.finished) == ("running", 3, [3, 0.3], "people",
                                                                                   False)
    with pytest.raises(ValueError, match="still running"):
        store.delete_training_run(run_id)
    store.update_training_run(run_id, status="completed", evaluation_after={"overall": {"f1": 0.9}})
    done = store.create_training_run("seqgpt", "/w", "/out2", [], source="cli", status="failed", error="boom")
    assert [r.id for r in store.list_training_runs()] == [done, run_id]
    assert [r.id for r in store.list_training_runs(model="rexuninlu", status="completed")] == [run_id]
    with pytest.raises(ValueError, match="status"):
        store.update_training_run(run_id, status="exploded")
    with pytest.raises(ValueError, match="no updatable"):
        store.update_training_run(run_id, model="x")
    assert store.delete_training_run(run_id) and not store.delete_training_run(run_id)
