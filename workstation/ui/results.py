"""Streamlit views of a recorded run: its numbers and each document's result (Extract, History)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from contracts.domain import Document, Result, unread
from contracts.stages import describe as describe_stages
from contracts.words import agree, plural
from workstation.ui import comparison, render

MAX_DOCS_LISTED = 1_000
GENERATED_HEIGHT_PX = 320


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def run_numbers(summary, demo_notice: bool = True) -> None:
    """Wall time, tokens, peak GPU memory, device, precision and active optimizations of one run.
    demo_notice=False where the page already says the weights are the random demo (Extract's banner)."""
    cols = st.columns(5)
    cols[0].metric("Wall time", f"{summary.wall_seconds:.3f} s")
    cols[1].metric("Tokens", f"{summary.tokens:,}")
    cols[2].metric("Peak GPU memory", fmt_bytes(summary.peak_memory_bytes) if summary.peak_memory_bytes
                   is not None else "— (CPU)")
    cols[3].metric("Device", summary.device)
    cols[4].metric("Precision", summary.dtype)
    opts = summary.optimizations or {}
    st.caption("Optimizations: " + (", ".join(render.md_text(f"{k} ({v})") for k, v in opts.items()) if opts
                                    else "none (fp32 eager path)")
               + f" · attention: {render.md_text(summary.attention)} · {plural(summary.documents, 'document')} · "
               f"model {render.md_text(summary.model)}")
    stage_line(summary)
    if summary.demo and demo_notice:
        # The page's banner speaks of the weights chosen now; this says which weights made this run.
        st.warning("This run was made on random demo weights: its outputs are meaningless.",
                   icon=":material/warning:")


def stage_line(summary) -> None:
    """Documents/s and where the time went (host preparation, device, decoding, writing)."""
    stages = getattr(summary, "stages", None) or {}
    rate = f"{summary.docs_per_second:,.1f} documents/s" if summary.docs_per_second else "—"
    if stages.get("seconds"):
        line = describe_stages(stages["seconds"], summary.wall_seconds, stages.get("device_busy"), stages.get("backoffs"))
        st.caption(render.md_text(f"{rate} · {line}"))
    else:
        st.caption(render.md_text(f"{rate} · no stage timings were recorded for this run"))


def with_confidence(frame: pd.DataFrame) -> pd.DataFrame:
    """Confidences as numbers (a missing one is an empty cell, not the text "None"); no column at all when
    the model gives none (SeqGPT)."""
    confidence = pd.to_numeric(frame["confidence"], errors="coerce").astype("float64")
    if confidence.isna().all():
        return frame.drop(columns="confidence")
    return frame.assign(confidence=confidence)


def highlighted_text(text: str, spans, key: str, unread_ranges=()) -> None:
    """The text with its spans; a long one a page at a time (drawing all of it at once took seconds)."""
    pages = render.text_pages(text)
    if len(pages) == 1:
        st.html(render.spans_html(text, spans, unread=unread_ranges))
        return
    page = st.number_input(f"Text page (of {len(pages):,})", 1, len(pages), 1, key=f"text-page-{key}",
                           help=f"{len(text):,} characters, drawn about {render.PAGE_CHARS:,} at a time")
    start, end = pages[int(page) - 1]
    st.caption(f"Characters {start:,}–{end:,} of {len(text):,} (offsets as in the extractions below)")
    st.html(render.spans_html(text, spans, limit=end - start, start=start, note=False, unread=unread_ranges))


def document_result(doc: Document, result: Result, key: str) -> None:
    """The text with spans drawn, labels with confidences, generated text beside grounded spans, tuples."""
    spans = render.located_spans(result)
    left, right = st.columns([3, 2]) if result.raw is not None else (st.container(), None)
    with left:
        if spans:
            st.html(render.legend_html(s.type for s in spans))
        highlighted_text(doc.text, spans, key, unread(doc.text, result.coverage))
        note = render.coverage_note(doc.text, result.coverage)
        if note:
            (st.warning if unread(doc.text, result.coverage) else st.caption)(note)
        labels = render.labels(result)
        if labels:
            st.markdown("**Labels**")
            st.dataframe(with_confidence(pd.DataFrame([{"label": s.type if not s.span else s.span, "type": s.type,
                                                        "confidence": s.confidence} for s in labels])),
                         hide_index=True, key=f"labels-{key}",
                         column_config={"confidence": st.column_config.NumberColumn(format="%.3f")})
    if right is not None:
        with right:
            st.markdown("**Generated text** (what the model wrote, per prompt chunk)")
            with st.container(height=GENERATED_HEIGHT_PX):      # scrolls: a long generation kept the page 4,000 px tall
                for i, chunk in enumerate(result.raw or []):
                    st.code(chunk or "(empty)", language=None, wrap_lines=True)
            missing = render.ungrounded(result)
            if missing:
                st.warning("Not found in the text (ungrounded): "
                           + "; ".join(render.md_text(f"{s.type}: {_clip(s.span)}") for s in missing[:50]))
    for w in result.warnings:
        st.info(render.md_text(w))
    rows = render.tuple_rows(result)
    if rows:
        extractions_table(result, rows, key)
    elif not render.labels(result):
        st.info("Nothing extracted from this text.")


def extractions_table(result: Result, rows: list[dict], key: str) -> None:
    """The extractions as a table: how many spans of each type above it, and a filter by type and by lowest
    confidence (a row is kept when any of its spans is of a chosen type)."""
    counts = render.type_counts(result)
    st.markdown(f"**Extractions** ({render.md_text(plural(len(result.tuples), 'extraction'))})")
    st.html(render.counts_html(counts))
    left, right = st.columns([3, 2])
    chosen = left.multiselect("Show types", list(counts), default=[], key=f"types-{key}",
                              placeholder="every type") if len(counts) > 1 else list(counts)
    confidences = [r["confidence"] for r in rows if r["confidence"] is not None]
    floor = right.slider("Lowest confidence", 0.0, 1.0, 0.0, 0.05, key=f"conf-{key}",
                         help="Hide extractions whose lowest span confidence is below this") if confidences else 0.0
    shown = [r for r, tup in zip(rows, result.tuples)
             if (not chosen or any(s.type in chosen for s in tup))
             and (r["confidence"] is None or r["confidence"] >= floor)]
    if len(shown) < len(rows):
        st.caption(f"{len(shown):,} of {len(rows):,} shown by the filter")
    if shown:
        st.dataframe(with_confidence(pd.DataFrame(shown)), hide_index=True, key=f"tuples-{key}",
                     column_config={"confidence": st.column_config.NumberColumn(format="%.3f")})
    if len(result.tuples) > len(rows):
        st.caption(f"Showing {len(rows):,} of {len(result.tuples):,} extractions; export the run for all.")


def run_view(detail, key: str, demo_notice: bool = True) -> int | None:
    """A whole run: numbers, then one document (a picker when the run has several). Returns its position."""
    run_numbers(detail.summary, demo_notice)
    pairs = detail.items
    if not pairs:
        st.info("This run has no documents.")
        return None
    index = 0
    if len(pairs) > 1:
        shown = pairs[:MAX_DOCS_LISTED]
        cut = [bool(unread(d.text, r.coverage)) for d, r in shown]
        index = st.selectbox(f"Document ({len(pairs):,} in this run)", range(len(shown)), key=f"doc-{key}",
                             format_func=lambda i: f"{shown[i][0].id}: {shown[i][0].text[:60]}"
                                                   + (" · cut (read partly)" if cut[i] else ""))
    doc, result = pairs[index]
    document_result(doc, result, key)
    return index


def comparison_view(store, a: int, b: int) -> None:
    """Two runs side by side: time, tokens, memory and settings, then the tuples that differ."""
    from storage.repository import NotFound
    from workstation.quality.comparison import compare_runs
    try:
        cmp = compare_runs(store, a, b)
    except NotFound as e:
        st.info(render.md_text(e))
        return
    st.markdown(f"**Run {a} (A) vs run {b} (B)**")
    cols = st.columns(4)
    if cmp.texts_differ:
        st.warning(f"{plural(len(cmp.texts_differ), 'document')} {agree(len(cmp.texts_differ), 'has', 'have')} the same id but a different text in the two runs "
                   f"({', '.join(render.md_text(i) for i in cmp.texts_differ[:10])}"
                   f"{', …' if len(cmp.texts_differ) > 10 else ''}): they are compared as different "
                   "documents, and the times of the runs are not a like-for-like comparison.")
    elif not cmp.same_inputs:
        st.warning("The runs read different documents: the times of the runs are not a like-for-like comparison.")
    speedup = cmp.a.wall_seconds / cmp.b.wall_seconds if cmp.b.wall_seconds and cmp.same_inputs else None
    notes = comparison.caveats(cmp.a, cmp.b, cmp.same_inputs)
    # A time difference is coloured (better / worse) only where it can be credited to a changed setting.
    fair = comparison.fair_ratio(cmp.a, cmp.b, cmp.same_inputs)
    cols[0].metric("Wall time B", f"{cmp.b.wall_seconds:.3f} s", f"{cmp.b.wall_seconds - cmp.a.wall_seconds:+.3f} s",
                   delta_color="inverse" if fair else "off", help=f"A: {cmp.a.wall_seconds:.3f} s")
    cols[1].metric("Speed-up B over A", f"{speedup:.2f}×" if speedup else "—",
                   "not an effect of a setting" if speedup and not fair else None, delta_color="off",
                   delta_arrow="off",
                   help=("Not shown: the runs read different texts." if not cmp.same_inputs else
                         None if fair else "Not a measured effect of a setting: see the notes below."))
    mem_a, mem_b = cmp.a.peak_memory_bytes, cmp.b.peak_memory_bytes
    cols[2].metric("Peak GPU memory B", fmt_bytes(mem_b),
                   fmt_bytes(mem_b - mem_a) if mem_a is not None and mem_b is not None else None,
                   delta_color="inverse", help=f"A: {fmt_bytes(mem_a)}")
    cols[3].metric("Extractions only in A / only in B", f"{cmp.only_a:,} / {cmp.only_b:,}",
                   help=f"{plural(cmp.both, 'extraction')} {agree(cmp.both, 'is', 'are')} in both runs")
    for caveat in notes:                         # comparison.caveats: sentences the code wrote
        st.info(caveat, icon=":material/info:")
    changed = comparison.changed_settings(cmp.a, cmp.b)
    if changed:
        st.caption("Changed between A and B: " + ", ".join(render.md_text(n.replace("_", " ")) for n in changed) + ".")
    stages = comparison.stage_frame(cmp.a, cmp.b)
    if not stages.empty:
        st.markdown("**Where the time went** (seconds per stage; stages overlap, so they can add up to more "
                    "than the wall time)")
        st.bar_chart(stages, horizontal=True, stack=False, sort=False, height=60 + 45 * len(stages))
    st.dataframe(pd.DataFrame([side_row("A", cmp.a), side_row("B", cmp.b)]), hide_index=True)
    if cmp.identical:
        st.success("Both runs read the same texts and extracted exactly the same tuples.")
    else:
        st.dataframe(pd.DataFrame(render.comparison_rows(cmp.documents)), hide_index=True)
    agreement_section(store, a, b)


def agreement_section(store, a: int, b: int) -> None:
    """How far B agrees with A per type (workstation/quality/agreement.py), and the way to the review queue."""
    from workstation.quality.agreement import agreement, markers_of
    from workstation.ui.agreement_view import agreement_table
    st.markdown("**Agreement of B with A, per type**")
    run_a, run_b = store.get_run(a), store.get_run(b)
    agreement_table(agreement(run_a.items, run_b.items, markers_a=markers_of(run_a.summary.model),
                              markers_b=markers_of(run_b.summary.model)), key=f"agreement-{a}-{b}")
    if st.button("Review the disagreements", key=f"review-{a}-{b}"):
        st.session_state["review_pair"] = (a, b)
        st.switch_page(str(Path(__file__).parent / "pages" / "review.py"))


def side_row(name: str, s) -> dict:
    return {"run": f"{name}: {s.id}", "model": s.model, "device": s.device, "precision": s.dtype,
            "attention": s.attention, "optimizations": ", ".join(s.optimizations) or "none",
            "documents": s.documents, "wall time (s)": round(s.wall_seconds, 4),
            "documents/s": round(s.docs_per_second, 2) if s.docs_per_second else None,
            **{f"{k} (s)": v for k, v in ((s.stages or {}).get("seconds") or {}).items()},
            "device busy (%)": round(100 * s.stages["device_busy"], 1) if (s.stages or {}).get("device_busy") else None,
            "tokens": s.tokens, "peak GPU memory": fmt_bytes(s.peak_memory_bytes), "demo weights": s.demo}
