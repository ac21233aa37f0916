"""The machine monitor page with a scripted GPU monitor, and without any GPU (the host alone)."""
from __future__ import annotations

import os
import time

from tests.fake_monitor import FakeMonitor
from workstation.ui import state

PAGE = "screens/monitor.py"


def wait_for_samples(n: int) -> None:
    recorder = state.gpu_recorder()
    deadline = time.time() + 10
    while len(recorder.history()) < n and time.time() < deadline:
        time.sleep(0.05)


def test_each_gpu_shows_its_numbers_charts_and_processes_with_this_app_marked(app):
    at = app.run()
    wait_for_samples(3)
    at.switch_page(PAGE).run()
    assert not at.exception
    assert any(f"This app is process {os.getpid()}" in c.value for c in at.caption)
    labels = [m.label for m in at.metric]
    assert labels.count("Memory (MiB)") == 2 and labels.count("Temperature") == 2
    memory = [m.value for m in at.metric if m.label == "Memory (MiB)"][0]
    assert memory.endswith("/ 24,576")
    assert len(at.get("vega_lite_chart")) >= 8          # memory, util, temperature, power per GPU
    processes = at.dataframe[0].value
    assert list(processes["pid"]) == [os.getpid()] and list(processes["this app"]) == ["◀ this app"]


def test_the_monitor_keeps_sampling_between_reruns(app):
    app.run().switch_page(PAGE).run()
    recorder = state.gpu_recorder()
    before = len(recorder.history())
    time.sleep(1.0)                                            # the recorder samples every 0.2 s in tests
    assert len(recorder.history()) >= before + 3


def test_without_an_nvidia_gpu_the_page_charts_the_host_and_keeps_nvmls_words_to_a_details_line(app, monkeypatch):
    monkeypatch.setattr(state, "monitor_factory", lambda: FakeMonitor.without_gpu())
    at = app.run()
    wait_for_samples(3)
    at.switch_page(PAGE).run()
    assert not at.exception
    said = [i.value for i in at.info]
    assert said and said[0].startswith("No NVIDIA GPU here") and "NVML" not in said[0]
    assert any(c.value.startswith("Details: ") and "NVML Shared Library Not Found" in c.value for c in at.caption)
    labels = [m.label for m in at.metric]
    assert {"CPU", "Memory (GiB)", "This app"} <= set(labels)
    assert len(at.get("vega_lite_chart")) == 2                  # CPU and memory over time
    at.switch_page("screens/extract.py").run()
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and not at.error


def test_with_gpus_the_host_is_charted_above_them(app):
    at = app.run()
    wait_for_samples(3)
    at.switch_page(PAGE).run()
    hosts = [m.value for m in at.markdown if m.value.startswith("**Host**")]
    gpus = [m.value for m in at.markdown if m.value.startswith("**GPU ")]
    assert len(hosts) == 1 and len(gpus) == 2
