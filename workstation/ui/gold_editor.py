"""Correct a recorded result and save it as a gold example (History → a run → one document).

The draft is a copy of the result's tuples in session state: the run itself is never changed, and the
gold example is a row of its own linked to the run and document. Spans are added with the mouse in the
span picker (select text, press a type's key; pick a span, Delete removes it), or typed in the form
below it for keyboard-only work. Each element of a tuple is edited as type + span text + [start, end):
the text the offsets cover is shown as they change, and offsets whose text is not the span are refused
(with one-click fixes: take the covered text, or find the span). The model family judges the whole draft
(`validate_gold`) before it can be saved.

Buttons change the draft at the end of the script run, once every widget's value is in it, and then
rerun with new widget keys (the draft version), so the widgets show the changed draft.
"""
from __future__ import annotations

import zlib
from typing import Any

import pandas as pd
import streamlit as st

from contracts.domain import Document, InputError, Result, Span
from contracts.names import Reads
from contracts.words import plural
from workstation.ui import render, state
from workstation.ui.span_picker import Pick, Shown, read_pick, span_picker

DRAFT = "gold_draft"
NEW_DATASET = -1
PICKED = "gold_picked"                  # the id of the last span-picker event applied (its value outlives a rerun)


def draft_tuples(result: Result) -> list[list[dict[str, Any]]]:
    return [[{"type": s.type, "span": s.span, "offset": list(s.offset) if s.offset is not None else None}
             for s in tup] for tup in result.tuples]


def allowed_types(document: Document, tup: list[dict], j: int, reads: Reads) -> list[str]:
    """The types element j of a tuple may have: the labels (a label model reads one flat list), or a schema
    level under the elements before it."""
    if reads == Reads.LABELS:
        return [str(x) for x in document.labels or []] if j == 0 else []
    node: Any = document.schema
    for e in tup[:j]:
        node = node.get(e["type"]) if isinstance(node, dict) else None
    return [str(k) for k in node] if isinstance(node, dict) else []


def reads_of(model: str, document: Document) -> Reads:
    """What the run's model reads, as it declares it. A run of a model whose plugin is gone has only its
    document to go by."""
    family = state.families().get(model)
    if family is not None:
        return family.reads
    return Reads.LABELS if document.schema is None and document.labels is not None else Reads.SCHEMA


def element_problem(text: str, e: dict) -> str | None:
    """Why an element's span and offsets do not agree (None when they do, or when it is a label)."""
    if not e["span"]:
        return "has no span text yet"
    if e["offset"] is None:
        return None
    start, end = e["offset"]
    if not 0 <= start < end <= len(text):
        return f"offsets [{start}, {end}) are not a span of the text (0 ≤ start < end ≤ {len(text)})"
    if text[start:end] != e["span"]:
        return f"offsets [{start}, {end}) cover {text[start:end]!r}, not {e['span']!r}"
    return None


def problems(text: str, tuples: list[list[dict]]) -> list[str]:
    found = []
    for i, tup in enumerate(tuples):
        for j, e in enumerate(tup):
            p = element_problem(text, e)
            if p:
                found.append(f"tuple {i + 1}, element {j + 1} ({e['type']}): {p}")
    return found


def find(text: str, span: str, after: int = -1) -> tuple[int, int] | None:
    """The next occurrence of `span` starting after `after`, wrapping around to the first."""
    if not span:
        return None
    start = text.find(span, after + 1)
    if start < 0:
        start = text.find(span)
    return (start, start + len(span)) if start >= 0 else None


def occurrence(text: str, span: str, nth: int) -> tuple[int, int] | None:
    start = -1
    for _ in range(max(nth, 1)):
        start = text.find(span, start + 1)
        if start < 0:
            return None
    return start, start + len(span)


def _draft(run_id: int, position: int, result: Result) -> dict:
    d = st.session_state.get(DRAFT)
    if not d or (d["run"], d["position"]) != (run_id, position):
        d = {"run": run_id, "position": position, "tuples": draft_tuples(result), "version": 0, "selected": 0}
        st.session_state[DRAFT] = d
    return d


def _key(d: dict, *parts: Any) -> str:
    return "gold-" + "-".join(str(p) for p in (d["run"], d["position"], d["version"], *parts))


