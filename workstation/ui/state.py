"""Process-wide resources shared by every browser tab (st.cache_resource), and the per-tab choices.

st.session_state holds ids and small choices only (model name, device, optimization names, run ids);
models, the store, the GPU recorder and the job runner live here, once per process.
"""
from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

from contracts.model import ModelFamily
from storage.views import StoreBusy
from workstation import plugins
from workstation.monitor import GpuRecorder, NvmlMonitor
from workstation.settings import Settings, load_settings
from workstation.shelf import ModelShelf
from workstation.ui import render

# What the GPU recorder samples: NVML. Anything shaped like monitor.GpuMonitor can take its place.
monitor_factory = NvmlMonitor
# The command that runs a fine-tuning job; None: `launcher.py finetune` with this interpreter.
trainer_command: list[str] | None = None
HISTORY_WINDOW_S = 600


def settings() -> Settings:
    return load_settings()               # cheap; re-read so settings.toml edits show up on the next rerun


def bound_host() -> str | None:
    """The address the server listens on: Streamlit's --server.address when given (launcher.py always
    gives settings.toml's), else settings.toml's [ui] host."""
    return st.get_option("server.address") or settings().ui_host


@st.cache_resource(show_spinner=False)
def _store(db_path: str):
    from storage.repository import open_store
    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    return open_store(db_path)


def store():
    s = settings()
    return _store(str(s.path(s.database)))


@st.cache_resource(show_spinner=False)
def model_shelf() -> ModelShelf:
    return ModelShelf()


@st.cache_resource(show_spinner=False, on_release=lambda recorder: recorder.stop())
def _gpu_recorder(interval_s: float) -> GpuRecorder:
    return GpuRecorder(monitor_factory(), interval_s, HISTORY_WINDOW_S).start()


def gpu_recorder() -> GpuRecorder:
    return _gpu_recorder(settings().monitor_interval_s)


@st.cache_resource(show_spinner=False)
def _job_runner(db_path: str):
    from workstation.jobs import JobRunner
    # Jobs borrow the pages' models, slice by slice: a job started from Batch runs on the model already
    # loaded for its device, never on a second copy (workstation/jobs.py says how the two take turns).
    runner = JobRunner(_store(db_path), borrow=model_shelf().borrow_for_job)
    runner.resume_unfinished()          # once per process: jobs cut off by the last shutdown go on
    return runner


def job_runner():
    s = settings()
    return _job_runner(str(s.path(s.database)))


@st.cache_resource(show_spinner=False)
def _training_launcher(db_path: str, command: tuple[str, ...] | None):
    from workstation.finetune.runs import TrainingLauncher
    launcher = TrainingLauncher(_store(db_path), Path(db_path).parent / "training-runs",
                                list(command) if command else None)
    launcher.follow_unfinished()        # once per process: runs left going by the last UI get their final state
    return launcher


def training_launcher():
    """Starts and follows fine-tuning processes (one per UI process; the processes outlive it)."""
    s = settings()
    return _training_launcher(str(s.path(s.database)), tuple(trainer_command) if trainer_command else None)


def survives_busy_store(body):
    """Show a busy database as a message instead of a traceback. app.py wraps every page run in this;
    a fragment needs it too, because a fragment's own reruns do not pass through app.py."""
    @functools.wraps(body)
    def guarded(*args, **kwargs):
        try:
            return body(*args, **kwargs)
        except StoreBusy as e:
            st.error(render.md_text(str(e)), icon=":material/hourglass_top:")
    return guarded


# --- per-tab choices -------------------------------------------------------------------------------

def families() -> dict[str, ModelFamily]:
    return plugins.model_families()


def current_family() -> ModelFamily | None:
    fams = families()
    name = st.session_state.get("model")
    if name not in fams:
        name = next(iter(fams), None)
        st.session_state["model"] = name
    return fams.get(name) if name else None


def weight_choices(name: str) -> list:
    """settings.toml's (or the demo) weights, then completed fine-tunes of the model (workstation.finetune.outputs)."""
    from workstation.finetune.outputs import weight_choices as choices
    return choices(settings(), store(), name)


def weights_key(name: str) -> str:
    return f"weights:{name}"


def weights_for(name: str) -> tuple[Path, bool]:
    """(weights dir, is_demo): the weights chosen in the sidebar (a fine-tune's output), else settings.toml's.
    Demo: nothing configured, or the dir holds demo weights (a model tuned from demo weights is one too)."""
    fam = families().get(name)
    weights, demo = settings().weights_for(name, fam.needs_weights if fam else True)
    chosen = st.session_state.get(weights_key(name))
    if chosen and chosen != str(weights) and Path(chosen).is_dir():
        weights, demo = Path(chosen), False
    return weights, demo or bool(fam and weights.exists() and fam.is_demo(weights))


def device_for(name: str) -> str:
    return st.session_state.get("device") or settings().model(name).device


def device_plan(device: str) -> str:
    """What a run on `device` will use, said before it runs ("auto" names its choice)."""
    import torch
    if device not in ("", "auto"):
        return f"Device: {device}"
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        return f"Device: auto → cuda:{index} ({torch.cuda.get_device_name(index)})"
    return "Device: auto → cpu (PyTorch sees no CUDA GPU)"


def device_choices(configured: str) -> list[str]:
    """The configured device first, then auto, the CPU and every visible CUDA GPU."""
    import torch
    found = ["auto", "cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return [configured] + [d for d in found if d != configured]


def chosen_optimizations() -> list[str]:
    if "optimizations" not in st.session_state:
        st.session_state["optimizations"] = list(settings().optimizations)
    return list(st.session_state["optimizations"])


def keep_widget_values(*keys: str) -> None:
    """Streamlit drops a widget's value when its page is not shown; re-assigning keeps it across pages."""
    for key in keys:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
