"""The GPU panel: per-GPU numbers, charts over the recorded window, and the processes holding memory.

Drawn from the GpuRecorder's history (sampled on its own thread), so drawing never waits on NVML.
"""
from __future__ import annotations

import os
from datetime import datetime

import altair as alt
import pandas as pd
import streamlit as st

from workstation.monitor import GpuRecorder, GpuSample, Snapshot
from workstation.ui import render

MIB = 1 << 20


def _num(value, fmt: str, unit: str = "") -> str:
    return "—" if value is None else f"{value:{fmt}}{unit}"


SERIES = {"memory": "memory used (MiB)", "utilisation": "utilisation (%)", "temperature": "temperature (°C)",
          "power": "power (W)"}


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
            .encode(x=alt.X("time:T", title=None), y=alt.Y(f"{series}:Q", title=SERIES[series], scale=scale),
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


def gpu_panel(recorder: GpuRecorder, compact: bool = False) -> None:
    if not recorder.available:
        # The reason already says what is missing ("no NVIDIA GPU (…)"); it is not repeated in front of it.
        st.info(f"The GPU monitor is off: {render.md_text(recorder.monitor.reason)}. Everything else works on the CPU.")
        return
    history = recorder.history()
    latest = recorder.latest()
    if latest is None:
        st.caption("Waiting for the first sample…")
        return
    if not latest.gpus:
        st.warning("NVML answered with no GPUs in the last sample.")
    minutes = len(history) * recorder.interval_s / 60
    st.caption(f"Sampled every {recorder.interval_s:g} s; charts show the last {minutes:.1f} min. "
               f"This app is process {os.getpid()}.")
    for gpu in latest.gpus:
        gpu_card(gpu, history, compact)