def gold_document(run_id: int, doc: Document) -> Document:
    """The example's own document: the run's text and schema or labels, an id that says where it came from."""
    return Document(f"run{run_id}-{doc.id}", doc.text, doc.schema, doc.task, doc.labels)


def editor(store, detail, position: int) -> None:
    run_id, model = detail.id, detail.summary.model
    doc, result = detail.items[position]
    reads = reads_of(model, doc)
    d = _draft(run_id, position, result)
    text, tuples = doc.text, d["tuples"]
    actions: list[tuple] = []

    accept = False
    with st.expander("Correct this result and save it as a gold example", expanded=bool(d.get("open"))):
        st.caption("Edit a copy of the result: the run stays as the model produced it. Add, remove, retype or "
                   "re-span extractions; the corrected result is saved into a dataset for fine-tuning.")
        accept = _picker(d, doc, reads, actions, key=f"gold-picker-{run_id}-{position}")
        saved = store.gold_examples_of_document(run_id, position)
        if saved:
            cols = st.columns([4, 2])
            cols[0].caption("Saved before in: " + ", ".join(f"{render.md_text(ds.name)} (example {ex.id})" for ds, ex in saved))
            if cols[1].button("Load the saved correction", key=_key(d, "load")):
                actions.append(("load", saved[-1][1].output))
        if tuples:
            st.dataframe(pd.DataFrame([{
                "#": i + 1, "extraction": render.tuple_text_json(t),
                "offsets": "; ".join(f"[{e['offset'][0]}, {e['offset'][1]})" if e["offset"] else "—" for e in t),
                "check": next((p for p in (element_problem(text, e) for e in t) if p), "✓"),
            } for i, t in enumerate(tuples)]), hide_index=True, key=_key(d, "table"))
        else:
            st.info("No extractions in the draft: add the ones the model should have found, or save it as a "
                    "gold example with nothing to extract.")
        _add_form(d, doc, reads, actions)
        if tuples:
            _tuple_editor(d, doc, reads, actions)
        if st.button("Start over from the model's output", key=_key(d, "reset")):
            actions.append(("load", draft_tuples(result)))
        _save(store, d, run_id, model, position, doc, accept)

    if actions:
        _apply(d, actions, text)
        d["open"] = True
        st.rerun()


def shown_spans(text: str, tuples: list[list[dict]]) -> list[Shown]:
    """The draft's elements that have a place in the text, in text order (outer spans first)."""
    shown = [Shown(i, j, e["type"], *e["offset"]) for i, t in enumerate(tuples) for j, e in enumerate(t)
             if e["offset"] and 0 <= e["offset"][0] < e["offset"][1] <= len(text)]
    return sorted(shown, key=lambda s: (s.start, -s.end, s.type, s.tuple, s.element))


def pick_actions(pick: Pick, doc: Document, tuples: list[list[dict]], reads: Reads) -> tuple[list[tuple], str | None]:
    """The draft actions of a span-picker event, or why there are none (a span already there, a type the
    schema does not allow at that element)."""
    if pick.op == "add":
        element = {"type": pick.type, "span": doc.text[pick.start:pick.end], "offset": [pick.start, pick.end]}
        if [element] in tuples:
            return [], f"{pick.type} “{element['span']}” [{pick.start}, {pick.end}) is already in the draft."
        return [("add", [element])], None
    target = pick.target
    if pick.op == "remove":
        return [("remove-element", target.tuple, target.element)], None
    if pick.op == "retype":
        allowed = allowed_types(doc, tuples[target.tuple], target.element, reads)
        if pick.type not in allowed:
            return [], (f"{pick.type} is not a type element {target.element + 1} of extraction {target.tuple + 1} "
                        f"can have (the schema allows {', '.join(allowed) or 'none'}).")
        return [("set", target.tuple, target.element, {"type": pick.type})], None
    return [], None


