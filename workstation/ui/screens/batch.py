"""Batch: a JSONL/CSV/TXT file runs as a background job; progress lives in SQLite, so it survives reloads."""
from __future__ import annotations

import tempfile
import time
from datetime import timedelta
from pathlib import Path

import streamlit as st

from contracts.domain import InputError
from contracts.names import Reads
from contracts.stages import describe as describe_stages
from contracts.words import plural
from workstation import plugins
from workstation.inputs import TEXT, read_valid_documents
from workstation.ui import exports, file_preview, gpu, job_progress, local_files, render, runs, schema_editor, state
from workstation.ui.model_options import option_widgets

SUFFIXES = ["jsonl", "json", "csv", "txt"]
MAX_ERRORS_SHOWN = 20
PREVIEW_BYTES = 64 << 20                 # a file on the server larger than this is not read for a preview

st.title("Batch")
fam = state.current_family()
if fam is None:
    st.error("No model plugin is installed. See the Plugins page.")
    st.stop()
presets = fam.tasks
TASK, SCHEMA = f"batch-task:{fam.name}", f"batch-schema:{fam.name}"
state.keep_widget_values(TASK, SCHEMA, "batch_source", "batch_path")


def load_preset() -> None:
    st.session_state[SCHEMA] = schema_editor.dump(presets[st.session_state[TASK]].schema)


if st.session_state.get(TASK) not in presets:
    st.session_state[TASK] = next(iter(presets))
    load_preset()

@st.cache_data(show_spinner=False, max_entries=8)
def _preview(data: bytes, suffix: str) -> file_preview.Preview:
    return file_preview.preview(data, suffix)


def input_preview(upload, path_text: str | None) -> str:
    """The file's rows and columns, its first rows, and the choice of the column that holds the text (kept in
    the job's settings). Returns that column ("text" where there is no choice to make)."""
    if upload is not None:
        data, suffix = upload.getvalue(), Path(upload.name).suffix
    elif path_text and path_text.strip():
        try:
            path = local_files.local_file(path_text, state.settings(), state.bound_host())
            if path.stat().st_size > PREVIEW_BYTES:
                st.caption(f"{render.md_text(path.name)} is too large to preview here; it is read when the job starts.")
                return st.text_input("Text column", TEXT, key="batch_text_column_typed")
            data, suffix = path.read_bytes(), path.suffix
        except (InputError, OSError):
            return TEXT                  # the path's problem is reported when the job is started
    else:
        return TEXT
    seen = _preview(data, suffix)
    if seen.problem:
        st.warning(f"The file cannot be previewed: {render.md_text(seen.problem)}")
        return TEXT
    st.caption(plural(seen.rows, "row") + (f" · {plural(len(seen.columns), 'column')}: "
                                          + ", ".join(render.md_code(c) for c in seen.columns) if seen.columns else ""))
    st.dataframe(seen.head, hide_index=True, key="batch_preview", height=min(38 + 35 * len(seen.head), 220))
    if not seen.columns:
        return TEXT
    if st.session_state.get("batch_text_column") not in seen.columns:
        st.session_state["batch_text_column"] = seen.text_guess()
    return st.selectbox("Text column", seen.columns, key="batch_text_column",
                        help="The column (JSONL: the key) that holds the text to extract from.")


with st.container(border=True):
    st.markdown(("**Input**: JSONL (`{\"id\", \"text\", \"task\", \"labels\"}`)" if fam.reads == Reads.LABELS else
                 "**Input**: JSONL (`{\"id\", \"text\", \"schema\"}`)")
                + ", TXT (one text a line) or CSV (one text a row). The column that holds the text is chosen below "
                  "the preview; lines without their own schema use the default below.")
    path_refused = local_files.refusal(state.settings(), state.bound_host())
    loopback = local_files.is_loopback(state.bound_host())
    # Beyond loopback the choice is not offered at all (and read_input refuses it if a stale state asks).
    sources = ["Upload a file", "A file on this machine"] if loopback else ["Upload a file"]
    if st.session_state.get("batch_source") not in sources:
        st.session_state["batch_source"] = sources[0]
    source = st.radio("Source", sources, horizontal=True, key="batch_source")
    upload = path_text = None
    if source == "Upload a file":
        upload = st.file_uploader("Input file", type=SUFFIXES, key="batch_upload")
    elif path_refused:
        st.info(render.md_text(path_refused))
    else:
        path_text = st.text_input("Path on the server", key="batch_path", placeholder="news.jsonl",
                                  help="A file inside a folder of settings.toml's [batch] input_folders.")
        st.caption("Folders open to Batch: "
                   + ", ".join(render.md_code(str(f)) for f in local_files.input_folders(state.settings())))
    text_column = input_preview(upload, path_text)
    left, right = st.columns(2)
    left.selectbox("Default task", list(presets), key=TASK, on_change=load_preset,
                   format_func=lambda n: f"{presets[n].title} ({n})")
    left.text_area("Default schema (JSON)", key=SCHEMA, height=180)
    resolved = runs.config_for(runs.RunRequest(fam.name, state.device_for(fam.name), ())).batch_size
    batch_size = right.number_input("Batch size", 1, 1024, resolved,
                                    help="settings.toml's; with batch_size = \"auto\" there, the largest that fits "
                                         "this GPU's memory (docs/performance.md)")
    registry = plugins.optimizations()
    chosen = [n for n in state.chosen_optimizations() if n in registry]
    optimizations = right.multiselect("Optimizations", list(registry), default=chosen,
                                      help="Those that do not apply to the model are skipped (see Optimizations).")
    skip_invalid = right.checkbox("Skip invalid lines and report them", value=False)
    with right:
        options = option_widgets(fam, "batch")
    start = st.button("Start batch job", type="primary")


