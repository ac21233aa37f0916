"""The Streamlit main script, run for every browser session whichever page URL it opens first
(`python3 launcher.py` serves it through workstation/ui/server.py, which starts the job runner first).

Pages are listed here (scripts in screens/); models, tasks and optimizations are discovered through the plugin manager
(workstation.plugins), never by name.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:           # `streamlit run` puts only this folder on sys.path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from contracts.model import DEMO_NOTICE  # noqa: E402
from workstation import engine  # noqa: E402
from workstation.settings import SettingsError  # noqa: E402
from workstation.ui import render, state  # noqa: E402

SCREENS = Path(__file__).parent / "screens"

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
    if st.session_state["device"] == "auto":
        st.sidebar.caption(render.md_text(state.device_plan("auto")))
    weights_choice(name)
    weights, demo = state.weights_for(name)
    if fams[name].needs_weights or weights.exists():
        st.sidebar.caption(f"Weights: {render.md_code(weights)}")
    else:
        st.sidebar.caption(f"Weights: none needed ({render.md_code(weights)} is read if it exists)")
    if fams[name].needs_weights and not weights.exists():
        st.warning(render.md_text(engine.missing_weights(name, weights)), icon=":material/warning:")
    elif demo:
        st.warning(f"**{render.md_text(name)}: {DEMO_NOTICE}**", icon=":material/warning:")
    if fams[name].needs_weights and (demo or not weights.exists()):
        st.page_link(WEIGHTS_PAGE, label="Download the official weights: Model weights", icon=":material/download:")


def weights_choice(name: str) -> None:
    """Once a fine-tune of this model has finished, its output can be picked for Extract, Batch and re-runs."""
    choices = state.weight_choices(name)
    if len(choices) < 2:
        return
    titles = {str(c.path): c.title for c in choices}
    key = state.weights_key(name)
    if st.session_state.get(key) not in titles:
        st.session_state[key] = str(state.settings().weights_for(name, state.families()[name].needs_weights)[0])
        if st.session_state[key] not in titles:
            st.session_state[key] = str(choices[0].path)
    st.sidebar.selectbox("Weights", list(titles), key=key, format_func=lambda p: titles[p],
                         help="settings.toml's weights, or the output of a finished fine-tune (Fine-tune page).")


WEIGHTS_PAGE = st.Page(SCREENS / "weights.py", title="Model weights", icon=":material/download:")
nav = st.navigation({
    "Work": [
        st.Page(SCREENS / "extract.py", title="Extract", icon=":material/manage_search:", default=True),
        st.Page(SCREENS / "batch.py", title="Batch", icon=":material/inventory_2:"),
        st.Page(SCREENS / "history.py", title="History", icon=":material/history:"),
        st.Page(SCREENS / "review.py", title="Review", icon=":material/rule:"),
    ],
    "Training": [
        st.Page(SCREENS / "datasets.py", title="Datasets", icon=":material/dataset:"),
        st.Page(SCREENS / "finetune.py", title="Fine-tune", icon=":material/model_training:"),
        st.Page(SCREENS / "thresholds.py", title="Thresholds", icon=":material/filter_alt:"),
    ],
    "System": [
        WEIGHTS_PAGE,
        st.Page(SCREENS / "optimizations.py", title="Optimizations", icon=":material/tune:"),
        st.Page(SCREENS / "monitor.py", title="Machine monitor", icon=":material/monitoring:"),
        st.Page(SCREENS / "plugins.py", title="Plugins", icon=":material/extension:"),
    ],
})


@state.survives_busy_store
def run_page() -> None:
    sidebar()
    state.job_runner()                  # the server started it already (server.py); `streamlit run` starts it here
    nav.run()


try:
    state.settings()
except SettingsError as e:              # every page needs them; the next rerun reads the file again
    st.error(f"**settings.toml cannot be used.** {render.md_text(e)}", icon=":material/error:")
    st.stop()
run_page()
