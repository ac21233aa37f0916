"""Fine-tune: train a model on a gold dataset in a separate process, watch it live, compare before and after.

The trainer is `launcher.py finetune` in its own process (workstation.finetune.runs): this page starts it,
reads its events file once a second, and can cancel it (it saves a checkpoint first) or resume it.
A finished run's weights can be chosen in the sidebar for Extract, Batch and re-runs.
"""
from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from contracts.domain import InputError
from contracts.words import plural
from storage.repository import NotFound
from workstation import plugins
from workstation.finetune.outputs import default_output
from workstation.finetune.processes import log_tail
from workstation.finetune.progress import compare_rows
from workstation.finetune.request import FinetuneRequest
from workstation.ui import cautions, gpu, render, state

OTHER = "(another directory…)"
EVAL_MODES = {"train": "the training data", "dataset": "another dataset", "split": "a held-out share of it"}
# Material icons (Streamlit ships the font), not emoji: an emoji draws as a box where no emoji font is installed.
STATUS_ICONS = {"running": ":material/hourglass_top:", "cancelling": ":material/hourglass_bottom:",
                "completed": ":green[:material/check_circle:]", "cancelled": ":material/pause_circle:",
                "failed": ":red[:material/error:]"}

st.title("Fine-tune")
store, launcher = state.store(), state.training_launcher()
fams = state.families()
if not fams:
    st.error("No model plugin is installed. See the Plugins page.")
    st.stop()
settings = state.settings()


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "—"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


# ---- a new run ---------------------------------------------------------------------------------------------

