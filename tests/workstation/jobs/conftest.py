"""Fixtures for the batch-worker tests: the fake model plugin, fake weights (`store` is in tests/conftest.py)."""
from __future__ import annotations

import pytest

from tests.workstation.jobs import fake_model


@pytest.fixture
def fake(tmp_path):
    """The fake model plugin, registered for one test; yields the module (PROCESSED, LOADS, GATES)."""
    for log in (fake_model.PROCESSED, fake_model.LOADS):
        log.clear()
    fake_model.GATES.clear()
    with fake_model.registered():
        try:
            yield fake_model
        finally:
            for gate in fake_model.GATES.values():
                gate.set()                      # never leave a worker thread blocked


@pytest.fixture
def weights(tmp_path):
    return fake_model.FakeFamily().write_demo_weights(tmp_path / "fake-weights")
