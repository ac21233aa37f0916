"""Confidence thresholds in the UI: the opt-in switch of Extract, and the tuning's table and curves."""
from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from workstation.quality.thresholds import TypeTuning
from workstation.ui import render, state


def threshold_switch(model: str) -> tuple[tuple[str, float], ...]:
    """A switch to apply the thresholds saved for the chosen weights (off unless turned on); what to apply."""
    weights, _ = state.weights_for(model)
    saved = state.store().thresholds_for(model, weights)
    if saved is None or not saved.thresholds:
        return ()
    on = st.toggle("Apply the tuned confidence thresholds", key=f"thresholds-on:{model}",
                   help=f"Tuned on dataset {render.md_text(saved.dataset_name)}: extractions below their type's "
                        "threshold are left out, and the run records the thresholds it used.")
    st.caption("Thresholds: " + ", ".join(f"{render.md_text(t)} ≥ {v:.4g}" for t, v in saved.thresholds.items())
               + f" (tuned on {saved.created_at.astimezone():%Y-%m-%d %H:%M})")
    if saved.stale():
        st.warning("The weights changed since these thresholds were tuned; tune them again on the Thresholds page.")
    return tuple(sorted(saved.thresholds.items())) if on else ()


def tuning_rows(tunings: dict[str, TypeTuning]) -> list[dict]:
    return [{"type": t, "gold": tt.gold, "predicted": tt.predicted, "threshold": tt.threshold,
             "precision": tt.precision, "recall": tt.recall, "F1": tt.f1,
             "F1 without threshold": tt.baseline.f1 if tt.baseline else None, "note": tt.note}
            for t, tt in sorted(tunings.items())]


def tuning_table(tunings: dict[str, TypeTuning], key: str) -> None:
    pct = st.column_config.NumberColumn(format="percent")
    st.dataframe(pd.DataFrame(tuning_rows(tunings)), hide_index=True, key=key,
                 column_config={"precision": pct, "recall": pct, "F1": pct, "F1 without threshold": pct,
                                "threshold": st.column_config.NumberColumn(format="%.4f")})


def curves_chart(tunings: dict[str, TypeTuning]) -> alt.Chart | None:
    """Precision against recall per type as the threshold moves; the chosen threshold is a large dot."""
    points = [{"type": t, "threshold": p.threshold, "precision": p.precision, "recall": p.recall,
               "chosen": p.threshold == tt.threshold}
              for t, tt in tunings.items() for p in tt.curve]
    if not points:
        return None
    data = pd.DataFrame(points)
    base = alt.Chart(data).encode(
        x=alt.X("recall:Q", scale=alt.Scale(domain=[0, 1])), y=alt.Y("precision:Q", scale=alt.Scale(domain=[0, 1])),
        color="type:N", tooltip=["type", "threshold", "precision", "recall"])
    line = base.mark_line(point=True).encode(order=alt.Order("threshold:Q", sort="descending"))
    chosen = base.transform_filter(alt.datum.chosen).mark_point(size=160, filled=True)
    return (line + chosen).properties(height=360)
