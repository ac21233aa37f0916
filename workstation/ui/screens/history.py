"""History: search runs and documents, open a run's document table, compare two runs, re-run, delete, export a
selection; correct a result into a gold example for fine-tuning."""
from __future__ import annotations

from datetime import datetime, time, timedelta

import pandas as pd
import streamlit as st

from contracts.domain import InputError, WeightsError
from contracts.runs import RunDetail
from contracts.words import agree, plural
from storage.repository import NotFound
from workstation.ui import document_table, exports, gold_editor, render, results, runs, state

PAGE_SIZE = 50
ANY = "(any)"
# The table fits the page with these; the rest are a click away in "Columns".
COLUMNS = ("run", "finished", "started", "source", "input", "model", "task", "documents", "cut", "wall time (s)",
           "documents/s", "peak GPU memory", "device", "precision", "optimizations", "demo", "label")
SHOWN = ("run", "finished", "source", "input", "model", "task", "documents", "cut", "wall time (s)", "optimizations",
         "label")


def finished(run):
    return run.finished_at or run.created_at


def run_row(r, input_name: str | None) -> dict:
    return {
        "run": r.id, "finished": finished(r).astimezone().strftime("%Y-%m-%d %H:%M:%S"),
        "started": r.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"), "source": r.source,
        "input": input_name or "", "model": r.model, "task": r.task or "", "documents": r.documents,
        "cut": f"{r.cut_documents} of {r.documents}" if r.cut_documents is not None else "—",
        "wall time (s)": round(r.wall_seconds, 3),
        "documents/s": round(r.docs_per_second, 2) if r.docs_per_second else None,
        "peak GPU memory": results.fmt_bytes(r.peak_memory_bytes), "device": r.device, "precision": r.dtype,
        "optimizations": ", ".join(r.optimizations) or "none", "demo": r.demo, "label": r.label or ""}


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
st.caption(f"{plural(total, 'run')} {agree(total, 'matches', 'match')}, the latest finished first.")
if text and text.strip():
    hit = document_table.document_hits(store, text, key="history_hits", model=filters["model"],
                                       task=filters["task"], since=since, until=until)
    if hit is not None:
        st.session_state["history_view"] = ("open", hit[0])
        st.session_state[document_table.opened_key(f"history-docs-{hit[0]}")] = hit[1]
if not found:
    st.info("No runs yet: run something on the Extract or Batch page." if total == 0 and not any(filters.values())
            else "No run matches these filters.")

if found:
    with st.popover("Columns", help="Choose the columns of the table."):
        shown = st.multiselect("Columns shown", COLUMNS, default=list(SHOWN), key="history_columns")
    inputs = store.input_names([r.id for r in found])
    frame = pd.DataFrame([run_row(r, inputs.get(r.id)) for r in found])
    st.dataframe(frame[[col for col in COLUMNS if col in shown or col == "run"]], hide_index=True, width="stretch",
                 key="history_table")
    with_cuts = [r.id for r in found if r.cut_documents]
    if with_cuts:
        cut_docs = store.cut_documents(with_cuts)
        with st.expander(f"Documents read only partly ({len(cut_docs):,}{'+' if len(cut_docs) >= 1000 else ''} "
                         f"in {plural(len(with_cuts), 'listed run')})"):
            st.dataframe(pd.DataFrame([{"run": c.run_id, "document": c.doc_id, "position": c.position,
                                        "model": c.model, "characters": c.characters, "not read": c.unread}
                                       for c in cut_docs]), hide_index=True, key="history_cut_documents")
            st.caption("Open a run to see the unread part greyed out; SeqGPT's long-text window mode reads all of it.")

    # One selection control: this box (the table above only shows; its row checkboxes and this box used to
    # disagree). A run no longer listed (a new search, another page, a delete) drops out of it.
    by_id = {r.id: r for r in found}
    chosen = [i for i in st.session_state.get("history_selected", []) if i in by_id]
    st.session_state["history_selected"] = chosen
    selected = st.multiselect("Selected runs", list(by_id), key="history_selected",
                              placeholder="choose runs from the table (type a run number)",
                              format_func=lambda i: " · ".join(
                                  str(part) for part in (i, by_id[i].model, by_id[i].task,
                                                         f"{finished(by_id[i]).astimezone():%m-%d %H:%M}") if part))
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
        st.write(f"Delete {plural(len(selected), 'run')} and their results? This cannot be undone.")
        if st.button("Delete for good", type="primary", key="history_delete"):
            for run_id in selected:
                store.delete_run(run_id)
            st.session_state.pop("history_view", None)
            st.rerun()
    with b[4].popover("Export", disabled=not selected):
        exports.export_picker(store, selected)


def open_view(run_id: int) -> None:
    """A run: its numbers, the table of its documents, and the one chosen, with the gold editor."""
    header = store.run_header(run_id)
    st.subheader(f"Run {run_id}")
    results.run_numbers(header.summary)
    if not header.summary.documents:
        st.info("This run has no documents.")
        return
    key = f"history-docs-{run_id}"
    position = document_table.document_table(store, run_id, header.summary.documents, key=key)
    if position is None:
        return
    doc, result = store.run_document(run_id, position)
    st.markdown(f"**Document {render.md_text(doc.id)}** (#{position + 1} of {header.summary.documents:,})")
    results.document_result(doc, result, f"{key}-{position}")
    # The editor reads only detail.items[position]: the one document is handed over, not the whole run.
    gold_editor.editor(store, RunDetail(header.summary, header.settings, {position: (doc, result)}), position)


# The view stays until another is chosen or it is closed: changing the selection does not clear it.
view = st.session_state.get("history_view")
if view:
    st.divider()
    if st.button("Close", key="history_close", help="Close this view (the selection stays)."):
        st.session_state.pop("history_view", None)
        st.rerun()
    try:
        if view[0] == "open":
            open_view(view[1])
        else:
            results.comparison_view(store, view[1], view[2])
    except NotFound as e:
        st.info(render.md_text(e))
