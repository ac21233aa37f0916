"""Thresholds: tune a confidence threshold per type on a gold dataset for the chosen weights, see the
precision–recall curves, save them with the weights; Extract applies them when its switch is on."""
from __future__ import annotations

import streamlit as st

from contracts.domain import InputError, WeightsError
from contracts.words import plural
from workstation.quality import thresholds
from workstation.quality.thresholds import TypeTuning
from workstation.ui import cautions, render, runs, state
from workstation.ui.threshold_view import curves_chart, tuning_table

TUNED = "thresholds_tuned"

st.title("Confidence thresholds")
st.caption("Pick the confidence below which an extraction of a type is left out: the threshold that gives the best "
           "F1 on a gold dataset. Saved thresholds belong to the weights they were tuned on and apply to later "
           "runs only when switched on (Extract); each run records the thresholds it used.")
fam = state.current_family()
if fam is None:
    st.error("No model plugin is installed.")
    st.stop()
store = state.store()
weights, demo = state.weights_for(fam.name)
st.caption(f"Model {render.md_text(fam.name)}, weights " + render.md_code(str(weights)))

saved = store.thresholds_for(fam.name, weights)
if saved is not None:
    st.subheader("Saved for these weights")
    st.caption(f"Tuned on dataset {render.md_text(saved.dataset_name)} "
               f"on {saved.created_at.astimezone():%Y-%m-%d %H:%M}")
    tuning_table({t: TypeTuning.from_json(j) for t, j in saved.tuning.items()}, key="saved-tuning")
    if saved.stale():
        st.warning("The checkpoint in this directory changed since; tune again.")
    if st.button("Forget these thresholds"):
        store.delete_thresholds(fam.name, weights)
        st.rerun()

st.subheader("Tune on a gold dataset")
datasets = {d.id: d for d in store.list_datasets(fam.name)}
if not datasets:
    st.info(f"No {fam.name} dataset yet: save gold examples from History or Review, or import one on Datasets.")
    st.stop()
chosen_id = st.selectbox("Dataset", list(datasets), key="thresholds_dataset",
                         format_func=lambda i: f"{datasets[i].name} ({plural(datasets[i].examples, 'example')})")
for caution in (cautions.tiny_dataset(datasets[chosen_id].examples, cautions.TINY_FOR_THRESHOLDS,
                                        "thresholds tuned on it"),
                cautions.demo_weights("thresholds tuned on them") if demo else None):
    if caution:
        st.warning(render.md_text(caution), icon=":material/warning:")
if st.button("Tune", type="primary"):
    examples = store.gold_examples(chosen_id)
    try:
        docs = [e.document() for e in examples]
        for doc, e in zip(docs, examples):
            fam.validate_gold(doc, e.output)
        request = runs.RunRequest(fam.name, state.device_for(fam.name), tuple(state.chosen_optimizations()))
        with st.spinner(f"Running {fam.name} on {plural(len(docs), 'example')}, without thresholds…"):
            report, _, _ = runs.run_only(request, docs)
        tuned = thresholds.tune([(d, e.output, r) for d, e, r in zip(docs, examples, report.results)])
        st.session_state[TUNED] = (fam.name, str(weights), chosen_id, tuned)
    except (InputError, WeightsError) as e:
        st.error(render.md_text(str(e)))
    except Exception as e:              # a model failure is shown, never a crashed page
        st.error(render.md_text(f"Tuning failed: {type(e).__name__}: {e}"))

tuned_state = st.session_state.get(TUNED)
if tuned_state and tuned_state[:3] == (fam.name, str(weights), chosen_id):
    tuned: dict[str, TypeTuning] = tuned_state[3]
    if not tuned:
        st.info("Neither the dataset nor the model's output has any extraction to tune on.")
        st.stop()
    tuning_table(tuned, key="new-tuning")
    chart = curves_chart(tuned)
    if chart is not None:
        st.markdown("**Precision–recall curves** (each point a threshold; the large dot is the one chosen)")
        st.altair_chart(chart, width="stretch")
    best = thresholds.chosen(tuned)
    if not best:
        st.warning("No type could be tuned: see the notes. A model has to report a confidence per extraction "
                   "for a threshold to act on it.")
    elif st.button("Save for these weights", type="primary"):
        store.save_thresholds(fam.name, weights, best, {t: tt.to_json() for t, tt in tuned.items()},
                              datasets[chosen_id].name, chosen_id)
        st.session_state.pop(TUNED, None)
        st.toast("Thresholds saved; switch them on in Extract.")
        st.rerun()
