"""Extract: pick a task preset, edit the schema (or labels), paste text, run, see the result drawn over the text.

The person's work is kept: the text is one draft for every model (a model switch never swaps it for a preset's
example; only an untouched example is), the schema one draft per model and task. A run goes on a thread of its
own (workstation/ui/extraction.py) with its elapsed time, progress and a Cancel; a result whose form has changed
since is marked as such.
"""
from __future__ import annotations

from datetime import timedelta

import streamlit as st

from contracts.domain import InputError, WeightsError
from contracts.names import Reads
from contracts.words import plural
from storage.repository import NotFound
from workstation.ui import extraction, render, results, runs, schema_editor, state
from workstation.ui.model_options import option_widgets
from workstation.ui.threshold_view import threshold_switch

fam = state.current_family()
if fam is None:
    st.error("No model plugin is installed, so there is nothing to run. See the Plugins page.")
    st.stop()

presets = fam.tasks
TASK, SCHEMA, TEXT, PENDING = (f"{k}:{fam.name}" for k in ("task", "schema", "text", "pending-schema"))
DRAFT_TEXT, DRAFT_TASK = "draft:text", f"draft:task:{fam.name}"
FILLED_FOR = "extract:filled-for"       # (model, task) the form's boxes were last filled for
RUNNING, RAN = "extract:running", "extract:ran"
state.keep_widget_values(TASK, SCHEMA, TEXT)
examples = {p.text for f in state.families().values() for p in f.tasks.values()}


def schema_draft(task: str) -> str:
    return f"draft:schema:{fam.name}:{task}"


if st.session_state.get(TASK) not in presets:
    st.session_state[TASK] = st.session_state.get(DRAFT_TASK) if st.session_state.get(DRAFT_TASK) in presets \
        else next(iter(presets))
task = st.session_state[TASK]
preset = presets[task]
# Fill the boxes when the model or task changed, or when Streamlit dropped them (another page was shown):
# from the drafts, and with the preset's example only where the person has not typed anything of their own.
if st.session_state.get(FILLED_FOR) != (fam.name, task) or SCHEMA not in st.session_state \
        or TEXT not in st.session_state:
    st.session_state[SCHEMA] = st.session_state.get(schema_draft(task), schema_editor.dump(preset.schema))
    text = st.session_state.get(DRAFT_TEXT)
    st.session_state[TEXT] = preset.text if not (text or "").strip() or text in examples else text
    st.session_state[FILLED_FOR] = (fam.name, task)
if PENDING in st.session_state:         # the types form wrote a schema; a widget's value is set before it is drawn
    st.session_state[SCHEMA] = st.session_state.pop(PENDING)

st.title("Extract")
st.selectbox("Task", list(presets), key=TASK,
             format_func=lambda n: f"{presets[n].title} ({n})",
             help="A task brings its example schema; your own text and edits are kept.")
if preset.description:
    st.caption(preset.description)

labels_model = fam.reads == Reads.LABELS
left, right = st.columns([2, 3])
with left:
    st.text_area("Labels (JSON list)" if labels_model else "Schema (JSON)", key=SCHEMA, height=220,
                 help="A list of labels, such as [\"人物\", \"地点\"]." if labels_model else
                 "An object of types, nested for relations and events.")
with right:
    st.text_area("Text", key=TEXT, height=220, placeholder="Paste the text to extract from")
    st.caption(render.md_text(plural(len(st.session_state.get(TEXT) or ''), "character")))
st.session_state[DRAFT_TEXT] = st.session_state.get(TEXT) or ""
st.session_state[schema_draft(task)] = st.session_state.get(SCHEMA) or ""
st.session_state[DRAFT_TASK] = task

schema, schema_error = None, None
try:
    schema = schema_editor.parse_schema(st.session_state.get(SCHEMA) or "")
    fam.check(runs.document_for(fam, preset, schema, st.session_state.get(TEXT) or ""))
except InputError as e:
    schema_error = str(e)
except Exception as e:                  # a plugin's validator tripping over odd input must not crash the page
    schema_error = f"This schema cannot be checked: {type(e).__name__}: {e}"

