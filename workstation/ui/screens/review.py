"""Review: two models on the same documents, the documents they disagree on most first; each decision on a
disagreement fills the gold editor's draft, which saves a gold example into a dataset."""
from __future__ import annotations

from html import escape

import pandas as pd
import streamlit as st

from contracts.domain import InputError, WeightsError
from contracts.words import agree, plural
from storage.repository import NotFound
from workstation.quality import review
from workstation.quality.agreement import Mention, agreement, markers_of
from workstation.ui import gold_editor, render, runs, state
from workstation.ui.agreement_view import agreement_table

PAIR = "review_pair"

st.title("Review")
st.caption("Run two models on the same documents and review where they disagree, most disagreement first. "
           "Each choice fills a draft gold example; correct it further and save it into a dataset for fine-tuning.")
store = state.store()
fams = state.families()
names = list(fams)
pair = st.session_state.get(PAIR)


with st.expander("Run two models on the same texts", expanded=pair is None):
    if not names:
        st.error("No model plugin is installed.")
        st.stop()
    c = st.columns([2, 2, 2])
    # The first two installed models, in the order the plugins are loaded (the built-ins first).
    model_a = c[0].selectbox("Model A (the reference)", names, index=0, key="review_model_a")
    model_b = c[1].selectbox("Model B", names, index=min(1, len(names) - 1), key="review_model_b")
    kind = c[2].radio("Task", list(review.KINDS), format_func=review.KINDS.__getitem__, key="review_kind",
                      horizontal=True)
    typed = st.text_input("Types (comma-separated)", key="review_types", placeholder="人物, 地理位置, 组织机构",
                          help="Each model reads them as it declares: a flat schema (RexUniNLU) or a label list (SeqGPT).")
    texts = st.text_area("Texts (one per line)", key="review_texts", height=140)
    if st.button("Run both", type="primary"):
        try:
            types = review.split_types(typed or "")
            lines = (texts or "").splitlines()
            documents = {m: review.documents_for(fams[m], kind, types, lines) for m in (model_a, model_b)}
            ids = []
            with st.spinner(f"Running {model_a} and {model_b}…"):
                for m in (model_a, model_b):
                    request = runs.RunRequest(m, state.device_for(m), tuple(state.chosen_optimizations()),
                                              task=review.task_name(fams[m], kind))
                    ids.append(runs.run_and_record(request, documents[m]))
            st.session_state[PAIR] = tuple(ids)
            st.rerun()
        except (InputError, WeightsError) as e:
            st.error(render.md_text(str(e)))
        except Exception as e:          # a model failure is shown, never a crashed page
            st.error(render.md_text(f"The run failed: {type(e).__name__}: {e}"))

with st.expander("Or review two recorded runs"):
    recent = store.search_runs(limit=200)
    by_id = {r.id: r for r in recent}
    if len(recent) < 2:
        st.info("Fewer than two runs are recorded.")
    else:
        label = (lambda i: f"{i} · {by_id[i].model} · {by_id[i].task or ''} · {plural(by_id[i].documents, 'doc')} · "
                           f"{by_id[i].created_at.astimezone():%m-%d %H:%M}")
        c = st.columns(3)
        pick_a = c[0].selectbox("Run A (the reference)", list(by_id), index=1, format_func=label, key="review_run_a")
        pick_b = c[1].selectbox("Run B", list(by_id), index=0, format_func=label, key="review_run_b")
        if c[2].button("Review these runs", disabled=pick_a == pick_b):
            st.session_state[PAIR] = (pick_a, pick_b)
            st.rerun()

if pair is None:
    st.info("Run two models above, or pick two recorded runs, to open the review queue.")
    st.stop()
try:
    detail_a, detail_b = store.get_run(pair[0]), store.get_run(pair[1])
except NotFound as e:
    st.session_state.pop(PAIR, None)
    st.info(render.md_text(str(e)))
    st.stop()

A, B = detail_a.summary, detail_b.summary
result = agreement(detail_a.items, detail_b.items, markers_a=markers_of(A.model), markers_b=markers_of(B.model))
st.subheader(render.md_text(f"Run {A.id} (A: {A.model}) vs run {B.id} (B: {B.model})"))
agreement_table(result, key="review-agreement")
if not result.documents:
    st.info("The two runs share no document (matched by id and text).")
    st.stop()