def read_input(default, skip_invalid: bool) -> tuple[list, list, str]:
    """(valid documents, invalid-line errors, display name). An upload is read from a temp file, removed after:
    the job keeps its own copy of the documents."""
    if upload is not None:
        suffix = Path(upload.name).suffix.lower() or ".txt"
        with tempfile.TemporaryDirectory(prefix="iew-upload-") as folder:
            path = Path(folder) / f"input{suffix}"
            path.write_bytes(upload.getvalue())
            return *read_valid_documents(path, fam, default, skip_invalid, upload.name,
                                         text_column=text_column), upload.name
    if path_text and path_text.strip():
        path = local_files.local_file(path_text, state.settings(), state.bound_host())
        return *read_valid_documents(path, fam, default, skip_invalid, text_column=text_column), str(path)
    raise InputError("choose a file to upload or type a path first")


def default_schema():
    source = st.session_state.get(SCHEMA) or ""
    if not source.strip():
        return None                     # every line brings its own schema
    schema = schema_editor.parse_schema(source)
    runs.check_schema_shape(fam, presets[st.session_state[TASK]], schema)
    return {"task": st.session_state[TASK], "labels": schema} if fam.reads == Reads.LABELS else schema


if start:
    try:
        valid, errors, name = read_input(default_schema(), skip_invalid)
        if not valid:
            raise InputError(f"{name} has no document that can be run" + (f" ({len(errors)} invalid)" if errors else ""))
        request = runs.RunRequest(fam.name, state.device_for(fam.name), tuple(optimizations),
                                  task=st.session_state[TASK], batch_size=int(batch_size),
                                  options=tuple(sorted(options.items())))
        job_id = runs.start_job(request, valid, name, inputs={"file": name, "text_column": text_column})
        st.toast(f"Job {job_id} started with {plural(len(valid), 'document')}.")
        if errors:
            st.warning(f"Skipped {plural(len(errors), 'invalid line')}: "
                       + "; ".join(render.md_text(e) for e in errors[:MAX_ERRORS_SHOWN]))
    except InputError as e:
        st.error(f"Nothing was started: {render.md_text(e)}")
    except OSError as e:
        st.error(f"Could not read the input: {render.md_text(e)}")
    except Exception as e:              # e.g. the model cannot load: say so, keep the page and the upload
        st.error(f"Nothing was started: {type(e).__name__}: {render.md_text(e)}")

st.subheader("Jobs")


@st.fragment(run_every=timedelta(seconds=1))
@state.survives_busy_store
def jobs() -> None:
    store = state.store()
    listed = store.list_jobs(limit=20)
    if not listed:
        st.caption("No batch jobs yet.")
        return
    for job in listed:
        job_card(store, job)
    if any(j.status == "running" for j in listed):
        with st.expander("The machine while the job runs", expanded=True):
            gpu.gpu_panel(state.gpu_recorder(), compact=True)


def job_card(store, job) -> None:
    with st.container(border=True):
        cols = st.columns([5, 1])
        cols[0].markdown(f"**Job {job.id}** · {render.md_text(job.source_name)} · {render.md_text(job.model)} · "
                         f"`{job.status}`")
        samples = pace(job)
        recent = job_progress.recent_rate(samples) if job.status == "running" else None
        rate = f" · {job.docs_per_second:,.1f} docs/s" if job.docs_per_second else ""
        left = job_progress.remaining_seconds(job.total, job.done, recent or job.docs_per_second)
        left_text = f" · about {job_progress.duration(left)} left" if left is not None and not job.finished else ""
        st.progress(job.fraction, text=f"{job.done:,} / {plural(job.total, 'document')}{rate} · {job.wall_seconds:,.1f} s"
                                       f"{left_text}")
        chart = job_progress.throughput(samples)
        if len(chart) >= 2:
            with st.expander("Throughput (documents/s while this page was open)", expanded=not job.finished):
                st.line_chart(chart, x="seconds", y="documents/s", height=160)
        if (job.stages or {}).get("seconds"):             # where the time went, summed over the slices done
            seconds = job.stages["seconds"]
            busy = seconds.get("device", 0.0) / job.wall_seconds if job.wall_seconds else None
            st.caption(render.md_text(describe_stages(seconds, job.wall_seconds, busy, job.stages.get("backoffs"))))
        if job.corpus_output:
            st.caption(f"Corpus job (`launcher.py corpus`): results in {render.md_text(job.corpus_output)}. "
                       "Run the same command again to resume it.")
        if not job.finished:
            if cols[1].button("Cancel", key=f"cancel-{job.id}"):
                state.job_runner().cancel(job.id)
                st.rerun(scope="fragment")
        elif job.status in ("cancelled", "failed"):
            if job.error:
                st.error(render.md_text(job.error))
            if not job.corpus_output and cols[1].button("Resume", key=f"resume-{job.id}",
                                                        help="The documents already done stay done."):
                if store.requeue_job(job.id):
                    state.job_runner().submit(job.id)
                st.rerun(scope="fragment")
        elif job.run_id is not None:
            if cols[1].button("Open run", key=f"open-{job.id}"):
                st.session_state["history_view"] = ("open", job.run_id)
                st.switch_page(str(Path(__file__).parent / "history.py"))
            with cols[1].popover("Download", help="The run's results in any export format."):
                exports.export_picker(store, [job.run_id], key=f"job-{job.id}-export")


def pace(job) -> list[tuple[float, int]]:
    """This tab's samples of the job's progress (one each time its card is drawn), for the pace and the chart."""
    every = st.session_state.setdefault("batch_pace", {})
    every[job.id] = job_progress.add_sample(every.get(job.id, []), time.monotonic(), job.done)
    return every[job.id]


jobs()
