"""Confidence thresholds saved for weights, and the thresholds a run applied kept in its settings snapshot."""
from __future__ import annotations

from tests.storage.sample_runs import make_report, ner_run


def test_the_newest_thresholds_for_the_weights_apply(store, tmp_path):
    weights = tmp_path / "w"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    assert store.thresholds_for("rexuninlu", weights) is None
    store.save_thresholds("rexuninlu", weights, {"人物": 0.7}, {"人物": {"threshold": 0.7}}, "news")
    newer = store.save_thresholds("rexuninlu", weights, {"人物": 0.8}, {}, "news-2")
    store.save_thresholds("rexuninlu", tmp_path / "other", {"人物": 0.1}, {}, "other")
    store.save_thresholds("seqgpt", weights, {"人物": 0.2}, {}, "other")
    saved = store.thresholds_for("rexuninlu", weights)
    assert saved.id == newer and saved.thresholds == {"人物": 0.8} and saved.dataset_name == "news-2"
    assert not saved.stale()
    (weights / "config.json").write_text('{"changed": true}')        # a new checkpoint in the same place
    assert store.thresholds_for("rexuninlu", weights).stale()
    assert store.delete_thresholds("rexuninlu", weights) == 2
    assert store.thresholds_for("rexuninlu", weights) is None
    assert store.thresholds_for("seqgpt", weights).thresholds == {"人物": 0.2}


def test_deleting_the_dataset_keeps_the_thresholds_tuned_on_it(store, tmp_path):
    dataset = store.create_dataset("gold", "rexuninlu")
    saved = store.save_thresholds("rexuninlu", tmp_path, {"人物": 0.9}, {}, "gold", dataset_id=dataset)
    store.delete_dataset(dataset)
    kept = store.get_thresholds(saved)
    assert kept.dataset_id is None and kept.dataset_name == "gold"


def test_a_run_records_the_thresholds_it_applied_in_its_settings(store):
    docs, results = ner_run()
    report = make_report(results)
    report.thresholds = {"人物": 0.95}
    plain = store.record_run(make_report(results), docs, "cli", settings_snapshot={"device": "cpu"})
    thresholded = store.record_run(report, docs, "cli", settings_snapshot={"device": "cpu"})
    assert store.get_run(plain).settings == {"device": "cpu"}
    assert store.get_run(thresholded).settings == {"device": "cpu", "thresholds": {"人物": 0.95}}
