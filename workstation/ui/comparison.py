"""What a comparison of two runs' times can honestly claim (History's compare, Optimizations' "Run again and
compare"): whether anything was changed between them, whether one document or a first run after a model load
decides the ratio, and where the time went, stage by stage."""
from __future__ import annotations

import pandas as pd

from contracts.words import plural

# What a run was made with, as far as its time is concerned (RunSummary fields).
SETTINGS = ("model", "weights", "weights_checksum", "device", "dtype", "attention", "optimizations", "batch_size",
            "options")
FEW_DOCUMENTS = 1                        # a speed-up measured on this many documents or fewer is one timing


def changed_settings(a, b) -> list[str]:
    """The settings (RunSummary field names) that differ between two runs."""
    return [name for name in SETTINGS if getattr(a, name) != getattr(b, name)]


def caveats(a, b, same_inputs: bool) -> list[str]:
    """Why the difference in time between run a and run b may not mean what a ratio suggests, one sentence each."""
    notes = []
    if not changed_settings(a, b):
        notes.append("Both runs used the same settings (model, weights, device, precision, attention, "
                     "optimizations, batch size and options): the difference in time is run-to-run variation, "
                     "not the effect of a setting.")
    if same_inputs and min(a.documents, b.documents) <= FEW_DOCUMENTS:
        notes.append(f"The runs read {plural(min(a.documents, b.documents), 'document')}: the ratio rests on one timing "
                     "of a short run, where start-up and noise weigh as much as the work; compare on a batch.")
    for name, run in (("A", a), ("B", b)):
        if (run.stages or {}).get("first_after_load"):
            notes.append(f"Run {name} ({run.id}) was the first on a freshly loaded model: it paid one-time "
                         "warm-up (memory allocation, kernel choice, graph capture) that later runs do not.")
    return notes


def fair_ratio(a, b, same_inputs: bool) -> bool:
    """Whether the speed-up of b over a may be shown as a measured effect: the same documents, something
    changed, more than one document, neither run paying a first load."""
    return same_inputs and not caveats(a, b, same_inputs)


def stage_frame(a, b) -> pd.DataFrame:
    """Seconds per stage of each run (rows: stages; columns: the runs), for a bar chart. Empty when neither run
    recorded stage timings."""
    columns = {f"A (run {a.id})": ((a.stages or {}).get("seconds") or {}),
               f"B (run {b.id})": ((b.stages or {}).get("seconds") or {})}
    stages = list(dict.fromkeys(s for seconds in columns.values() for s in seconds))
    if not stages:
        return pd.DataFrame()
    frame = pd.DataFrame({name: [float(seconds.get(s, 0.0)) for s in stages] for name, seconds in columns.items()},
                         index=pd.Index(stages, name="stage"))
    return frame
