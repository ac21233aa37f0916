"""Extract: pick a task preset, edit the schema, paste text, run, see the result drawn over the text."""
from __future__ import annotations

import streamlit as st

from contracts.domain import InputError, WeightsError
from contracts.names import Reads
from storage.repository import NotFound
from workstation.ui import render, results, runs, schema_editor, state
from workstation.ui.model_options import option_widgets
from workstation.ui.threshold_view import threshold_switch

fam = state.current_family()
if fam is None:
    st.error("No model plugin is installed, so there is nothing to run. See the Plugins page.")
    st.stop()

presets = fam.tasks
TASK, SCHEMA, TEXT, PENDING = (f"{k}:{fam.name}" for k in ("task", "schema", "text", "pending-schema"))
state.keep_widget_values(TASK, SCHEMA, TEXT)


def load_preset() -> None:
    preset = presets[st.session_state[TASK]]
    st.session_state[SCHEMA] = schema_editor.dump(preset.schema)
    st.session_state[TEXT] = preset.text


if st.session_state.get(TASK) not in presets:
    st.session_state[TASK] = next(iter(presets))
    load_preset()
if PENDING in st.session_state:         # the types form wrote a schema; a widget's value is set before it is drawn
    st.session_state[SCHEMA] = st.session_state.pop(PENDING)

st.title("Extract")
st.selectbox("Task", list(presets), key=TASK, on_change=load_preset,
             format_func=lambda n: f"{presets[n].title} ({n})",
             help="Choosing a task fills in its example schema and text.")
preset = presets[st.session_state[TASK]]
if preset.description:
    st.caption(preset.description)

left, right = st.columns([2, 3])
with left:
    st.text_area("Schema (JSON)", key=SCHEMA, height=220,
                 help="A list of labels." if fam.reads == Reads.LABELS else
                 "An object of types, nested for relations and events.")
with right:
    st.text_area("Text", key=TEXT, height=220, placeholder="Paste the text to extract from")
    st.caption(f"{len(st.session_state.get(TEXT) or ''):,} characters")

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
        st.success("Schema and text are valid.", icon=":material/check_circle:")
    types = schema_editor.flat_types(schema, fam.reads) if schema is not None else None
    if types is not None:
        with st.form(f"types-form:{fam.name}", border=False):
            typed = st.text_input("Types (comma-separated)", value=", ".join(types),
                                  help="A quick way to edit a flat schema; nested schemas need the JSON editor.")
            if st.form_submit_button("Use these types") and schema_editor.split_types(typed):
                flat = schema_editor.flat_schema(schema_editor.split_types(typed), fam.reads)
                st.session_state[PENDING] = schema_editor.dump(flat)
                st.rerun()

options = option_widgets(fam, "extract")
thresholds = threshold_switch(fam.name)
opts = state.chosen_optimizations()
st.caption("Chosen optimizations: " + (", ".join(render.md_text(o) for o in opts) if opts else "none (fp32 eager path)")
           + " — those that do not apply to this model are skipped; change them on the Optimizations page.")
if st.button("Run", type="primary", disabled=bool(schema_error)):
    doc = runs.document_for(fam, preset, schema, st.session_state.get(TEXT) or "")
    request = runs.RunRequest(fam.name, state.device_for(fam.name), tuple(opts), task=preset.name,
                              options=tuple(sorted(options.items())), thresholds=thresholds)
    try:
        with st.spinner(f"Running {fam.name}…"):
            st.session_state["extract_run_id"] = runs.run_and_record(request, [doc])
    except (InputError, WeightsError) as e:
        st.error(render.md_text(e))
    except Exception as e:              # a model failure is shown, never a crashed page
        st.error(f"The run failed: {type(e).__name__}: {render.md_text(e)}")

run_id = st.session_state.get("extract_run_id")
if run_id is not None:
    try:
        detail = state.store().get_run(run_id)
    except NotFound as e:
        st.info(render.md_text(e))
    else:
        st.subheader(f"Run {run_id}")
        results.run_view(detail, key="extract")
