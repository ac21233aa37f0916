"""Output density for benchmarks: a head calibration that makes random weights extract as much as asked.

Random demo weights extract an arbitrary number of spans, and host-side cost grows with the number of
spans, so end-to-end numbers mean little without saying how dense the output was. The demo head has
one RoPE pair that shifts every span logit down by s = a² (plugins/rexuninlu/demo.py); here s is set
by bisection until a calibration sample extracts the target number of spans per character per asked
type. Benchmark-only: the checkpoint on disk is not changed.
"""
from __future__ import annotations

import math

import torch

# Spans per character per asked type.
DENSITIES = {
    "sparse": 0.002,        # a few spans per document
    "realistic": 1 / 30,    # one span per 20-40 characters per type (the "realistic")
    "dense": 0.15,          # hundreds per document
}


def head_shift(model) -> float:
    return float(model.network.ffnq.bias[-2].item() ** 2)


def set_head_shift(model, shift: float) -> None:
    a = math.sqrt(max(shift, 0.0))
    with torch.no_grad():
        model.network.ffnq.bias[-2] = a
        model.network.ffnk.bias[-2] = -a
    model.scorer.graphs.clear()                 # captured graphs hold the old head


def spans_per_char_per_type(model, docs, batch_size: int) -> float:
    tuples = sum(len(r.tuples) for r in model.extract(docs, batch_size=batch_size))
    return tuples / (sum(len(d.text) for d in docs) * _types(docs))


def _types(docs) -> float:
    return sum(len(d.schema) for d in docs) / len(docs)


def typed_spans_per_char_per_type(model, docs, batch_size: int) -> float:
    """The same measure from the device's typed-span count alone (no decoding on the host), so that
    trying a nearly-all-positive head costs no more than a sparse one. One-level schemas only."""
    from plugins.rexuninlu.pipeline import document_run
    windows = [w for d in docs for w in document_run(model.prompter, d.text, d.schema).send(None)]
    count = 0
    for i in range(0, len(windows), batch_size):
        count += len(model.scorer.pick(model.scorer.launch([[w] for w in windows[i:i + batch_size]]).selection)[0])
    return count / (sum(len(d.text) for d in docs) * _types(docs))


def calibrate(model, docs, target: float, batch_size: int = 32, steps: int = 16) -> dict:
    """Bisect the head shift (log scale) until `docs` give `target` spans per char per type."""
    lo, hi = 1e-3, 1e4                          # shift bounds: nearly everything .. nothing positive
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        set_head_shift(model, mid)
        if typed_spans_per_char_per_type(model, docs, batch_size) > target:
            lo = mid                            # too dense: shift further down
        else:
            hi = mid
    shift = math.sqrt(lo * hi)
    set_head_shift(model, shift)
    return {"head_shift": round(shift, 6), "target_spans_per_char_per_type": target,
            "calibrated_spans_per_char_per_type": round(spans_per_char_per_type(model, docs, batch_size), 5)}
