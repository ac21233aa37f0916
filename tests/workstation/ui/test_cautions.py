"""Thresholds and Fine-tune warn before work whose numbers would mislead: a tiny dataset, the random demo weights."""
from __future__ import annotations

from contracts.domain import Document
from workstation.ui import cautions, state


def add_dataset(n: int) -> None:
    state.store().add_gold_examples("people", "fakeie", [
        (Document(f"d{i}", "Alice met Bob", {"Alice": None}), [[{"type": "Alice", "span": "Alice", "offset": [0, 5]}]])
        for i in range(n)], "history")


def warnings(at) -> list[str]:
    return [w.value for w in at.warning]


def test_thresholds_warn_of_a_tiny_dataset_and_the_demo_weights(app):
    at = app.run()
    add_dataset(4)
    at.switch_page("screens/thresholds.py").run()
    assert not at.exception
    said = warnings(at)
    assert any("4 gold examples" in w and "thresholds tuned on it" in w for w in said)
    assert any("random demo weights" in w for w in said)


def test_finetune_warns_of_a_tiny_dataset_and_demo_base_weights(app):
    at = app.run()
    add_dataset(1)
    at.switch_page("screens/finetune.py").run()
    assert not at.exception
    said = warnings(at)
    assert any("1 gold example:" in w for w in said)
    assert any("random demo weights" in w and "fine\\-tune" in w for w in said)     # markdown-escaped


def test_a_dataset_of_the_threshold_size_is_not_called_tiny():
    assert cautions.tiny_dataset(cautions.TINY_FOR_THRESHOLDS, cautions.TINY_FOR_THRESHOLDS, "x") is None
    assert "29 gold examples" in cautions.tiny_dataset(29, cautions.TINY_FOR_THRESHOLDS, "x")
