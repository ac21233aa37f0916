"""Confidence thresholds: tuned on synthetic gold sets whose best threshold is known, applied to results."""
from __future__ import annotations

import random

import pytest

from contracts.domain import Document, InputError, Result, Span
from workstation.quality.thresholds import CurvePoint, TypeTuning, apply_thresholds, check_thresholds, chosen, tune

TEXT = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉戌亥"


def synthetic(right: list[float], wrong: list[float], type_name: str = "人物", missed: int = 0):
    """One document per prediction: `right` confidences are gold spans, `wrong` are not; `missed` gold spans
    the model never predicted. Offsets differ so nothing collides."""
    examples = []
    for n, conf in enumerate(right + wrong):
        doc = Document(str(n), TEXT)
        gold = [[{"type": type_name, "span": TEXT[0:2], "offset": [0, 2]}]] if n < len(right) else []
        examples.append((doc, gold, Result(str(n), [[Span(type_name, TEXT[0:2], (0, 2), confidence=conf)]])))
    for m in range(missed):
        doc = Document(f"m{m}", TEXT)
        examples.append((doc, [[{"type": type_name, "span": TEXT[4:6], "offset": [4, 6]}]], Result(f"m{m}")))
    return examples


def test_separable_confidences_give_the_lowest_confidence_of_the_right_answers():
    rng = random.Random(0)
    right = [round(rng.uniform(0.8, 0.99), 4) for _ in range(40)]
    wrong = [round(rng.uniform(0.5, 0.75), 4) for _ in range(25)]
    [t] = tune(synthetic(right, wrong)).values()
    assert t.threshold == min(right)
    assert (t.precision, t.recall, t.f1) == (1.0, 1.0, 1.0)
    assert t.baseline.threshold == min(wrong) and t.baseline.precision == pytest.approx(40 / 65)


def test_the_threshold_that_maximises_f1_is_found_by_hand_worked_example():
    # Sorted high to low: R .95, R .9, W .85, R .8, W .7, W .6, W .55; two gold spans never predicted (5 gold).
    # keep>=.95: P1 R.2 F1 .333 · >=.9: P1 R.4 F1 .571 · >=.85: .667/.4/.5 · >=.8: .75/.6/.667 ·
    # >=.7: .6/.6/.6 · >=.6: .5/.6/.545 · >=.55: .429/.6/.5  -> best .8
    [t] = tune(synthetic([0.95, 0.9, 0.8], [0.85, 0.7, 0.6, 0.55], missed=2)).values()
    assert t.threshold == 0.8
    assert t.precision == pytest.approx(0.75) and t.recall == pytest.approx(0.6)
    assert t.f1 == pytest.approx(2 / 3)
    assert [p.threshold for p in t.curve] == [0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.55]
    assert [p.kept for p in t.curve] == [1, 2, 3, 4, 5, 6, 7]


def test_equal_f1_keeps_the_lowest_threshold_and_equal_confidences_move_together():
    # .9 R, .8 W, .7 R: >=.9 F1 2/3 (1 of 2 gold, P 1), >=.7 F1 2/3 (2 of 2, P 2/3) -> the lower, .7
    [t] = tune(synthetic([0.9, 0.7], [0.8])).values()
    assert t.threshold == 0.7
    [t] = tune(synthetic([0.9, 0.6], [0.6, 0.6])).values()
    assert [p.threshold for p in t.curve] == [0.9, 0.6] and t.curve[1].kept == 4


def test_each_type_gets_its_own_threshold():
    examples = synthetic([0.9, 0.95], [0.6], "人物") + synthetic([0.7, 0.75], [0.65], "地点")
    for i, (doc, gold, result) in enumerate(examples):       # distinct document ids across the two sets
        examples[i] = (Document(f"{i}", doc.text), gold, Result(f"{i}", result.tuples))
    tuned = tune(examples)
    assert chosen(tuned) == {"人物": 0.9, "地点": 0.7}


def test_a_type_without_gold_or_without_confidences_is_not_tuned():
    no_gold = synthetic([], [0.9, 0.8])
    unscored = [(Document("u", TEXT), [[{"type": "人物", "span": TEXT[0:2], "offset": [0, 2]}]],
                 Result("u", [[Span("人物", TEXT[0:2], (0, 2))]]))]
    assert tune(no_gold)["人物"].threshold is None and "no gold" in tune(no_gold)["人物"].note
    t = tune(unscored)["人物"]
    assert t.threshold is None and t.unscored == 1 and t.f1 == 1.0 and "confidence" in t.note
    assert chosen(tune(no_gold)) == {}


def test_tuning_round_trips_through_json():
    [t] = tune(synthetic([0.9], [0.6])).values()
    assert TypeTuning.from_json(t.to_json()) == t
    assert isinstance(TypeTuning.from_json(t.to_json()).curve[0], CurvePoint)


def test_applying_thresholds_drops_low_tuples_whole_and_keeps_the_rest():
    result = Result("1", [
        [Span("人物", "甲乙", (0, 2), confidence=0.95)],
        [Span("人物", "丙丁", (2, 4), confidence=0.6)],
        [Span("人物", "甲乙", (0, 2), confidence=0.95), Span("出生地", "戊己", (4, 6), confidence=0.55)],
        [Span("地点", "庚辛", (6, 8), confidence=0.51)],
    ])
    out = apply_thresholds(result, {"人物": 0.8, "出生地": 0.7})
    assert out.tuples == [result.tuples[0], result.tuples[3]]
    assert "left out 2 of 4" in out.warnings[0]
    assert len(result.tuples) == 4                      # the input is not changed
    assert apply_thresholds(result, {}) is result


def test_elements_without_a_confidence_are_kept_and_said_so():
    result = Result("1", [[Span("人物", "甲乙", (0, 2))], [Span("人物", "丙丁", (2, 4), confidence=0.1)]])
    out = apply_thresholds(result, {"人物": 0.5})
    assert out.tuples == [result.tuples[0]]
    assert any("no confidence" in w and "1 of type 人物" in w for w in out.warnings)


def test_tuned_thresholds_applied_to_the_tuning_set_give_the_tuned_scores():
    examples = synthetic([0.95, 0.9, 0.8], [0.85, 0.7, 0.6, 0.55], missed=2)
    tuned = tune(examples)
    again = tune([(d, g, apply_thresholds(r, chosen(tuned))) for d, g, r in examples])
    assert again["人物"].baseline.f1 == pytest.approx(tuned["人物"].f1)


def test_thresholds_from_outside_are_checked():
    assert check_thresholds({"人物": 1, "地点": 0.25}) == {"人物": 1.0, "地点": 0.25}
    for bad in ([0.5], {"人物": 1.5}, {"人物": "high"}, {"人物": True}):
        with pytest.raises(InputError):
            check_thresholds(bad)
