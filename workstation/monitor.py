"""GPU monitor: per-GPU memory, utilisation, temperature, power and the processes holding memory.

`NvmlMonitor` reads NVML (the `nvidia-ml-py` package, imported as `pynvml`). Every query is wrapped
so one failing query (not supported on this board, a lost process) yields None instead of a crash,
the way gpustat's `safenvml` does. Anything shaped like `GpuMonitor` can be sampled instead.
`GpuRecorder` samples a monitor on a background thread into a bounded history, so the UI can draw
the last minutes without asking NVML from the script thread. Every sample also holds the host's CPU and
memory (psutil), so a machine without a GPU still has a monitor, as nvitop shows both.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None          # None: NVML cannot see it (container PID namespace, WDDM)
    name: str | None = None


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str | None = None
    memory_used: int | None = None      # bytes
    memory_total: int | None = None     # bytes
    utilization: int | None = None      # % of time a kernel ran
    temperature: int | None = None      # °C
    power_w: float | None = None
    power_limit_w: float | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class HostSample:
    cpu_percent: float | None = None    # all cores, since the previous sample
    cpus: int | None = None
    memory_used: int | None = None      # bytes, the machine's (total less available)
    memory_total: int | None = None
    process_rss: int | None = None      # this app's resident memory


@dataclass(frozen=True)
class Snapshot:
    time: float                         # time.time() of the sample
    gpus: tuple[GpuSample, ...]
    host: HostSample | None = None


class HostSampler:
    """The host's CPU and memory now; None for what psutil cannot read here. psutil's CPU share is measured
    since its previous call, so the first one (which has none) is not shown: it reads 0 %."""

    def __init__(self) -> None:
        self._first = True

    def __call__(self) -> HostSample:
        import psutil
        try:
            cpu = psutil.cpu_percent(interval=None)
            memory = psutil.virtual_memory()
            rss = psutil.Process().memory_info().rss
        except (psutil.Error, OSError):
            return HostSample()
        cpu, self._first = (None if self._first else cpu), False
        return HostSample(cpu, psutil.cpu_count(), memory.total - memory.available, memory.total, rss)


class GpuMonitor(Protocol):
    available: bool
    reason: str                         # why not available ("" when available)

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class NvmlMonitor:
    """The real thing. Without an NVIDIA driver it reports `available = False` and samples nothing."""

    def __init__(self) -> None:
        self.available = False
        self.reason = ""
        self.driver: str | None = None
        try:
            import pynvml
        except ImportError:
            self.reason = "nvidia-ml-py is not installed"
            return
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded) as e:
            self.reason = f"no NVIDIA GPU ({e})"
            return
        except pynvml.NVMLError as e:
            self.reason = f"NVML could not start: {e}"
            return
        self.available = True
        self.driver = self._query(pynvml.nvmlSystemGetDriverVersion)

    def _query(self, fn: Callable, *args):
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def sample(self) -> list[GpuSample]:
        if not self.available:
            return []
        nv = self._nvml
        count = self._query(nv.nvmlDeviceGetCount) or 0
        gpus = []
        for i in range(count):
            h = self._query(nv.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                gpus.append(GpuSample(i))
                continue
            mem = self._query(nv.nvmlDeviceGetMemoryInfo, h)
            util = self._query(nv.nvmlDeviceGetUtilizationRates, h)
            power = self._query(nv.nvmlDeviceGetPowerUsage, h)
            limit = self._query(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            gpus.append(GpuSample(
                index=i,
                name=self._query(nv.nvmlDeviceGetName, h),
                memory_used=getattr(mem, "used", None),
                memory_total=getattr(mem, "total", None),
                utilization=getattr(util, "gpu", None),
                temperature=self._query(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                power_w=power / 1000 if power is not None else None,
                power_limit_w=limit / 1000 if limit is not None else None,
                processes=self._processes(h),
            ))
        return gpus

    def _processes(self, handle) -> tuple[GpuProcess, ...]:
        nv = self._nvml
        by_pid: dict[int, GpuProcess] = {}
        for query in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
            for p in self._query(query, handle) or []:
                used = getattr(p, "usedGpuMemory", None)
                if p.pid not in by_pid:
                    by_pid[p.pid] = GpuProcess(p.pid, used, self._process_name(p.pid))
        return tuple(by_pid.values())

    def _process_name(self, pid: int) -> str | None:
        name = self._query(self._nvml.nvmlSystemGetProcessName, pid)
        return name.decode() if isinstance(name, bytes) else name

    def close(self) -> None:
        if self.available:
            self._query(self._nvml.nvmlShutdown)
            self.available = False


class GpuRecorder:
    """Samples a monitor and the host every `interval_s` on a daemon thread; keeps the last `window_s` seconds.
    `host`: what samples the host (None: the GPUs only)."""

    def __init__(self, monitor: GpuMonitor, interval_s: float = 1.0, window_s: float = 300.0,
                 host: Callable[[], HostSample] | None | str = "psutil") -> None:
        self.monitor = monitor
        self.host = HostSampler() if host == "psutil" else host
        self.interval_s = max(float(interval_s), 0.1)
        self._history: deque[Snapshot] = deque(maxlen=max(int(window_s / self.interval_s), 2))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self.monitor.available

    def record_once(self) -> Snapshot:
        try:
            gpus = tuple(self.monitor.sample())
        except Exception:               # a monitor bug must not kill the sampling thread
            gpus = ()
        try:
            host = self.host() if self.host else None
        except Exception:
            host = None
        snap = Snapshot(time.time(), gpus, host)
        with self._lock:
            self._history.append(snap)
        return snap

    def start(self) -> "GpuRecorder":
        if (self.monitor.available or self.host is not None) and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gpu-recorder", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.record_once()
            self._stop.wait(self.interval_s)

    def history(self) -> list[Snapshot]:
        with self._lock:
            return list(self._history)

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._history[-1] if self._history else None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.monitor.close()
