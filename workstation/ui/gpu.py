"""The machine panel: the host's CPU and memory, and per GPU its numbers, charts over the recorded window
and the processes holding memory (as nvitop shows them).

Drawn from the GpuRecorder's history (sampled on its own thread), so drawing never waits on NVML or psutil.
"""
from __future__ import annotations

import os
from datetime import datetime

import altair as alt
import pandas as pd
import streamlit as st

from workstation.monitor import GpuRecorder, GpuSample, HostSample, Snapshot
from workstation.ui import render

MIB = 1 << 20


def _num(value, fmt: str, unit: str = "") -> str:
    return "—" if value is None else f"{value:{fmt}}{unit}"


SERIES = {"memory": "memory used (MiB)", "utilisation": "utilisation (%)", "temperature": "temperature (°C)",
          "power": "power (W)", "cpu": "CPU, all cores (%)", "host_memory": "memory used (GiB)"}
GIB = 1 << 30


def history_frame(history: list[Snapshot], index: int) -> pd.DataFrame:
    """One row per sample of GPU `index`: time, memory used (MiB), utilisation, temperature, power."""
    rows = []
    for snap in history:
        g = next((g for g in snap.gpus if g.index == index), None)
        if g is not None:
            rows.append({"time": datetime.fromtimestamp(snap.time),
                         "memory": g.memory_used / MIB if g.memory_used is not None else None,
                         "utilisation": g.utilization, "temperature": g.temperature, "power": g.power_w})
    return pd.DataFrame(rows)


def chart(frame: pd.DataFrame, series: str, top: float | None, height: int) -> alt.Chart:
    """A line over time; memory and utilisation are drawn against their full scale, so height means fullness."""
    scale = alt.Scale(domain=[0, top]) if top else alt.Scale(zero=True)
    return (alt.Chart(frame).mark_line(interpolate="step-after")
            .encode(x=alt.X("time:T", title=None, axis=alt.Axis(format="%H:%M:%S", labelAngle=0)), y=alt.Y(f"{series}:Q", title=SERIES[series], scale=scale),
                    tooltip=[alt.Tooltip("time:T", format="%H:%M:%S"), alt.Tooltip(f"{series}:Q", title=SERIES[series])])
            .properties(height=height))


def process_frame(gpu: GpuSample, own_pid: int) -> pd.DataFrame:
    return pd.DataFrame([{"pid": p.pid, "process": p.name or "?",
                          "GPU memory (MiB)": round(p.used_bytes / MIB) if p.used_bytes is not None else None,
                          "this app": "◀ this app" if p.pid == own_pid else ""}
                         for p in gpu.processes])


def gpu_card(gpu: GpuSample, history: list[Snapshot], compact: bool) -> None:
    with st.container(border=True):
        st.markdown(f"**GPU {gpu.index}** · {render.md_text(gpu.name or 'unknown board')}")
        cols = st.columns(4)
        used = _num(gpu.memory_used and gpu.memory_used / MIB, ",.0f")
        total = _num(gpu.memory_total and gpu.memory_total / MIB, ",.0f")
        cols[0].metric("Memory (MiB)", f"{used} / {total}")
        cols[1].metric("Utilisation", _num(gpu.utilization, "d", " %"))
        cols[2].metric("Temperature", _num(gpu.temperature, "d", " °C"))
        power = _num(gpu.power_w, ".0f", " W")
        if gpu.power_limit_w is not None:
            power += f" / {gpu.power_limit_w:.0f} W"
        cols[3].metric("Power", power)
        frame = history_frame(history, gpu.index)
        if not frame.empty:
            height = 130 if compact else 170
            total = gpu.memory_total / MIB if gpu.memory_total else None
            left, right = st.columns(2)
            left.altair_chart(chart(frame, "memory", total, height))
            right.altair_chart(chart(frame, "utilisation", 100, height))
            if not compact:
                left.altair_chart(chart(frame, "temperature", None, height))
                right.altair_chart(chart(frame, "power", gpu.power_limit_w, height))
        if gpu.processes:
            st.dataframe(process_frame(gpu, os.getpid()), hide_index=True)
        elif not compact:
            st.caption("No process holds memory on this GPU (or NVML cannot see them from here).")


def host_frame(history: list[Snapshot]) -> pd.DataFrame:
    """One row per sample with a host reading: time, CPU (%), memory used (GiB)."""
    return pd.DataFrame([{"time": datetime.fromtimestamp(snap.time), "cpu": snap.host.cpu_percent,
                          "host_memory": snap.host.memory_used / GIB if snap.host.memory_used is not None else None}
                         for snap in history if snap.host is not None])


def host_card(host: HostSample, history: list[Snapshot], compact: bool) -> None:
    """This machine's CPU and memory now and over the window (psutil)."""
    with st.container(border=True):
        st.markdown("**Host** · " + render.md_text(f"{_num(host.cpus, 'd')} CPU cores"))
        cols = st.columns(3)
        cols[0].metric("CPU", _num(host.cpu_percent, ".0f", " %"))
        used = _num(host.memory_used and host.memory_used / GIB, ",.1f")
        total = _num(host.memory_total and host.memory_total / GIB, ",.1f")
        cols[1].metric("Memory (GiB)", f"{used} / {total}")
        cols[2].metric("This app", _num(host.process_rss and host.process_rss / MIB, ",.0f", " MiB"))
        frame = host_frame(history)
        if len(frame) > 1:
            height = 150 if compact else 170
            left, right = st.columns(2)
            left.altair_chart(chart(frame, "cpu", 100, height))
            right.altair_chart(chart(frame, "host_memory", host.memory_total / GIB if host.memory_total else None,
                                     height))


def gpu_panel(recorder: GpuRecorder, compact: bool = False) -> None:
    history = recorder.history()
    latest = recorder.latest()
    if not recorder.available and compact:      # beside a job's card: one line is enough
        st.caption(f"No NVIDIA GPU here: the host's CPU and memory. Details: {render.md_text(recorder.monitor.reason)}")
    elif not recorder.available:
        st.info("No NVIDIA GPU here: the host's CPU and memory are shown; everything works on the CPU.",
                icon=":material/memory:")
        # NVML's own words help whoever sets up a driver; in a details line, not the headline.
        st.caption(f"Details: {render.md_text(recorder.monitor.reason)}")
    if latest is None:
        st.caption("Waiting for the first sample…")
        return
    if latest.host is not None:
        host_card(latest.host, history, compact)
    if not recorder.available:
        return
    if not latest.gpus:
        st.warning("NVML answered with no GPUs in the last sample.")
    minutes = len(history) * recorder.interval_s / 60
    st.caption(f"Sampled every {recorder.interval_s:g} s; charts show the last {minutes:.1f} min. "
               f"This app is process {os.getpid()}.")
    for gpu in latest.gpus:
        gpu_card(gpu, history, compact)
