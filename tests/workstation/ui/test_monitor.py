"""The GPU monitor: NVML failures become None or "no NVIDIA GPU", never a crash; the recorder is bounded."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pynvml
import pytest

from tests.fake_monitor import FakeMonitor
from workstation.monitor import GpuProcess, GpuRecorder, GpuSample, NvmlMonitor


@pytest.mark.parametrize("error", [pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded])
def test_without_a_driver_the_monitor_says_no_nvidia_gpu(monkeypatch, error):
    def init():
        raise error(getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND"))
    monkeypatch.setattr(pynvml, "nvmlInit", init)
    monitor = NvmlMonitor()
    assert not monitor.available and monitor.reason.startswith("no NVIDIA GPU")
    assert monitor.sample() == []
    monitor.close()


@pytest.fixture
def two_gpus(monkeypatch):
    """pynvml answering for two boards; GPU 1 cannot report temperature or processes."""
    gib = 1 << 30
    calls = []

    def on(name, fn):
        def wrapped(*args):
            calls.append(name)
            return fn(*args)
        monkeypatch.setattr(pynvml, name, wrapped)

    def fail(code):
        def raising(*args):
            raise pynvml.NVMLError(code)
        return raising
    on("nvmlInit", lambda: None)
    on("nvmlShutdown", lambda: None)
    on("nvmlSystemGetDriverVersion", lambda: "580.1")
    on("nvmlDeviceGetCount", lambda: 2)
    on("nvmlDeviceGetHandleByIndex", lambda i: f"h{i}")
    on("nvmlDeviceGetName", lambda h: f"RTX 4090 ({h})")
    on("nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(used=3 * gib, total=24 * gib, free=21 * gib))
    on("nvmlDeviceGetUtilizationRates", lambda h: SimpleNamespace(gpu=57, memory=20))
    on("nvmlDeviceGetTemperature", lambda h, sensor: 61 if h == "h0" else fail(pynvml.NVML_ERROR_NOT_SUPPORTED)())
    on("nvmlDeviceGetPowerUsage", lambda h: 250_500)
    on("nvmlDeviceGetEnforcedPowerLimit", lambda h: 450_000)
    procs = [SimpleNamespace(pid=11, usedGpuMemory=gib), SimpleNamespace(pid=12, usedGpuMemory=None)]
    on("nvmlDeviceGetComputeRunningProcesses",
       lambda h: procs if h == "h0" else fail(pynvml.NVML_ERROR_NO_PERMISSION)())
    on("nvmlDeviceGetGraphicsRunningProcesses", lambda h: [SimpleNamespace(pid=11, usedGpuMemory=gib)])
    on("nvmlSystemGetProcessName", lambda pid: b"python" if pid == 11 else fail(pynvml.NVML_ERROR_NOT_FOUND)())
    return calls


def test_one_failing_query_gives_none_and_the_rest_still_report(two_gpus):
    monitor = NvmlMonitor()
    assert monitor.available and monitor.driver == "580.1"
    g0, g1 = monitor.sample()
    assert (g0.temperature, g1.temperature) == (61, None)
    assert g1.memory_used == 3 << 30 and g1.utilization == 57 and g1.power_w == 250.5 and g1.power_limit_w == 450
    assert g0.processes == (GpuProcess(11, 1 << 30, "python"), GpuProcess(12, None, None))
    assert g1.processes == (GpuProcess(11, 1 << 30, "python"),)   # compute query refused; graphics answered
    monitor.close()
    assert "nvmlShutdown" in two_gpus


def test_the_fake_monitor_plays_its_script_and_a_failed_sample():
    ok = [GpuSample(0, "A", 1, 10)]
    monitor = FakeMonitor([ok, None, [GpuSample(0, "A", 2, 10)]])
    assert monitor.sample()[0].memory_used == 1
    failed = monitor.sample()
    assert failed == [GpuSample(0, "A")]                # every metric unknown, the board still listed
    assert monitor.sample()[0].memory_used == 2
    assert monitor.sample()[0].memory_used == 2         # the last entry repeats
    assert FakeMonitor.without_gpu().sample() == []


def test_the_recorder_keeps_a_bounded_window():
    recorder = GpuRecorder(FakeMonitor.steady(gpus=1), interval_s=1.0, window_s=5.0)
    for _ in range(12):
        recorder.record_once()
    history = recorder.history()
    assert len(history) == 5
    assert [s.gpus[0].memory_used >> 30 for s in history] == [8, 9, 10, 11, 12]
    assert recorder.latest() is history[-1]


def test_the_recorder_samples_on_its_own_thread_and_stops():
    recorder = GpuRecorder(FakeMonitor.steady(gpus=2), interval_s=0.1, window_s=60).start()
    deadline = time.time() + 5
    while len(recorder.history()) < 3 and time.time() < deadline:
        time.sleep(0.05)
    recorder.stop()
    count = len(recorder.history())
    assert count >= 3 and len(recorder.latest().gpus) == 2
    time.sleep(0.3)
    assert len(recorder.history()) == count


def test_a_monitor_that_raises_does_not_kill_the_recorder():
    class Broken(FakeMonitor):
        def sample(self):
            raise RuntimeError("driver went away")
    recorder = GpuRecorder(Broken([[GpuSample(0)]]), interval_s=1)
    assert recorder.record_once().gpus == ()


def test_without_a_gpu_the_recorder_samples_the_host_alone():
    from workstation.monitor import HostSample
    readings = iter(range(100))
    recorder = GpuRecorder(FakeMonitor.without_gpu(), interval_s=0.1,
                           host=lambda: HostSample(float(next(readings)), 2, 3 << 30, 8 << 30, 1 << 28)).start()
    deadline = time.time() + 5
    while len(recorder.history()) < 3 and time.time() < deadline:
        time.sleep(0.05)
    recorder.stop()
    history = recorder.history()
    assert not recorder.available and len(history) >= 3
    assert [s.gpus for s in history[:3]] == [(), (), ()]
    assert [s.host.cpu_percent for s in history[:3]] == [0.0, 1.0, 2.0]


def test_the_host_sampler_reads_this_machine_and_hides_the_first_cpu_share():
    from workstation.monitor import HostSampler
    sampler = HostSampler()
    first = sampler()
    assert first.cpu_percent is None                   # psutil has no earlier reading to measure it against
    assert first.cpus >= 1 and 0 < first.memory_used < first.memory_total and first.process_rss > 0
    time.sleep(0.05)
    assert 0.0 <= sampler().cpu_percent <= 100.0


def test_a_recorder_without_a_host_sampler_and_gpu_starts_no_thread():
    recorder = GpuRecorder(FakeMonitor.without_gpu(), host=None).start()
    assert recorder._thread is None