def reviewed(position_a: int, position_b: int) -> bool:
    return bool(store.gold_examples_of_document(A.id, position_a) or store.gold_examples_of_document(B.id, position_b))


ranked = result.ranked()
st.markdown("**Queue**")
apart = any(d.outside_a or d.outside_b for d in ranked)
st.dataframe(pd.DataFrame([{
    "rank": n + 1, "document": d.doc_id, "disagreements": len(d.disagreements),
    "disagreement share": d.score, "agreed": len(d.agreed),
    **({"outside the label set": len(d.outside_a) + len(d.outside_b)} if apart else {}),
    "reviewed": "✓" if reviewed(d.position_a, d.position_b) else "", "text": d.text[:80],
} for n, d in enumerate(ranked)]), hide_index=True, key="review-queue",
    column_config={"disagreement share": st.column_config.ProgressColumn(min_value=0, max_value=1, format="percent")})

index = st.selectbox("Document to review", range(len(ranked)), key=f"review-doc-{A.id}-{B.id}",
                     format_func=lambda i: f"#{i + 1} · {ranked[i].doc_id} · "
                                           f"{plural(len(ranked[i].disagreements), 'disagreement')} · {ranked[i].text[:50]}")
doc = ranked[index]
doc_a, res_a = detail_a.items[doc.position_a]
doc_b, res_b = detail_b.items[doc.position_b]

left, right = st.columns(2)
for col, side, summary, d, res in ((left, "A", A, doc_a, res_a), (right, "B", B, doc_b, res_b)):
    with col:
        st.markdown(f"**{side}: {render.md_text(summary.model)}** (run {summary.id:,})")
        spans = render.located_spans(res)
        if spans:
            st.html(render.legend_html(s.type for s in spans))
        st.html(render.spans_html(d.text, spans))
        labels = render.labels(res)
        if labels:
            st.html("Labels: " + render.legend_html(s.type for s in labels))


def version_html(m: Mention | None) -> str:
    """One model's version of a disagreement: its type, and where it is with a little text around it."""
    if m is None:
        return '<span style="opacity:0.6">—</span>'
    if m.label:
        return "label " + render.legend_html([m.type])
    if not m.located:
        return (render.legend_html([m.type]) + ' <span style="color:#b00020">not found in the text: '
                + escape(m.text if len(m.text) <= 160 else m.text[:160] + "…") + "</span>")
    return render.legend_html([m.type]) + " " + render.covered_html(doc.text, m.start, m.end)


DECIDED = {"A": "A's", "B": "B's", review.NEITHER: "neither"}


def choice_key(n: int) -> str:
    return f"review-choice-{A.id}-{B.id}-{doc.position_a}-{n}"


def mention_text(m: Mention | None) -> str:
    """A version in one line of the list: type and text (plain text)."""
    if m is None:
        return "—"
    text = m.text if len(m.text) <= 40 else m.text[:40] + "…"
    return f"{m.type}" if m.label else f"{m.type}: {text}"


def set_all(base: tuple, keys: list[str], focused: int, chosen: list[str | None]) -> None:
    """A bulk decision (keep all of A, of B, or clear): every disagreement of the document at once; the one
    radio on the page is told too, since a drawn radio keeps its own value."""
    for n, c in enumerate(chosen):
        decisions[(*base, n)] = c
    if 0 <= focused < len(keys):
        st.session_state[keys[focused]] = chosen[focused]


def move(base: tuple, to: int) -> None:
    st.session_state["review_focus"][base] = to


# Decisions live in session state of their own: a radio that is not drawn (another disagreement, another
# document) loses its widget state, and the decision must not go with it.
decisions = st.session_state.setdefault("review_decisions", {})
base = (A.id, B.id, doc.position_a)       # ids may repeat in a run; positions do not
total = len(doc.disagreements)
agreed = len(doc.agreed)
st.markdown(f"**Disagreements** ({total:,}; " + render.md_text(
    f"{plural(agreed, 'span')} both models agree on {agree(agreed, 'is', 'are')} kept as "
    f"{agree(agreed, 'it is', 'they are')})"))
if not doc.disagreements:
    st.success("Both models extracted the same from this document.")
