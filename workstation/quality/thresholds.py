"""Confidence thresholds per type: tuned on a gold dataset, applied to later runs when asked for.

Tuning. For each type, every predicted element of that type is scored against the gold examples (the
same type and offsets; a label without offsets by its span), once per document, with the highest
confidence it got in that document. Sweeping the threshold down through the distinct confidences
draws the precision–recall curve; the threshold kept is the one with the highest F1, the lowest of
equal ones (it leaves out the fewest extractions). A type without gold mentions is not tuned: the
dataset says nothing about what its right answers are.

Applying. A threshold t for type T keeps an element of type T whose confidence is at least t; a
tuple is kept only when all its elements are (a relation whose object falls below its threshold
goes, subject and all). Elements without a confidence cannot be judged and are kept, with a warning
on the result, so a model that reports no confidence is never silently filtered. Thresholds at or
below a model's own decision boundary (RexUniNLU: links with probability > 0.5) change nothing.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from contracts.domain import Document, InputError, Result


@dataclass(frozen=True)
class CurvePoint:
    threshold: float
    precision: float
    recall: float
    f1: float
    kept: int                           # predictions kept at this threshold


@dataclass
class TypeTuning:
    type: str
    gold: int                           # gold mentions of the type
    predicted: int                      # predicted mentions of the type
    unscored: int                       # of which without a confidence (always kept)
    threshold: float | None             # None: not tuned (no gold mentions, or nothing scored)
    precision: float                    # at the threshold
    recall: float
    f1: float
    baseline: CurvePoint | None = None  # every prediction kept: what the model does without a threshold
    curve: list[CurvePoint] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TypeTuning":
        d = dict(d)
        d["baseline"] = CurvePoint(**d["baseline"]) if d.get("baseline") else None
        d["curve"] = [CurvePoint(**p) for p in d.get("curve", [])]
        return cls(**d)


def _key(type_name: str, span: str, offset) -> tuple:
    return (type_name, tuple(offset)) if offset is not None else (type_name, span)


def _scores(tp: int, kept: int, gold: int) -> tuple[float, float, float]:
    precision = tp / kept if kept else 0.0
    recall = tp / gold if gold else 0.0
    return precision, recall, (2 * tp / (kept + gold) if kept + gold else 0.0)


def tune_type(type_name: str, scored: Sequence[tuple[float, bool]], unscored_correct: int, unscored: int,
              gold: int) -> TypeTuning:
    """One type: `scored` holds (confidence, correct) of each prediction that has a confidence."""
    predicted = len(scored) + unscored
    if gold == 0:
        return TypeTuning(type_name, gold, predicted, unscored, None, 0.0, 0.0, 0.0,
                          note="no gold mentions of this type in the dataset")
    if not scored:
        p, r, f = _scores(unscored_correct, unscored, gold)
        return TypeTuning(type_name, gold, predicted, unscored, None, p, r, f,
                          note="no prediction of this type carries a confidence" if unscored else
                          "the model predicted nothing of this type")
    curve: list[CurvePoint] = []
    tp, kept = unscored_correct, unscored
    ordered = sorted(scored, key=lambda x: -x[0])
    for i, (conf, correct) in enumerate(ordered):
        tp += correct
        kept += 1
        if i + 1 < len(ordered) and ordered[i + 1][0] == conf:
            continue                    # a threshold keeps every prediction of equal confidence
        curve.append(CurvePoint(conf, *_scores(tp, kept, gold), kept))
    best = max(curve, key=lambda pt: (pt.f1, -pt.threshold))
    return TypeTuning(type_name, gold, predicted, unscored, best.threshold, best.precision, best.recall, best.f1,
                      baseline=curve[-1], curve=curve)


def tune(examples: Sequence[tuple[Document, list, Result]]) -> dict[str, TypeTuning]:
    """Thresholds per type from (document, gold output, the model's result without thresholds)."""
    gold_count: dict[str, int] = defaultdict(int)
    scored: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    unscored: dict[str, list[bool]] = defaultdict(list)
    for _, gold, result in examples:
        truth = {_key(e["type"], e["span"], e["offset"]) for tup in gold for e in tup}
        for t, _ in truth:
            gold_count[t] += 1
        best: dict[tuple, float | None] = {}
        for tup in result.tuples:
            for s in tup:
                k = _key(s.type, s.span, s.offset)
                if k not in best or (s.confidence is not None and (best[k] is None or s.confidence > best[k])):
                    best[k] = s.confidence
        for k, conf in best.items():
            if conf is None:
                unscored[k[0]].append(k in truth)
            else:
                scored[k[0]].append((conf, k in truth))
    types = sorted(set(gold_count) | set(scored) | set(unscored))
    return {t: tune_type(t, scored[t], sum(unscored[t]), len(unscored[t]), gold_count[t]) for t in types}


def chosen(tunings: Mapping[str, TypeTuning]) -> dict[str, float]:
    """The thresholds to save: type -> threshold, for the types that were tuned."""
    return {t: tt.threshold for t, tt in sorted(tunings.items()) if tt.threshold is not None}


def apply_thresholds(result: Result, thresholds: Mapping[str, float]) -> Result:
    """The result without the tuples that have an element below its type's threshold."""
    if not thresholds:
        return result
    kept, unjudged = [], defaultdict(int)
    for tup in result.tuples:
        ok = True
        for s in tup:
            limit = thresholds.get(s.type)
            if limit is None:
                continue
            if s.confidence is None:
                unjudged[s.type] += 1
            elif s.confidence < limit:
                ok = False
        if ok:
            kept.append(tup)
    warnings = list(result.warnings)
    dropped = len(result.tuples) - len(kept)
    if dropped:
        warnings.append(f"confidence thresholds left out {dropped} of {len(result.tuples)} extraction(s)")
    if unjudged:
        warnings.append("no confidence to compare with the threshold, kept: "
                        + ", ".join(f"{n} of type {t}" for t, n in sorted(unjudged.items())))
    return replace(result, tuples=kept, warnings=warnings)


def check_thresholds(thresholds: Any) -> dict[str, float]:
    """Thresholds from a file or the store: {type: number in [0, 1]}, or an InputError saying what is wrong."""
    if not isinstance(thresholds, dict):
        raise InputError('thresholds are an object of type -> confidence, e.g. {"人物": 0.8}')
    out = {}
    for t, v in thresholds.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise InputError(f"the threshold of {t!r} must be a number from 0 to 1, got {v!r}")
        out[str(t)] = float(v)
    return out
