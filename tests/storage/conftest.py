"""Fixtures for the store and exporter tests: a store in tmp_path and runs with awkward content."""
from __future__ import annotations

import pytest

from storage import open_store
from tests.storage.sample_runs import make_report, ner_run


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "history" / "runs.db")
    yield s
    s.close()


@pytest.fixture
def recorded(store):
    """(store, run id) of the awkward run."""
    docs, results = ner_run()
    return store, store.record_run(make_report(results), docs, "ui", task="relation", settings_snapshot={"x": 1})
