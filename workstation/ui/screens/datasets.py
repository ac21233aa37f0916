"""Datasets: gold examples per model — browse them, import a file (gold JSONL, Label Studio, doccano), export
the gold JSONL the fine-tuner reads (optionally split into train/dev)."""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from contracts.domain import InputError, Result, Span
from contracts.words import plural
from storage.datasets import export_dataset
from storage.repository import NotFound
from workstation import importers
from workstation.ui import render, results, schema_editor, state

NEW = -1
PREVIEW = 5
EXAMPLES_LISTED = 500
STYLE_TITLES = {"typed": "relation(tail label) — RexUniNLU relation style, e.g. 创始人(人物)",
                "label": "the relation label alone — event arguments, e.g. 胜者"}

st.title("Datasets")
store = state.store()
fams = state.families()
if not fams:
    st.error("No model plugin is installed. See the Plugins page.")
    st.stop()


@st.cache_resource(show_spinner=False)
def _export_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="iew-gold-"))


def gold_result(example) -> Result:
    return Result(example.doc_id, [[Span(e["type"], e["span"], tuple(e["offset"]) if e["offset"] else None)
                                    for e in t] for t in example.output])


# ---- the datasets --------------------------------------------------------------------------------------------

listed = store.list_datasets()
if listed:
    st.dataframe(pd.DataFrame([{"dataset": d.id, "name": d.name, "model": d.model, "examples": d.examples,
                                "updated": d.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")} for d in listed]),
                 hide_index=True, width="stretch")
else:
    st.info("No datasets yet. Correct a result in History and save it as a gold example, or import a file below.")

by_id = {d.id: d for d in listed}
if "datasets_open_next" in st.session_state:       # set by an import: a widget's value is set before it is drawn
    st.session_state["datasets_open"] = st.session_state.pop("datasets_open_next")
if listed:
    if st.session_state.get("datasets_open") not in by_id:
        st.session_state["datasets_open"] = listed[0].id
    chosen = st.selectbox("Open a dataset", list(by_id), key="datasets_open",
                          format_func=lambda i: f"{by_id[i].name} · {by_id[i].model} · {plural(by_id[i].examples, 'example')}")
    dataset = by_id[chosen]
    with st.container(border=True):
        examples = store.gold_examples(dataset.id, limit=EXAMPLES_LISTED)
        if examples:
            st.dataframe(pd.DataFrame([{
                "example": e.id, "id": e.doc_id, "text": e.text[:80] + ("…" if len(e.text) > 80 else ""),
                "extractions": len(e.output), "source": e.source,
                "from run": e.run_id if e.run_id is not None else "",
            } for e in examples]), hide_index=True, width="stretch", key="datasets_examples")
            if dataset.examples > len(examples):
                st.caption(f"Listing the first {len(examples):,} of {plural(dataset.examples, 'example')}.")
            shown = {e.id: e for e in examples}
            example_id = st.selectbox("Example", list(shown), key=f"datasets_example:{dataset.id}",
                                      format_func=lambda i: f"{i} · {shown[i].doc_id} · {shown[i].text[:50]}")
            example = shown[example_id]
            results.document_result(example.document(), gold_result(example), key=f"gold-{example.id}")
            if st.button("Delete this example", key=f"datasets_delete_example:{example.id}"):
                store.delete_gold_example(example.id)
                st.rerun()
        else:
            st.caption("This dataset has no examples.")

        st.markdown("**Export for fine-tuning** (the gold JSONL `launcher.py finetune --train` reads)")
        cols = st.columns([2, 1, 2])
        share = cols[0].slider("Hold out for evaluation (dev share)", 0.0, 0.5, 0.0, 0.05, key="datasets_dev",
                               help="0: one file. Otherwise a seeded random share goes to a dev file.")
        seed = cols[1].number_input("Split seed", 0, 2**31 - 1, 0, key="datasets_seed")
        if cols[2].button("Prepare gold JSONL", key="datasets_export", disabled=not dataset.examples):
            folder = _export_dir() / f"{dataset.id}"
            stem = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in dataset.name)
            try:
                report = export_dataset(store, dataset.id, folder / f"{stem}-train.jsonl", folder / f"{stem}-dev.jsonl",
                                        share, int(seed))
                st.session_state["datasets_exported"] = (dataset.id, str(report.train),
                                                         str(report.dev) if report.dev else None, report.message())
            except InputError as e:
                st.error(render.md_text(e))
        exported = st.session_state.get("datasets_exported")
        if exported and exported[0] == dataset.id:
            st.caption(render.md_text(exported[3]))
            for n, path in enumerate(p for p in exported[1:3] if p):
                path = Path(path)
                if path.exists():
                    st.download_button(f"Download {path.name}", path.read_bytes(), file_name=path.name,
                                       mime="application/x-ndjson", key=f"datasets_download_{n}", on_click="ignore")
        with st.popover("Delete dataset"):
            st.write(f"Delete the dataset and its {plural(dataset.examples, 'example')}? Runs they came from stay.")
            if st.button("Delete for good", type="primary", key="datasets_delete"):
                store.delete_dataset(dataset.id)
                st.rerun()


# ---- import ----------------------------------------------------------------------------------------------------

st.subheader("Import a dataset")
if st.session_state.get("import_done"):
    st.success(render.md_text(st.session_state.pop("import_done")))
upload = st.file_uploader("Gold JSONL, a Label Studio JSON export or a doccano JSONL export", type=["jsonl", "json"],
                          key="import_upload")
cols = st.columns(3)
fmt = cols[0].selectbox("Format", ["auto", *importers.FORMATS], key="import_format",
                        format_func=lambda f: "detect from the file" if f == "auto" else importers.FORMAT_TITLES[f])
model_names = list(fams)
current = st.session_state.get("model")
model = cols[1].selectbox("Model", model_names, index=model_names.index(current) if current in model_names else 0,
                          key="import_model", help="A dataset holds examples for one model.")
style = cols[2].selectbox("Relation types", importers.RELATION_STYLES, key="import_style",
                          format_func=STYLE_TITLES.get,
                          help="How a relation between two labelled spans is typed (files without a schema).")
if upload is None:
    st.stop()

data = upload.getvalue()
try:
    parsed = importers.parse(data, upload.name, None if fmt == "auto" else fmt, style)
except InputError as e:
    st.error(f"Cannot import {render.md_text(upload.name)}: {render.md_text(e)}")
    st.stop()

st.caption(render.md_text(parsed.summary()))
for note in parsed.notes:
    st.info(render.md_text(note))
st.dataframe(pd.DataFrame([{"id": e.doc_id, "text": e.text[:80], "tuples": " | ".join(
    " → ".join(f"{x['type']}: {x['span']}" for x in t) for t in e.output[:6])} for e in parsed.examples[:PREVIEW]]),
    hide_index=True, width="stretch", key="import_preview")

digest = hashlib.sha1(data + f"{parsed.format}|{style}|{model}".encode()).hexdigest()[:12]
label_driven = importers.label_driven(model)
schema = labels = task = None
settings_error = None
if label_driven:
    tasks = list(fams[model].tasks)
    cols = st.columns([1, 3])
    suggested = parsed.suggested_task()
    task = cols[0].selectbox("Task", tasks, index=tasks.index(suggested) if suggested in tasks else 0,
                             key=f"import_task:{digest}")
    typed = cols[1].text_input("Labels (comma-separated)", ", ".join(parsed.suggested_labels()),
                               key=f"import_labels:{digest}", help="For examples whose line has no labels.")
    labels = schema_editor.split_types(typed)
    if not labels and parsed.needs_labels():
        settings_error = "give at least one label"
elif parsed.needs_schema():
    source = st.text_area("Schema (JSON) for the examples", schema_editor.dump(parsed.suggested_schema()), height=200,
                          key=f"import_schema:{digest}",
                          help="Built from the file's labels: entity types → {type: null}, relations nested under "
                               "their head type. Edit it as the model should see it.")
    try:
        schema = schema_editor.parse_schema(source)
        if not isinstance(schema, dict):
            raise InputError("the schema must be a JSON object of types")
    except InputError as e:
        settings_error = str(e)
else:
    st.caption("Every line brings its own schema.")
drop = st.checkbox("Leave out extractions whose type is not in the schema / labels", key="import_drop",
                   help="Off: such an extraction stops the import and names its line or task.")

datasets = {d.id: d for d in store.list_datasets(model)}
cols = st.columns([2, 2, 1])
target = cols[0].selectbox("Into dataset", [NEW, *datasets], key=f"import_target:{model}",
                           format_func=lambda i: "New dataset…" if i == NEW else
                           f"{datasets[i].name} ({plural(datasets[i].examples, 'example')})")
name = cols[1].text_input("Name of the new dataset", Path(upload.name).stem, key=f"import_name:{digest}",
                          disabled=target != NEW)
if settings_error:
    st.error(render.md_text(settings_error))
if cols[2].button("Import", type="primary", key="import_go", disabled=bool(settings_error)):
    try:
        with st.spinner("Checking every example…"):
            report = importers.import_dataset(store, data, model, name if target == NEW else target,
                                              name=upload.name, fmt=parsed.format, relation_style=style,
                                              schema=schema, task=task, labels=labels, drop_unknown=drop)
    except (InputError, NotFound) as e:
        st.error(f"Nothing was imported: {render.md_text(e)}")
    else:
        st.session_state["datasets_open_next"] = report.dataset_id
        st.session_state["import_done"] = report.message()
        st.rerun()
