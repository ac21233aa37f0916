"""The read-back's array fast paths give, bit for bit, what the plain Python loops gave."""
import struct

import numpy as np

from plugins.rexuninlu.decoding import to_4_places
from plugins.rexuninlu.scoring import typed_per_window


def bits(values):
    return [struct.pack("<d", v) for v in values]


def near_halves() -> np.ndarray:
    """k.5 / 10^4 and its neighbouring doubles: where p * 1e4 rounded to a double can cross the half."""
    halves = (np.arange(10_000) + 0.5) / 1e4
    return np.concatenate([halves, np.nextafter(halves, 2), np.nextafter(halves, -1)])


def test_confidences_round_to_4_places_exactly_as_round_does():
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.random(200_000), 0.5 + rng.random(1000) * 1e-3, np.arange(10_001) / 1e4, near_halves(),
                        [0.0, -0.0, 1.0, 0.03125, -0.00005, 1.0000001, 2.5, 12345.67895, np.inf, -np.inf, np.nan]])
    expected = [round(v, 4) for v in p.tolist()]
    assert bits(to_4_places(p)) == bits(expected)
    assert bits(to_4_places(p.astype(np.float32))) == bits(round(v, 4) for v in p.astype(np.float32).tolist())
    assert to_4_places(np.zeros(0)) == []
    # Rounding p * 1e4 straight away (np.round does) misses round() here: the values near a half matter.
    assert bits((np.rint(near_halves() * 1e4) / 1e4).tolist()) != bits(round(v, 4) for v in near_halves().tolist())


def test_typed_hits_are_split_per_window_in_picks_order():
    rng = np.random.default_rng(1)
    k, n = 5_000, 7                                                  # window 3 gets no hit
    windows = rng.choice([0, 1, 2, 4, 5, 6], k)
    typed = np.stack([windows, rng.integers(9, 512, k), rng.integers(9, 512, k), rng.integers(1, 9, k)], axis=1)
    confidence = np.concatenate([0.5 + rng.random(k - 100) / 2, rng.choice(near_halves()[near_halves() > 0.5], 100)])
    expected = [[(h, t, tok, round(c, 4)) for (w, h, t, tok), c in zip(typed.tolist(), confidence.tolist()) if w == window]
                for window in range(n)]
    got = [list(hits) for hits in typed_per_window(typed, confidence, n)]
    assert got == expected and got[3] == []
    assert bits(c for hits in got for *_, c in hits) == bits(c for hits in expected for *_, c in hits)