def new_run_form() -> None:
    names = list(fams)
    if st.session_state.get("ft_model") not in names:
        st.session_state["ft_model"] = st.session_state.get("model") if st.session_state.get("model") in names \
            else names[0]
    cols = st.columns(3)
    model = cols[0].selectbox("Model", names, key="ft_model")
    choices = state.weight_choices(model)
    titles = {str(c.path): f"{c.title} · {c.path}" for c in choices}
    base = cols[1].selectbox("Base weights", [*titles, OTHER], key=f"ft_weights:{model}",
                             format_func=lambda p: titles.get(p, p),
                             help="settings.toml's weights, the demo weights, or the output of an earlier fine-tune.")
    if base == OTHER:
        base = cols[1].text_input("Weights directory", key=f"ft_weights_path:{model}",
                                  placeholder="/models/nlp_deberta_rex-uninlu_chinese-base")
    datasets = {d.id: d for d in store.list_datasets(model)}
    if not datasets:
        cols[2].info(f"No {render.md_text(model)} dataset yet: save corrected results from History, or import one on the "
                     "Datasets page.")
        return
    train = cols[2].selectbox("Training dataset", list(datasets), key=f"ft_train:{model}",
                              format_func=lambda i: f"{datasets[i].name} ({plural(datasets[i].examples, 'example')})")

    base_fam = fams[model]
    for caution in (cautions.tiny_dataset(datasets[train].examples, cautions.TINY_FOR_FINETUNE,
                                          "a fine-tune on it and its scores"),
                    cautions.demo_weights("a fine-tune of them and its scores")
                    if base and Path(base).is_dir() and base_fam.is_demo(Path(base)) else None):
        if caution:
            st.warning(render.md_text(caution), icon=":material/warning:")

    cols = st.columns(3)
    mode = cols[0].radio("Evaluate on", list(EVAL_MODES), format_func=EVAL_MODES.get, key="ft_eval_mode",
                         horizontal=True, help="P/R/F1 per type before training, after every epoch and at the end.")
    eval_dataset, share, split_seed = None, 0.0, 0
    if mode == "dataset":
        others = [i for i in datasets if i != train]
        if not others:
            cols[1].warning("There is no other dataset of this model to evaluate on.")
        else:
            eval_dataset = cols[1].selectbox("Evaluation dataset", others, key=f"ft_eval:{model}",
                                             format_func=lambda i: f"{datasets[i].name} ({datasets[i].examples})")
    elif mode == "split":
        share = cols[1].slider("Held-out share", 0.05, 0.5, 0.2, 0.05, key="ft_share")
        split_seed = cols[2].number_input("Split seed", 0, 2**31 - 1, 0, key="ft_split_seed")

    cols = st.columns(4)
    epochs = cols[0].number_input("Epochs", 1, 1000, 3, key="ft_epochs")
    batch_size = cols[1].number_input("Batch size", 1, 4096, 8, key="ft_batch")
    lr = cols[2].number_input("Learning rate", 1e-8, 1.0, 2e-5, step=1e-6, format="%.2e", key="ft_lr")
    seed = cols[3].number_input("Seed", 0, 2**31 - 1, 0, key="ft_seed")
    cols = st.columns(4)
    devices = state.device_choices(settings.model(model).device)
    device = cols[0].selectbox("Device", devices, key="ft_device",
                               help="auto = the first CUDA GPU when there is one, else the CPU.")
    on_cpu = device == "cpu" or (device == "auto" and not any(d.startswith("cuda:") for d in devices))
    dtype = cols[1].selectbox("Precision", ["fp32", "bf16"], key="ft_dtype",
                              help="bf16 autocast on CUDA (fp32 master weights); fp32 on the CPU.")
    usable = plugins.training_optimizations()          # each optimization declares whether it acts in training
    optimizations = cols[2].multiselect(
        "Optimizations", list(usable), key="ft_optimizations",
        help="\n\n".join(f"**{n}**: {o.description}" for n, o in usable.items())
        or "No installed optimization acts in fine-tuning.")
    out_key = f"ft_output:{model}:{train}"
    if out_key not in st.session_state:
        st.session_state[out_key] = str(default_output(settings, model, datasets[train].name))
    output = cols[3].text_input("Output directory", key=out_key, help="A new directory for the fine-tuned weights.")

    problem = None
    if dtype == "bf16" and on_cpu:
        problem = "bf16 training needs a CUDA device; choose a GPU or fp32."
    elif mode == "dataset" and eval_dataset is None:
        problem = "Choose an evaluation dataset, or evaluate on the training data."
    elif not base:
        problem = "Give the base weights directory."
    if problem:
        st.warning(render.md_text(problem))
    if st.button("Start fine-tuning", type="primary", disabled=bool(problem), key="ft_start"):
        request = FinetuneRequest(model, Path(base).expanduser(), train, Path(output).expanduser(), eval_dataset,
                                  share, int(split_seed), int(epochs), int(batch_size), float(lr), dtype, device,
                                  tuple(optimizations), int(seed))
        try:
            run_id = launcher.start(request)
        except (InputError, NotFound) as e:
            st.error(f"Nothing was started: {render.md_text(e)}")
        else:
            st.session_state["ft_run"] = run_id
            st.session_state.pop(out_key, None)           # the next run gets a fresh default name
            st.rerun()


# ---- one run -------------------------------------------------------------------------------------------------

def use_weights(model: str, output: str) -> None:
    st.session_state["model"] = model
    st.session_state[state.weights_key(model)] = output
    st.session_state["ft_used"] = output


def loss_chart(progress, run) -> None:
    points = progress.loss() or run.loss
    if points:
        frame = pd.DataFrame(points, columns=["step", "loss"])
        st.altair_chart(alt.Chart(frame).mark_line(point=len(frame) <= 50).encode(
            x=alt.X("step:Q", title="step", axis=alt.Axis(tickMinStep=1)), y=alt.Y("loss:Q", title="training loss"),
            tooltip=["step", alt.Tooltip("loss:Q", format=".4f")]).properties(height=220, title="Loss per step"))


def eval_frame(run) -> pd.DataFrame:
    """F1 per epoch, overall and per type; "before" is epoch 0."""
    points = []
    before = run.evaluation_before
    epochs = [(0, before)] if before else []
    epochs += [(e.get("epoch") or 0, e) for e in (run.evaluation_epochs or [])]
    if not run.evaluation_epochs and run.evaluation_after:
        epochs.append((max(len(run.evaluation_epochs), 1), run.evaluation_after))
    for epoch, ev in epochs:
        if (ev or {}).get("overall"):
            points.append({"epoch": epoch, "type": "(overall)", "F1": ev["overall"].get("f1")})
        for t, m in ((ev or {}).get("per_type") or {}).items():
            points.append({"epoch": epoch, "type": t, "F1": m.get("f1")})
    return pd.DataFrame(points)


