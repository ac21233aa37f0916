"""The Streamlit entry point: `streamlit run workstation/ui/app.py` (what `python3 launcher.py` starts).

Pages are discovered here; models, tasks and optimizations are discovered through the plugin manager
(workstation.plugins), never by name.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:           # `streamlit run` puts only this folder on sys.path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from workstation.models import DEMO_NOTICE  # noqa: E402
from workstation.ui import render, state  # noqa: E402

PAGES = Path(__file__).parent / "pages"

st.set_page_config(page_title="IE Workstation", page_icon=":material/manage_search:", layout="wide")


def sidebar() -> None:
    fams = state.families()
    if not fams:
        st.sidebar.error("No model plugin is installed.")
        return
    state.current_family()
    st.sidebar.selectbox("Model", list(fams), key="model")
    name = st.session_state["model"]
    st.sidebar.caption(fams[name].title)
    devices = state.device_choices(state.settings().model(name).device)
    if st.session_state.get("device") not in devices:
        st.session_state["device"] = devices[0]
    st.sidebar.selectbox("Device", devices, key="device",
                         help="auto = the first CUDA GPU when there is one, else the CPU.")
    weights_choice(name)
    weights, demo = state.weights_for(name)
    st.sidebar.caption(f"Weights: {render.md_code(weights)}")
    if demo:
        st.warning(f"**{render.md_text(name)}: {DEMO_NOTICE}**", icon=":material/warning:")


def weights_choice(name: str) -> None:
    """Once a fine-tune of this model has finished, its output can be picked for Extract, Batch and re-runs."""
    choices = state.weight_choices(name)
    if len(choices) < 2:
        return
    titles = {str(c.path): c.title for c in choices}
    key = state.weights_key(name)
    if st.session_state.get(key) not in titles:
        st.session_state[key] = str(state.settings().weights_for(name)[0])
        if st.session_state[key] not in titles:
            st.session_state[key] = str(choices[0].path)
    st.sidebar.selectbox("Weights", list(titles), key=key, format_func=lambda p: titles[p],
                         help="settings.toml's weights, or the output of a finished fine-tune (Fine-tune page).")


nav = st.navigation({
    "Work": [
        st.Page(PAGES / "extract.py", title="Extract", icon=":material/manage_search:", default=True),
        st.Page(PAGES / "batch.py", title="Batch", icon=":material/inventory_2:"),
        st.Page(PAGES / "history.py", title="History", icon=":material/history:"),
    ],
    "Training": [
        st.Page(PAGES / "datasets.py", title="Datasets", icon=":material/dataset:"),
        st.Page(PAGES / "finetune.py", title="Fine-tune", icon=":material/model_training:"),
    ],
    "System": [
        st.Page(PAGES / "optimizations.py", title="Optimizations", icon=":material/tune:"),
        st.Page(PAGES / "monitor.py", title="GPU monitor", icon=":material/monitoring:"),
        st.Page(PAGES / "plugins.py", title="Plugins", icon=":material/extension:"),
    ],
})
sidebar()
state.job_runner()                      # first run in this process resumes unfinished batch jobs
nav.run()
