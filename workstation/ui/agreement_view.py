"""The agreement of two runs as a table (History's compare view, the review queue)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from contracts.words import agree, plural
from workstation.quality.agreement import Agreement
from workstation.ui import render

NOTHING = "—"                       # a share with nothing to divide by, shown as every page shows a missing value


def agreement_frame(rows: list[dict]):
    """The table as shown: shares as percentages, a missing share as NOTHING (not "None"). A pandas Styler, so
    the cells keep their numbers (sorting, tests) and only their display changes."""
    shares = [c for c in rows[0] if c.startswith(("precision", "recall"))]
    return pd.DataFrame(rows).style.format("{:.1%}", subset=shares, na_rep=NOTHING)


def outside_note(result: Agreement) -> str:
    """The labels a run wrote outside the label set, apart from the type rows (plain text)."""
    sides = []
    for side in ("A", "B"):
        named = [f"“{t}” ×{getattr(c, side.lower())}" for t, c in sorted(result.outside.items()) if getattr(c, side.lower())]
        if named:
            sides.append(f"{side} wrote " + ", ".join(named))
    return ("Outside the label set (not types of this task, so no rows above; counted under all types): "
            + "; ".join(sides) + ".")


def agreement_table(result: Agreement, key: str) -> None:
    """Per type: how many spans each run has, and B's precision and recall against A, exact and overlap."""
    rows = result.rows()
    if not rows:
        st.info("Neither run extracted anything from the documents they share.")
        return
    st.dataframe(agreement_frame(rows), hide_index=True, key=key)
    st.caption("B measured against A: precision is the share of B's spans A also found, recall the share of "
               "A's that B also made. Exact: the same type and offsets; overlap: the same type and overlapping "
               "offsets, matched one to one. A classification label matches the same label.")
    if result.outside:
        st.caption(render.md_text(outside_note(result)))
    skipped = len(result.only_in_a) + len(result.only_in_b)
    if skipped:
        st.caption(f"{plural(skipped, 'document')} {agree(skipped, 'is', 'are')} in only one of the runs (matched by id and text) and are not counted.")
