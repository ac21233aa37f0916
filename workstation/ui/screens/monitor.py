"""Machine monitor: the host's CPU and memory and every GPU, refreshed every settings.monitor_interval_s by a
fragment, so the page keeps updating."""
from __future__ import annotations

from datetime import timedelta

import streamlit as st

from workstation.ui import gpu, render, state

st.title("Machine monitor")
recorder = state.gpu_recorder()


@st.fragment(run_every=timedelta(seconds=recorder.interval_s))
def live() -> None:
    gpu.gpu_panel(recorder)
    allocator_view()
    loaded = state.model_shelf().loaded()
    if loaded:
        st.caption("Models loaded by this app: "
                   + "; ".join(render.md_text(f"{k[0]} on {k[2]} ({k[3]})") for k in loaded))


def allocator_view() -> None:
    """PyTorch's view of this process (allocated by tensors, reserved by the caching allocator)."""
    import torch
    if not torch.cuda.is_available():
        return
    st.caption("This process, PyTorch's view: " + "; ".join(
        f"cuda:{i:d} allocated {torch.cuda.memory_allocated(i) / gpu.MIB:,.0f} MiB, "
        f"reserved {torch.cuda.memory_reserved(i) / gpu.MIB:,.0f} MiB" for i in range(torch.cuda.device_count())))


live()
