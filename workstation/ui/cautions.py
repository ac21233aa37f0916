"""Warnings a page gives before work whose numbers would mislead: too few gold examples, the random demo weights.

Thresholds tuned on a handful of examples, or a fine-tune scored on them, swing with every example; and the
demo weights are random, so what is tuned or trained on them says nothing about the real model.
"""
from __future__ import annotations

# Below these many examples the page says the numbers are unreliable: a per-type precision or recall from
# fewer than a few examples per type moves by tens of points with one example.
TINY_FOR_THRESHOLDS = 30
TINY_FOR_FINETUNE = 50


def tiny_dataset(examples: int, tiny: int, what: str) -> str | None:
    """A warning when a dataset of `examples` is too small for `what` (e.g. "thresholds tuned on it")."""
    if examples >= tiny:
        return None
    return (f"This dataset has {examples:,} gold example{'' if examples == 1 else 's'}: {what} will swing with every example. "
            f"Use {tiny:,} or more for numbers you can rely on.")


def demo_weights(what: str) -> str:
    return (f"These are the random demo weights: {what} say nothing about the real model. "
            "Download the official weights (Model weights page) or choose a fine-tune.")