def eval_chart(run) -> None:
    frame = eval_frame(run)
    if frame.empty:
        st.caption("No evaluation yet (it runs before training and after every epoch).")
        return
    st.altair_chart(alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("epoch:Q", title="epoch (0 = before training)", axis=alt.Axis(tickMinStep=1)),
        y=alt.Y("F1:Q", scale=alt.Scale(domain=[0, 1])), color=alt.Color("type:N", title=None),
        tooltip=["epoch", "type", alt.Tooltip("F1:Q", format=".3f")]).properties(height=220,
                                                                                  title="Evaluation F1 per epoch"))


def memory_chart(progress) -> None:
    rows = progress.memory()
    if rows:
        frame = pd.DataFrame(rows).melt("step", var_name="GPU memory", value_name="MiB").dropna()
        st.altair_chart(alt.Chart(frame).mark_line().encode(
            x="step:Q", y=alt.Y("MiB:Q", title="GPU memory (MiB)"), color=alt.Color("GPU memory:N", title=None))
            .properties(height=220, title="GPU memory per step"))


def comparison(run) -> None:
    rows = compare_rows(run.evaluation_before, run.evaluation_after)
    if not (run.evaluation_before or run.evaluation_after):
        st.caption("This run has no evaluation.")
        return
    st.markdown("**Before and after**: precision, recall and F1 per type")
    number = st.column_config.NumberColumn(format="%.3f")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key=f"ft_compare_{run.id}",
                 column_config={c: number for c in rows[0] if c not in ("type", "gold")})


def run_panel(run, progress) -> None:
    st.markdown(f"#### {STATUS_ICONS.get(run.status, '')} Training run {run.id} · {render.md_text(run.model)} · "
                f"`{run.status}`")
    device = (progress.start or {}).get("device")
    st.caption(f"Trained on {render.md_text(run.train_name)} · evaluated on "
               f"{render.md_text((run.datasets.get('eval') or {}).get('name') or (run.datasets.get('eval') or {}).get('path') or 'the training data')}"
               f" · from {render.md_code(run.base_weights)} → {render.md_code(run.output_dir)}"
               + (f" · device {render.md_text(device)}" if device else "") + f" · {render.md_text(run.source)}")
    total = run.total_steps or progress.total_steps
    step = run.step or 0                 # the stored step, as in the runs table (launcher.poll just wrote it)
    if not run.finished or total:
        epoch = (progress.last or {}).get("epoch")
        epochs = (progress.start or {}).get("epochs")
        text = f"step {step:,} / {total:,}" if total else "starting…"
        if epoch is not None and epochs:
            text += f" · epoch {epoch} / {epochs}"                 # epochs count from 1 in the events
        text += f" · elapsed {duration(progress.elapsed())}"
        if not run.finished:
            text += f" · ETA {duration(progress.eta())}"
        st.progress(min(step / total, 1.0) if total else 0.0, text=text)
    last = progress.last or {}
    cols = st.columns(4)
    loss = last.get("loss") if last else (run.loss[-1][1] if run.loss else None)
    cols[0].metric("Loss", f"{loss:.4f}" if isinstance(loss, (int, float)) else "—")
    latest = (run.evaluation_epochs or [None])[-1] or run.evaluation_after or run.evaluation_before
    f1 = ((latest or {}).get("overall") or {}).get("f1")
    cols[1].metric("F1 (latest evaluation)", f"{f1:.3f}" if f1 is not None else "—")
    cols[2].metric("GPU memory allocated", f"{last['gpu_allocated_MiB']:,.0f} MiB"
                   if last.get("gpu_allocated_MiB") is not None else "— (CPU)")
    cols[3].metric("GPU peak", f"{last['gpu_peak_MiB']:,.0f} MiB" if last.get("gpu_peak_MiB") is not None else "—")

    left, right = st.columns(2)
    with left:
        loss_chart(progress, run)
    with right:
        eval_chart(run)
    memory_chart(progress)
    if not run.finished and device and str(device).startswith("cuda"):
        with st.expander("GPU while it trains"):
            gpu.gpu_panel(state.gpu_recorder(), compact=True)
    if run.error:
        st.error(render.md_text(run.error))
    elif run.status == "failed":
        st.code(log_tail(run.log_path) or "(no log)", language=None)

    buttons = st.columns(4)
    if run.status == "running" and buttons[0].button("Cancel", key=f"ft_cancel_{run.id}",
                                                     help="The trainer finishes its step, saves a checkpoint, stops."):
        launcher.cancel(run.id)
        st.rerun()
    if run.status in ("cancelled", "failed") and run.source == "ui" and buttons[0].button(
            "Resume", key=f"ft_resume_{run.id}", help="Start again from the last checkpoint, with the same settings."):
        try:
            launcher.resume(run.id)
        except InputError as e:
            st.error(render.md_text(e))
        st.rerun()
    if run.status == "completed":
        comparison(run)
        if Path(run.output_dir).is_dir():
            in_use = st.session_state.get(state.weights_key(run.model)) == run.output_dir
            buttons[0].button("Use these weights", key=f"ft_use_{run.id}", type="primary", disabled=in_use,
                              on_click=use_weights, args=(run.model, run.output_dir),
                              help="Extract, Batch and re-runs then run on this checkpoint (the sidebar shows it).")
            if in_use:
                st.success(f"Extract and Batch run {render.md_text(run.model)} on this fine-tune "
                           f"({render.md_code(run.output_dir)}); "
                           "switch back in the sidebar.")
        else:
            st.warning(f"The output directory {render.md_code(run.output_dir)} is gone.")
    if run.finished:
        with buttons[3].popover("Forget this run"):
            st.write("Remove it from this list? The weights in its output directory stay.")
            if st.button("Forget", key=f"ft_forget_{run.id}"):
                launcher.forget(run.id)
                st.rerun()


