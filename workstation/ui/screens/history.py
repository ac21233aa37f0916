"""History: search runs, open one, compare two, re-run, delete, export a selection; correct a result into a
gold example for fine-tuning."""
from __future__ import annotations

from datetime import datetime, time, timedelta

import pandas as pd
import streamlit as st

from contracts.domain import InputError, WeightsError
from storage.repository import NotFound
from workstation.ui import exports, gold_editor, render, results, runs, state

PAGE_SIZE = 50
ANY = "(any)"



def finished(run):
    return run.finished_at or run.created_at


st.title("History")
store = state.store()
choices = store.run_filters()

c = st.columns([3, 2, 2, 3])
text = c[0].text_input("Search text, schema, spans", key="history_text",
                       placeholder="a word from the text or an extracted span")
model = c[1].selectbox("Model", [ANY] + choices["model"], key="history_model")
task = c[2].selectbox("Task", [ANY] + choices["task"], key="history_task")
dates = c[3].date_input("Date range", value=(), key="history_dates")
since = datetime.combine(dates[0], time.min) if len(dates) >= 1 else None
until = datetime.combine(dates[1], time.min) + timedelta(days=1) if len(dates) == 2 else None
cut = st.checkbox("Only runs with documents the model read partly (cut)", key="history_cut",
                  help="SeqGPT keeps the last 1,024 prompt tokens of a long text unless run with long-text "
                       "window; such documents are listed here, and their unread part is greyed out.")
filters = dict(text=text or None, model=None if model == ANY else model, task=None if task == ANY else task,
               since=since, until=until, cut=cut)
total = store.count_runs(**filters)
pages = max((total + PAGE_SIZE - 1) // PAGE_SIZE, 1)
page = st.number_input(f"Page (of {pages})", 1, pages, 1, key="history_page") if pages > 1 else 1
found = store.search_runs(**filters, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
st.caption(f"{total:,} run(s) match, the latest finished first.")
if not found:
    st.info("No runs yet: run something on the Extract or Batch page." if total == 0 and not any(filters.values())
            else "No run matches these filters.")
    st.stop()

table = st.dataframe(pd.DataFrame([{
    "run": r.id, "finished": finished(r).astimezone().strftime("%Y-%m-%d %H:%M:%S"),
    "started": r.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"), "source": r.source,
    "model": r.model, "task": r.task or "", "documents": r.documents,
    "cut": f"{r.cut_documents} of {r.documents}" if r.cut_documents is not None else "—",
    "wall time (s)": round(r.wall_seconds, 3),
    "peak GPU memory": results.fmt_bytes(r.peak_memory_bytes), "device": r.device, "precision": r.dtype,
    "optimizations": ", ".join(r.optimizations) or "none", "demo": r.demo, "label": r.label or "",
} for r in found]), hide_index=True, width="stretch", key="history_table", on_select="rerun",
    selection_mode="multi-row")
with_cuts = [r.id for r in found if r.cut_documents]
if with_cuts:
    cut_docs = store.cut_documents(with_cuts)
    with st.expander(f"Documents read only partly ({len(cut_docs):,}{'+' if len(cut_docs) >= 1000 else ''} "
                     f"in {len(with_cuts)} listed run(s))"):
        st.dataframe(pd.DataFrame([{"run": c.run_id, "document": c.doc_id, "position": c.position, "model": c.model,
                                    "characters": c.characters, "not read": c.unread} for c in cut_docs]),
                     hide_index=True, key="history_cut_documents")
        st.caption("Open a run to see the unread part greyed out; SeqGPT's long-text window mode reads all of it.")

by_id = {r.id: r for r in found}
# keep only selections still on this page (a new search or a delete changes what is listed)
st.session_state["history_selected"] = [i for i in st.session_state.get("history_selected", []) if i in by_id]
clicked = [found[i].id for i in table.selection.rows if i < len(found)]
if clicked != st.session_state.get("history_clicked", []):     # rows clicked in the table: they are the selection
    st.session_state["history_clicked"] = clicked
    st.session_state["history_selected"] = clicked
selected = st.multiselect("Selected runs", list(by_id), key="history_selected",
                          format_func=lambda i: f"{i} · {by_id[i].model} · {by_id[i].task or ''} · "
                                                f"{finished(by_id[i]).astimezone():%m-%d %H:%M}")
b = st.columns(5)
if b[0].button("Open", disabled=len(selected) != 1):
    st.session_state["history_view"] = ("open", selected[0])
if b[1].button("Compare", disabled=len(selected) != 2, help="Select exactly two runs."):
    st.session_state["history_view"] = ("compare", *sorted(selected))
if b[2].button("Re-run", disabled=len(selected) != 1, help="Run the same documents with the same settings again."):
    try:
        with st.spinner("Running again…"):
            kind, new_id = runs.rerun(store.get_run(selected[0]))
        if kind == "job":
            st.info(f"Started batch job {new_id}; follow it on the Batch page. Its run appears here when done.")
        else:
            st.session_state["history_view"] = ("compare", selected[0], new_id)
            st.session_state["extract_run_id"] = new_id
            st.toast(f"Run {new_id} recorded.")
    except (InputError, WeightsError, NotFound) as e:
        st.error(render.md_text(e))
    except Exception as e:              # a failed re-run is reported; the history stays usable
        st.error(f"The re-run failed: {type(e).__name__}: {render.md_text(e)}")
with b[3].popover("Delete", disabled=not selected):
    st.write(f"Delete {len(selected)} run(s) and their results? This cannot be undone.")
    if st.button("Delete for good", type="primary", key="history_delete"):
        for run_id in selected:
            store.delete_run(run_id)
        st.session_state.pop("history_view", None)
        st.rerun()
with b[4].popover("Export", disabled=not selected):
    exports.export_picker(store, selected)

view = st.session_state.get("history_view")
if view:
    st.divider()
    try:
        if view[0] == "open":
            st.subheader(f"Run {view[1]}")
            detail = store.get_run(view[1])
            position = results.run_view(detail, key="history")
            if position is not None:
                gold_editor.editor(store, detail, position)
        else:
            results.comparison_view(store, view[1], view[2])
    except NotFound as e:
        st.info(render.md_text(e))
