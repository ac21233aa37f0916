"""A run's documents as a table (History; what Batch's "Open run" shows): filters by type, confidence, text and
cut, a chart of spans per type, pages read from the store one at a time, and the chosen document drawn below."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from contracts.words import agree, plural
from storage.repository import DocumentFilter
from workstation.ui import render

PAGE_SIZE = 50
FULL_RANGE = (0.0, 1.0)


@st.cache_data(show_spinner=False, max_entries=64)
def _type_counts(_store, db: str, run_id: int, where: DocumentFilter) -> dict[str, int]:
    # A finished run's documents never change, so the chart's counts (the costly part on a large run)
    # are kept per run and filter. `db` keys the cache: tests and settings may point at another file.
    return _store.span_counts(run_id, where)


@st.cache_data(show_spinner=False, max_entries=16)
def _positions(_store, db: str, run_id: int, where: DocumentFilter) -> list[int]:
    # Paging through a filtered large run reads its spans once, not once per page.
    return _store.document_positions(run_id, where)


def filters(store, run_id: int, key: str) -> DocumentFilter:
    """The filter row above the table."""
    c = st.columns([3, 3, 3, 2])
    every_type = list(_type_counts(store, str(store.path), run_id, DocumentFilter()))
    types = c[0].multiselect("Types", every_type, key=f"{key}-types",
                             placeholder="any type", help="Documents with at least one span of these types.")
    low_high = c[1].slider("Lowest confidence", 0.0, 1.0, FULL_RANGE, step=0.01, key=f"{key}-confidence",
                           help="Documents whose least confident span lies in this range (narrow it to find the "
                                "uncertain ones). Documents without confidences drop out once it is narrowed.")
    text = c[2].text_input("Text", key=f"{key}-text", placeholder="words in the text or a span")
    cut = c[3].checkbox("Only cut documents", key=f"{key}-cut", help="Documents the model read only partly.")
    return DocumentFilter(tuple(types), None if tuple(low_high) == FULL_RANGE else tuple(low_high),
                          text.strip() or None, cut)


def table_frame(rows, types: list[str]) -> pd.DataFrame:
    """One row per document: position, id, length, a column of counts per type, cut, the lowest confidence."""
    return pd.DataFrame([{"#": r.position + 1, "id": r.doc_id, "characters": r.characters,
                          **{t: r.spans.get(t, 0) for t in types},
                          "cut": "—" if r.cut is None else ("yes" if r.cut else "no"),
                          "lowest confidence": r.min_confidence} for r in rows],
                        columns=["#", "id", "characters", *types, "cut", "lowest confidence"])


def document_table(store, run_id: int, documents: int, key: str) -> int | None:
    """The table of the run's documents; returns the position of the document to show: the last one opened (a
    clicked row, a search hit), else the first listed; None when no document passes the filters."""
    where = filters(store, run_id, key)
    types = _type_counts(store, str(store.path), run_id, where)
    page_key = f"{key}-page"
    if st.session_state.get(f"{key}-where") != where:        # a new filter starts again at page 1
        st.session_state[f"{key}-where"] = where
        st.session_state[page_key] = 1
    passing = _positions(store, str(store.path), run_id, where)
    pages = max((len(passing) + PAGE_SIZE - 1) // PAGE_SIZE, 1)
    left, right = st.columns([3, 2])
    with right:
        if types:
            st.markdown("**Spans per type**" + (" (documents that pass the filters)" if where != DocumentFilter() else ""))
            st.bar_chart(pd.Series(types, name="spans").rename_axis("type"), horizontal=True,
                         height=min(60 + 28 * len(types), 360))
        else:
            st.caption("No spans in the documents listed.")
    with left:
        st.caption(f"{len(passing):,} of {plural(documents, 'document')} "
                   f"{agree(len(passing), 'passes', 'pass')} the filters.")
        page = int(st.number_input(f"Page (of {pages:,})", 1, pages, key=page_key)) if pages > 1 else 1
        rows = store.document_rows(run_id, passing[(page - 1) * PAGE_SIZE:page * PAGE_SIZE])
        if not rows:
            st.info("No document of this run passes these filters.")
            return st.session_state.get(opened_key(key))
        type_columns = list(types) or sorted({t for r in rows for t in r.spans})
        table = st.dataframe(
            table_frame(rows, type_columns), hide_index=True, key=f"{key}-table", on_select="rerun",
            selection_mode="single-row", height=min(38 + 35 * len(rows), 420),
            column_config={"lowest confidence": st.column_config.NumberColumn(format="%.3f"),
                           "characters": st.column_config.NumberColumn(format="%d")})
        picked = tuple(table.selection.rows)
        if picked != st.session_state.get(f"{key}-picked", ()):        # a click on a row opens that document
            st.session_state[f"{key}-picked"] = picked
            if picked and picked[0] < len(rows):
                st.session_state[opened_key(key)] = rows[picked[0]].position
        position = st.session_state.get(opened_key(key), rows[0].position)
        st.caption(f"Showing document #{position + 1} below; click a row to open another.")
    return position


def opened_key(key: str) -> str:
    """Where the position of the open document is kept (a search hit's Open sets it too)."""
    return f"{key}-open"


HITS_PER_PAGE = 20


def snippet_html(pieces) -> str:
    """A search hit's snippet: the document's own text escaped, the matched words marked."""
    import html
    body = "".join(f"<mark>{html.escape(text)}</mark>" if match else html.escape(text) for text, match in pieces)
    return f'<div class="iew-snippet" style="white-space:pre-wrap">{body}</div>'


def document_hits(store, text: str, key: str, **runs) -> tuple[int, int] | None:
    """Documents whose text, schema or spans hold every word of `text`, each with a snippet and an Open button;
    `runs`: the run filters (model, task, since, until). Returns (run id, position) of the document whose
    button was pressed."""
    total = store.count_documents(text, **runs)
    if not total:
        return None
    with st.expander(f"{plural(total, 'document')} {agree(total, 'matches', 'match')}", expanded=True):
        pages = (total + HITS_PER_PAGE - 1) // HITS_PER_PAGE
        page = int(st.number_input(f"Page of documents (of {pages:,})", 1, pages, key=f"{key}-page")) if pages > 1 else 1
        chosen = None
        for hit in store.search_documents(text, limit=HITS_PER_PAGE, offset=(page - 1) * HITS_PER_PAGE, **runs):
            cols = st.columns([6, 1])
            with cols[0]:
                st.markdown(f"**Run {hit.run_id:d}** · document {render.md_text(hit.doc_id)} (#{hit.position + 1}) · "
                            f"{render.md_text(hit.model)}"
                            + ("" if hit.in_text else " · found in its schema, labels or spans"))
                st.html(snippet_html(hit.snippet))
            if cols[1].button("Open", key=f"{key}-open-{hit.run_id}-{hit.position}"):
                chosen = (hit.run_id, hit.position)
    return chosen
