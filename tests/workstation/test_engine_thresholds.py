"""The engine applies confidence thresholds to every result when asked, and the report says which."""
from __future__ import annotations

from pathlib import Path

from contracts.domain import Document
from tests.workstation.jobs.fake_model import FakeFamily
from workstation import engine
from workstation.run_config import RunConfig


def test_thresholds_are_opt_in_applied_to_each_result_and_reported(tmp_path):
    model = FakeFamily().load(Path(tmp_path), "cpu")           # one span "first" of confidence 1.0 per document
    docs = [Document("a", "甲乙"), Document("b", "丙丁")]
    plain = engine.run(model, docs)
    assert plain.thresholds is None and all(r.tuples for r in plain.results)
    seen = []
    strict = engine.run(model, docs, RunConfig(thresholds={"first": 1.01}), on_result=lambda _, r: seen.append(r))
    assert strict.thresholds == {"first": 1.01}
    assert all(r.tuples == [] for r in strict.results) and all(r.tuples == [] for r in seen)
    assert "thresholds" not in strict.options                      # never passed on to the model
    lenient = engine.run(model, docs, RunConfig(thresholds={"first": 1.0}))
    assert all(r.tuples for r in lenient.results)