with left:
    if schema_error:
        st.error(render.md_text(schema_error))
    else:
        st.success(("Labels" if labels_model else "Schema") + " and text are valid.", icon=":material/check_circle:")
    types = schema_editor.flat_types(schema, fam.reads) if schema is not None else None
    if types is not None:
        with st.form(f"types-form:{fam.name}", border=False):
            typed = st.text_input(("Labels" if labels_model else "Types") + " (comma-separated)",
                                  value=", ".join(types),
                                  help="A quick way to edit a flat schema; nested schemas need the JSON editor.")
            if st.form_submit_button("Use these " + ("labels" if labels_model else "types")) \
                    and schema_editor.split_types(typed):
                flat = schema_editor.flat_schema(schema_editor.split_types(typed), fam.reads)
                st.session_state[PENDING] = schema_editor.dump(flat)
                st.rerun()

options = option_widgets(fam, "extract")
thresholds = threshold_switch(fam.name)
opts = state.chosen_optimizations()
device = state.device_for(fam.name)
st.caption("Chosen optimizations: " + (", ".join(render.md_text(o) for o in opts) if opts else "none (fp32 eager path)")
           + " — those that do not apply to this model are skipped; change them on the Optimizations page.")
st.caption(render.md_text(state.device_plan(device)))
form = {"model": fam.name, "task": task, "schema": st.session_state.get(SCHEMA), "text": st.session_state.get(TEXT),
        "options": options, "device": device, "thresholds": thresholds, "optimizations": opts}


def finish(job: extraction.BackgroundRun) -> None:
    """A run that ended: its result becomes the page's, or its error or cancel is said once."""
    st.session_state.pop(RUNNING, None)
    if job.run_id is not None:
        st.session_state["extract_run_id"] = job.run_id
        st.session_state[RAN] = job.form
    elif job.cancelled:
        st.session_state["extract:notice"] = ("info", f"Cancelled after {job.elapsed():.1f} s; nothing was recorded.")
    elif isinstance(job.error, (InputError, WeightsError)):
        st.session_state["extract:notice"] = ("error", str(job.error))
    elif job.error is not None:
        st.session_state["extract:notice"] = ("error", f"The run failed: {type(job.error).__name__}: {job.error}")


job: extraction.BackgroundRun | None = st.session_state.get(RUNNING)
if job is not None and job.done:        # ended since the last rerun: Run is free again
    finish(job)
    job = None
clicked = st.button("Run", type="primary", disabled=bool(schema_error) or job is not None)
if clicked and job is None:             # a click sent before Run was redrawn disabled starts nothing more
    doc = runs.document_for(fam, preset, schema, st.session_state.get(TEXT) or "")
    request = runs.RunRequest(fam.name, device, tuple(opts), task=preset.name,
                              options=tuple(sorted(options.items())), thresholds=thresholds)
    st.session_state.pop("extract:notice", None)
    try:
        job = extraction.BackgroundRun(runs.recorded_run(request, [doc]), fam.name, form).start()
    except (InputError, WeightsError) as e:
        st.error(render.md_text(e))
    else:
        st.session_state[RUNNING] = job
        if job.wait(extraction.wait_s):
            finish(job)
            job = None
        else:
            st.rerun()                  # Run was drawn before the run began: drawn again, disabled


@st.fragment(run_every=timedelta(seconds=0.5))
def progress() -> None:
    """Elapsed time and the model's progress, redrawn twice a second; the whole page reruns at the end."""
    running: extraction.BackgroundRun | None = st.session_state.get(RUNNING)
    if running is None:
        return
    if running.done:
        st.rerun()
    with st.container(border=True):
        st.markdown(f"**Running {render.md_text(running.what)}…**")
        st.caption(render.md_text(running.describe()))
        if st.button("Cancel", key="extract-cancel", disabled=running.cancel.is_set(),
                     help="Stops at the model's next step; nothing is recorded"):
            running.cancel.set()
            st.rerun(scope="fragment")


if job is not None:
    progress()

notice = st.session_state.get("extract:notice")
if notice:
    (st.error if notice[0] == "error" else st.info)(render.md_text(notice[1]))

run_id = st.session_state.get("extract_run_id")
if run_id is not None:
    try:
        detail = state.store().get_run(run_id)
    except NotFound as e:
        st.info(render.md_text(e))
    else:
        st.subheader(f"Run {run_id}")
        ran = st.session_state.get(RAN)
        changed = [k for k in form if ran is not None and ran.get(k) != form[k]]
        if changed:
            st.warning(f"This result is from before you changed the {render.md_text(', the '.join(changed))}: press Run to "
                       "update it.", icon=":material/history:")
        results.run_view(detail, key="extract", demo_notice=False)   # the page's banner says it already