else:
    keys = [choice_key(n) for n in range(total)]
    focus = min(st.session_state.setdefault("review_focus", {}).get(base, 0), total - 1)
    bulk = st.columns(3)
    for col, side, summary in ((bulk[0], "A", A), (bulk[1], "B", B)):
        col.button(f"Keep all of {side} ({summary.model})", key=f"review-keep-{side}-{A.id}-{B.id}-{doc.position_a}",
                   on_click=set_all, args=(base, keys, focus, review.keep_all(doc, side)),
                   help=f"The gold becomes {side}'s output for this document: {side}'s version of every "
                        f"disagreement, neither where {side} has none.")
    bulk[2].button("Clear the decisions", key=f"review-clear-{A.id}-{B.id}-{doc.position_a}",
                   on_click=set_all, args=(base, keys, focus, [None] * total))
    # The list stays short: one line per disagreement, and one card open at a time.
    st.dataframe(pd.DataFrame([{
        "": "▶" if n == focus else "", "#": n + 1, "kind": dis.kind, "A": mention_text(dis.a),
        "B": mention_text(dis.b), "kept": DECIDED.get(decisions.get((*base, n)), ""),
    } for n, dis in enumerate(doc.disagreements)]), hide_index=True, height=min(38 + 35 * total, 250),
        key=f"review-list-{A.id}-{B.id}-{doc.position_a}",
        column_config={"": st.column_config.TextColumn(width=28), "#": st.column_config.NumberColumn(width=48),
                       "kind": st.column_config.TextColumn(width=90), "kept": st.column_config.TextColumn(width=80)})
    nav = st.columns([1, 1, 1.4, 3])
    nav[0].button("Previous", key="review-previous", disabled=focus == 0, on_click=move, args=(base, focus - 1))
    nav[1].button("Next", key="review-next", disabled=focus == total - 1, on_click=move, args=(base, focus + 1))
    waiting = [n for n in range(total) if decisions.get((*base, n)) is None and n != focus]
    after = next((n for n in waiting if n > focus), waiting[0] if waiting else None)
    nav[2].button("Next undecided", key="review-next-undecided", disabled=after is None, on_click=move,
                  args=(base, after))
    dis = doc.disagreements[focus]
    with st.container(border=True):
        st.markdown(f"**{focus + 1} of {total}** · {render.md_text(dis.kind)}")
        c = st.columns([3, 3, 2.2])
        c[0].html("A: " + version_html(dis.a))
        c[1].html("B: " + version_html(dis.b))
        allowed = review.options(dis)
        current = decisions.get((*base, focus))
        # A radio already on the page shows its own value; a new one starts from the decision.
        index = None if keys[focus] in st.session_state or current not in allowed else allowed.index(current)
        decisions[(*base, focus)] = c[2].radio("Keep", allowed, index=index, horizontal=True, key=keys[focus],
                                               label_visibility="collapsed", format_func=DECIDED.__getitem__)
outside = [("A", m) for m in doc.outside_a] + [("B", m) for m in doc.outside_b]
if outside:
    st.caption("Outside the label set: a label the model wrote that is not one of the task's types. It is no "
               "type of this review and cannot be kept as gold.")
    st.html("<br>".join(f"{side}: " + version_html(m) for side, m in outside))
choices = [decisions.get((*base, n)) for n in range(len(doc.disagreements))]
undecided = sum(c is None for c in choices)
if undecided:
    st.caption(f"{plural(undecided, 'disagreement')} undecided: they stay out of the draft until you choose.")

sides = {"A": (detail_a, doc.position_a, doc_a), "B": (detail_b, doc.position_b, doc_b)}
side = st.radio("Save the gold example into a dataset of", list(sides), horizontal=True, key="review_side",
                format_func=lambda s: f"{s}: {sides[s][0].summary.model}")
detail, position, document = sides[side]
draft = review.gold_for(doc, choices, document, markers_of(detail.summary.model))
seed = (detail.id, position, repr(draft))
if st.session_state.get("review_seed") != seed:
    # The decisions changed: they become the editor's draft (widgets get new keys through the version).
    old = st.session_state.get(gold_editor.DRAFT) or {}
    st.session_state[gold_editor.DRAFT] = {"run": detail.id, "position": position, "tuples": draft,
                                           "version": old.get("version", 0) + 1, "selected": 0, "open": True}
    st.session_state["review_seed"] = seed
gold_editor.editor(store, detail, position)