def _picker(d: dict, doc: Document, reads: Reads, actions: list, key: str) -> bool:
    """Draw the span picker; its new event becomes draft actions. True when the person accepted the draft
    (Enter with nothing selected), which saves it as the Save button would."""
    text, types = doc.text, allowed_types(doc, [], 0, reads)
    shown = shown_spans(text, d["tuples"])
    levels = render.span_levels([Span(s.type, "", (s.start, s.end)) for s in shown])
    colors = {t: (render.type_color(t), render.type_color(t, strong=True)) for t in {*types, *(s.type for s in shown)}}
    event = span_picker(text, shown, types, colors, [levels[n] for n in range(len(shown))], key=key,
                        version=d["version"])
    try:
        pick = read_pick(event, text, shown, types, applied=st.session_state.get(PICKED))
    except InputError as e:
        st.session_state[PICKED] = event.get("id")          # said once; the next rerun has nothing to say
        st.error(f"The span picker: {render.md_text(e)}")
        return False
    if pick is None:
        return False
    st.session_state[PICKED] = pick.id
    if pick.op == "accept":
        return True
    found, refused = pick_actions(pick, doc, d["tuples"], reads)
    if refused:
        st.warning(render.md_text(refused))
    actions.extend(found)
    return False


def _add_form(d: dict, doc: Document, reads: Reads, actions: list) -> None:
    types = allowed_types(doc, [], 0, reads)
    with st.form(_key(d, "add"), border=True):
        st.markdown("**Add an extraction by its text** (the keyboard's way; the picker above takes the mouse)")
        cols = st.columns([2, 3, 1])
        type_name = cols[0].selectbox("Type", types, key=_key(d, "add-type")) if types else \
            cols[0].text_input("Type", key=_key(d, "add-type"))
        span = cols[1].text_input("Span text (as it appears in the text)", key=_key(d, "add-span"))
        nth = cols[2].number_input("Occurrence", 1, 10_000, 1, key=_key(d, "add-nth"),
                                   help="1 = the first place the span text appears, 2 = the second, …")
        if st.form_submit_button("Add"):
            found = occurrence(doc.text, span, int(nth)) if span else None
            if not type_name or not span:
                st.error("Give a type and the span text.")
            elif found is None:
                st.error(f"“{render.md_text(span)}” does not occur {plural(int(nth), 'time')} in the text.")
            else:
                actions.append(("add", [{"type": type_name, "span": span, "offset": list(found)}]))


def _tuple_editor(d: dict, doc: Document, reads: Reads, actions: list) -> None:
    tuples, text = d["tuples"], doc.text
    st.markdown("**Edit an extraction**")
    d["selected"] = min(d.get("selected", 0), len(tuples) - 1)
    titles = [f"#{i + 1}  {render.tuple_text_json(t)}" for i, t in enumerate(tuples)]
    # Keyed by its titles too: a retyped element renames an option, and the picker starts again from the draft.
    selected = st.selectbox("Extraction", range(len(tuples)), index=d["selected"], format_func=titles.__getitem__,
                            key=_key(d, "selected", zlib.crc32("\n".join(titles).encode())))
    d["selected"] = selected
    tup = tuples[selected]
    with st.container(border=True):
        for j, e in enumerate(tup):
            options = allowed_types(doc, tup, j, reads)
            options = options if e["type"] in options else [e["type"]] + options
            cols = st.columns([3, 1.2, 1.2, 3, 1.1])
            e["type"] = cols[0].selectbox(f"Type of element {j + 1}", options, index=options.index(e["type"]),
                                          key=_key(d, selected, j, "type"))
            start = cols[1].number_input("Start", 0, len(text), e["offset"][0] if e["offset"] else None, step=1,
                                         key=_key(d, selected, j, "start"))
            end = cols[2].number_input("End", 0, len(text), e["offset"][1] if e["offset"] else None, step=1,
                                       key=_key(d, selected, j, "end"))
            e["span"] = cols[3].text_input("Span text", e["span"], key=_key(d, selected, j, "span"))
            e["offset"] = [int(start), int(end)] if start is not None and end is not None else None
            if cols[4].button("Remove", key=_key(d, selected, j, "remove"),
                              help="Remove this element" if len(tup) > 1 else "Remove this extraction"):
                actions.append(("remove-element", selected, j))
            st.html(render.covered_html(text, *(e["offset"] or (None, None))))
            problem = element_problem(text, e)
            if problem:
                st.error(f"Element {j + 1} {render.md_text(problem)}.")
            if problem or (e["offset"] is None and e["span"]):   # a span without a position: offer to find it
                fix = st.columns(3)
                covered = text[e["offset"][0]:e["offset"][1]] if e["offset"] and 0 <= e["offset"][0] < \
                    e["offset"][1] <= len(text) else None
                if covered and fix[0].button("Use the covered text", key=_key(d, selected, j, "take")):
                    actions.append(("set", selected, j, {"span": covered}))
                if e["span"] and fix[1].button("Find the span text", key=_key(d, selected, j, "find")):
                    found = find(text, e["span"], e["offset"][0] if e["offset"] else -1)
                    if found is None:
                        st.error(f"“{render.md_text(e['span'])}” does not occur in the text.")
                    else:
                        actions.append(("set", selected, j, {"offset": list(found)}))
        deeper = allowed_types(doc, tup, len(tup), reads)
        cols = st.columns(2)
        if cols[0].button("Add an element", key=_key(d, selected, "grow"), disabled=not deeper,
                          help="The next element of a relation or event (an argument)" if deeper else
                          "The schema has no level below this tuple's last element."):
            actions.append(("add-element", selected, {"type": deeper[0] if deeper else "", "span": "", "offset": None}))
        if cols[1].button("Remove this extraction", key=_key(d, selected, "drop")):
            actions.append(("remove", selected))


