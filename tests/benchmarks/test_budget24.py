"""bench budget24's search for the largest batch that fits (the GPU part runs on the device machine only)."""
import pytest

from benchmarks.budget24 import largest


@pytest.mark.parametrize("limit", [8, 9, 100, 224, 239, 1000])
def test_the_search_finds_the_largest_fitting_batch_to_within_an_eighth(limit):
    tried = []

    def fits_at(batch):
        tried.append(batch)
        return batch <= limit, batch / 10
    found = largest(fits_at, cap=1024)
    assert found["largest"] <= limit and found["largest"] >= limit - max(limit // 8, 1)
    assert not found["capped"] and found["probes"] == len(tried) and found["peak_gib"] == found["largest"] / 10


def test_a_batch_that_never_backs_off_stops_at_the_cap_and_says_so():
    assert largest(lambda batch: (True, 1.0), cap=256) == {"largest": 256, "capped": True, "peak_gib": 1.0, "probes": 6}


def test_nothing_fits_gives_zero():
    assert largest(lambda batch: (False, None), cap=256)["largest"] == 0
