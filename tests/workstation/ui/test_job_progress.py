"""A batch job's pace: the time left at the recent pace and documents/s between samples."""
from __future__ import annotations

import pytest

from workstation.ui import job_progress as jp


def test_the_time_left_follows_the_recent_pace_not_the_whole_run():
    samples = [(0.0, 0), (10.0, 10), (20.0, 110), (30.0, 210)]          # slow start, then 10 documents/s
    assert jp.recent_rate(samples) == pytest.approx(10.0)
    assert jp.remaining_seconds(1_000, 210, jp.recent_rate(samples)) == pytest.approx(79.0)
    assert jp.recent_rate([(0.0, 5)]) is None and jp.remaining_seconds(10, 10, 3.0) is None
    assert jp.recent_rate([(0.0, 5), (1.0, 5)]) is None                # nothing moved: no pace to tell


def test_samples_of_a_job_that_stopped_moving_are_not_repeated():
    samples = jp.add_sample([], 0.0, 0)
    samples = jp.add_sample(samples, 1.0, 4)
    assert jp.add_sample(samples, 2.0, 4) == [(0.0, 0), (1.0, 4)]


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (12.4, "12 s"), (260, "4 min 20 s"), (11_100, "3 h 05 min")])
def test_durations_read_as_hours_minutes_and_seconds(seconds, text):
    assert jp.duration(seconds) == text


def test_throughput_is_documents_per_second_between_samples():
    frame = jp.throughput([(100.0, 0), (102.0, 10), (104.0, 30)])
    assert frame.to_dict("list") == {"seconds": [2.0, 4.0], "documents/s": [5.0, 10.0]}
    assert jp.throughput([(0.0, 0)]).empty
