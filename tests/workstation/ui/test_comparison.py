"""What a comparison of two runs' times may claim: same settings, one document and a first run after a load are
said, not shown as a speed-up."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from contracts.runs import RunSummary
from workstation.ui import comparison


def run(run_id: int, documents: int = 100, **changes) -> RunSummary:
    summary = RunSummary(run_id, datetime(2026, 3, 1, tzinfo=timezone.utc), "ui", "rexuninlu", "ner", "/w", "abc",
                         False, "cuda:0", "fp32", "eager", {}, 8, {}, documents, 2.0, documents / 2.0, 100, None, None,
                         None, {"seconds": {"prepare": 0.2, "device": 1.5, "decode": 0.1, "write": 0.0}})
    return replace(summary, **changes)


def test_two_runs_with_the_same_settings_are_said_to_differ_only_by_variation():
    a, b = run(1), run(2, wall_seconds=6.6)
    notes = comparison.caveats(a, b, same_inputs=True)
    assert len(notes) == 1 and "same settings" in notes[0] and "not the effect of a setting" in notes[0]
    assert not comparison.fair_ratio(a, b, True) and comparison.changed_settings(a, b) == []


def test_a_changed_setting_on_a_batch_of_documents_is_a_fair_ratio():
    a, b = run(1), run(2, dtype="bf16", optimizations={"precision": "bf16"}, wall_seconds=1.0)
    assert comparison.caveats(a, b, True) == [] and comparison.fair_ratio(a, b, True)
    assert comparison.changed_settings(a, b) == ["dtype", "optimizations"]
    assert not comparison.fair_ratio(a, b, same_inputs=False)


def test_one_document_and_a_first_run_after_a_load_are_named():
    a = run(1, documents=1, stages={"seconds": {}, "first_after_load": True})
    b = run(2, documents=1, batch_size=16)
    notes = comparison.caveats(a, b, True)
    assert any("read 1 document:" in n and "one timing" in n for n in notes)
    assert any(n.startswith("Run A (1) was the first on a freshly loaded model") for n in notes)
    assert not any("Run B" in n for n in notes) and not comparison.fair_ratio(a, b, True)


def test_stage_times_are_laid_out_per_stage_for_both_runs():
    a, b = run(1), run(2, stages={"seconds": {"prepare": 0.1, "device": 0.5}})
    frame = comparison.stage_frame(a, b)
    assert list(frame.index) == ["prepare", "device", "decode", "write"]
    assert frame["A (run 1)"].tolist() == [0.2, 1.5, 0.1, 0.0] and frame["B (run 2)"].tolist() == [0.1, 0.5, 0.0, 0.0]
    assert comparison.stage_frame(run(1, stages={}), run(2, stages={})).empty