def _apply(d: dict, actions: list, text: str) -> None:
    tuples = d["tuples"]
    for action in actions:
        kind = action[0]
        if kind == "load":
            d["tuples"] = tuples = [[dict(e, offset=list(e["offset"]) if e["offset"] else None) for e in t]
                                    for t in action[1]]
            d["selected"] = 0
        elif kind == "add":
            tuples.append(action[1])
            d["selected"] = len(tuples) - 1
        elif kind == "remove":
            del tuples[action[1]]
        elif kind == "remove-element":
            _, i, j = action
            del tuples[i][j]
            if not tuples[i]:
                del tuples[i]
        elif kind == "add-element":
            tuples[action[1]].append(action[2])
        elif kind == "set":
            _, i, j, changes = action
            tuples[i][j].update(changes)
    d["version"] += 1


def _save(store, d: dict, run_id: int, model: str, position: int, doc: Document, accept: bool = False) -> None:
    st.markdown("**Save as a gold example**")
    output = [[dict(e) for e in t] for t in d["tuples"]]
    found = problems(doc.text, d["tuples"])
    if not found:
        try:
            state.families()[model].validate_gold(gold_document(run_id, doc), output)
        except InputError as e:
            found.append(str(e))
        except KeyError:
            found.append(f"the {model} plugin is not installed")
        except Exception as e:              # a plugin's check tripping over odd input must not crash the page
            found.append(f"{model} could not check this example: {type(e).__name__}: {e}")
    for p in found[:10]:
        st.error(render.md_text(p))
    pending = st.session_state.pop("gold_dataset_next", None)
    datasets = {ds.id: ds for ds in store.list_datasets(model)}
    if pending in datasets:
        st.session_state["gold_dataset"] = pending
    if st.session_state.get("gold_dataset") not in (NEW_DATASET, *datasets):
        st.session_state["gold_dataset"] = next(iter(datasets), NEW_DATASET)
    cols = st.columns([3, 3, 2])
    choice = cols[0].selectbox("Dataset", [NEW_DATASET, *datasets], key="gold_dataset",
                               format_func=lambda i: "New dataset…" if i == NEW_DATASET else
                               f"{datasets[i].name} ({plural(datasets[i].examples, 'example')})",
                               help=f"Datasets of {model} examples")
    name = cols[1].text_input("Name of the new dataset", key="gold_new_dataset",
                              disabled=choice != NEW_DATASET, placeholder="e.g. news-ner")
    clicked = cols[2].button("Save as gold example", type="primary", key="gold_save", disabled=bool(found))
    if accept and found:
        st.error("The draft cannot be saved yet: " + render.md_text(found[0]))
    if clicked or (accept and not found):
        target = name if choice == NEW_DATASET else choice
        try:
            example_id, created = store.save_gold_example(target, model, gold_document(run_id, doc), output,
                                                          run_id=run_id, position=position)
        except InputError as e:
            st.error(render.md_text(e))
        else:
            dataset = store.gold_example(example_id).dataset_id
            st.session_state["gold_dataset_next"] = dataset
            st.session_state["gold_saved"] = (example_id, created, store.get_dataset(dataset).name)
            d["open"] = True
            st.rerun()
    saved = st.session_state.pop("gold_saved", None)
    if saved:
        example_id, created, dataset_name = saved
        st.success(f"{'Saved' if created else 'Updated'} gold example {example_id} in dataset "
                   f"“{render.md_text(dataset_name)}”.")
