"""UI test setup: settings and database in a tmp dir, the fake model plugin, a scripted GPU monitor."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.registered import plugin_registered

APP = str(Path(__file__).resolve().parents[3] / "workstation" / "ui" / "app.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: end-to-end test in a real browser (needs /usr/bin/chromium)")


def write_settings(tmp: Path, weights: Path, extra: str = "") -> Path:
    path = tmp / "settings.toml"
    path.write_text(f"""
[models.fakeie]
weights = "{weights}"
device = "cpu"
batch_size = 4

[models.fakegen]
weights = "{weights}"
device = "cpu"
batch_size = 4

[storage]
database = "{tmp / 'runs.db'}"
demo_weights_dir = "{tmp / 'demo-weights'}"
demo_size = "tiny"

[monitor]
interval_s = 0.2
{extra}
""", encoding="utf-8")
    return path


@pytest.fixture
def fake_plugin():
    from tests.workstation.ui.fake_plugin import FakePlugin
    with plugin_registered(FakePlugin(), "undo-fake-ie") as plugin:
        yield plugin


@pytest.fixture
def ui_env(tmp_path, monkeypatch, fake_plugin):
    """Settings pointing at tmp, fake demo weights, a FakeMonitor; Streamlit caches cleared around each test."""
    import streamlit as st

    from tests.fake_monitor import FakeMonitor
    from workstation import settings
    from workstation.ui import state
    weights = fake_plugin.family.write_demo_weights(tmp_path / "fake-weights")
    monkeypatch.setattr(settings, "DEFAULT_PATH", write_settings(tmp_path, weights))
    monkeypatch.setattr(state, "monitor_factory", lambda: FakeMonitor.steady(gpus=2, pid=os.getpid()))
    from workstation.ui import extraction
    monkeypatch.setattr(extraction, "wait_s", 60)   # a click on Run shows its result in the same script run
    st.cache_resource.clear()
    yield tmp_path
    st.cache_resource.clear()           # stops the recorder thread, drops the store and the shelf


@pytest.fixture
def app(ui_env):
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["model"] = "fakeie"
    at.session_state["device"] = "cpu"
    return at
