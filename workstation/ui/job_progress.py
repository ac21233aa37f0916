"""A running batch job's pace, as the Batch page shows it: documents per second over time (sampled each time the
job card is drawn, about once a second while the page is open) and the time left at the recent pace."""
from __future__ import annotations

import pandas as pd

RECENT_S = 10.0                          # the pace that predicts the time left: documents done in the last 10 s
MAX_SAMPLES = 900                        # 15 minutes at one sample a second


def add_sample(samples: list[tuple[float, int]], at: float, done: int) -> list[tuple[float, int]]:
    """(seconds, documents done) appended, unless nothing moved since the last one (a finished job's card
    keeps being drawn); the oldest dropped past MAX_SAMPLES."""
    if samples and samples[-1][1] == done and done != 0:
        return samples
    return (samples + [(at, done)])[-MAX_SAMPLES:]


def recent_rate(samples: list[tuple[float, int]], window: float = RECENT_S) -> float | None:
    """Documents per second over the last `window` seconds of samples; None before there is a pace to tell."""
    if len(samples) < 2:
        return None
    end_t, end_done = samples[-1]
    start_t, start_done = next(((t, d) for t, d in samples if t >= end_t - window), samples[0])
    if end_t - start_t <= 0 or end_done <= start_done:
        start_t, start_done = samples[0]
    if end_t - start_t <= 0 or end_done <= start_done:
        return None
    return (end_done - start_done) / (end_t - start_t)


def remaining_seconds(total: int, done: int, rate: float | None) -> float | None:
    return (total - done) / rate if rate and total > done else None


def duration(seconds: float) -> str:
    """3 h 05 min, 4 min 20 s, 12 s."""
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def throughput(samples: list[tuple[float, int]]) -> pd.DataFrame:
    """Documents per second between consecutive samples, against seconds since the first: the chart's data."""
    if len(samples) < 2:
        return pd.DataFrame(columns=["seconds", "documents/s"])
    first = samples[0][0]
    rows = [{"seconds": round(t1 - first, 1), "documents/s": (d1 - d0) / (t1 - t0)}
            for (t0, d0), (t1, d1) in zip(samples, samples[1:]) if t1 > t0]
    return pd.DataFrame(rows, columns=["seconds", "documents/s"])