# ---- the page --------------------------------------------------------------------------------------------------

with st.expander("New fine-tune", expanded=not store.list_training_runs(limit=1)):
    new_run_form()


def runs_view() -> None:
    """The runs table and the chosen run's panel, from the same rows: unfinished runs are polled first (which
    stores their progress), so the table and the panel show the same step. Refreshed every second while a
    run is going."""
    past = [r if r.finished else launcher.poll(r.id)[0] for r in store.list_training_runs(limit=200)]
    if not past:
        st.info("No fine-tuning runs yet.")
        return
    by_id = {r.id: r for r in past}
    running = [r.id for r in past if not r.finished]
    if st.session_state.get("ft_run") not in by_id:
        st.session_state["ft_run"] = running[0] if running else past[0].id
    if st.session_state.pop("ft_used", None):
        st.toast("Extract and Batch now use the fine-tuned weights.")

    st.subheader("Runs")
    st.dataframe(pd.DataFrame([{
        "run": r.id, "when": r.created_at.astimezone().strftime("%Y-%m-%d %H:%M"), "model": r.model,
        "dataset": r.train_name, "status": r.status, "steps": f"{r.step or 0} / {r.total_steps or '?'}",
        "F1 before": (r.evaluation_before or {}).get("overall", {}).get("f1"),
        "F1 after": (r.evaluation_after or {}).get("overall", {}).get("f1"), "source": r.source,
        "output": r.output_dir,
    } for r in past]), hide_index=True, width="stretch", key="ft_runs",
        column_config={"F1 before": st.column_config.NumberColumn(format="%.3f"),
                       "F1 after": st.column_config.NumberColumn(format="%.3f")})
    chosen = st.selectbox("Show run", list(by_id), key="ft_run",
                          format_func=lambda i: f"{i} · {by_id[i].model} · {by_id[i].train_name} · "
                                                f"{by_id[i].created_at.astimezone():%m-%d %H:%M}")
    with st.container(border=True):
        run_panel(by_id[chosen], launcher.poll(chosen)[1])     # the row of the table; the events for charts
    was_running, st.session_state["ft_running"] = st.session_state.get("ft_running", False), bool(running)
    if was_running and not running:
        st.rerun()                       # the last run finished: leave the refreshing fragment


any_running = any(not r.finished for r in store.list_training_runs(limit=200))
st.fragment(run_every=timedelta(seconds=1) if any_running else None)(state.survives_busy_store(runs_view))()
