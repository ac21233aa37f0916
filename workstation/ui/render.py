"""Results as HTML and table rows. Pure functions; every piece of user text goes through html.escape.

Text, span strings and type names all come from users (pasted text, schema keys), so nothing here is
ever interpolated unescaped. Colours are derived from the type name, so a type keeps its colour
across runs and pages.
"""
from __future__ import annotations

import colorsys
import hashlib
import re
from html import escape
from typing import Iterable

from contracts.domain import Result, Span, unread_chars
from contracts.words import plural

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$])")


def md_text(text: str) -> str:
    """User text (a dataset or file name) inside Streamlit markdown: every markdown character is
    backslash-escaped, so it shows as typed and never becomes a link, an image or formatting."""
    return _MARKDOWN.sub(r"\\\1", str(text))


def md_code(text: str) -> str:
    """User text (a path) as inline code in Streamlit markdown: a fence longer than any run of backticks
    inside, so the text cannot close it; inside code nothing else is markdown."""
    text = str(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if "`" in text else f"`{text}`"


MAX_DRAWN_CHARS = 20_000        # longer texts are drawn up to here (with a note); extraction sees all
PAGE_CHARS = 4_000              # a longer result is drawn one page at a time: a whole 20,000-character
                                # text with its spans took seconds to draw, with nothing on the screen meanwhile


def text_pages(text: str, size: int = PAGE_CHARS) -> list[tuple[int, int]]:
    """[start, end) windows of at most `size` characters covering the text, cut just after a line break
    (else a space) in the second half of a window where there is one, so pages do not split words."""
    pages: list[tuple[int, int]] = []
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            cut = text.rfind("\n", start + size // 2, end)
            cut = cut if cut >= 0 else text.rfind(" ", start + size // 2, end)
            end = cut + 1 if cut >= 0 else end
        pages.append((start, end))
        start = end
    return pages or [(0, 0)]


def type_color(type_name: str, strong: bool = False) -> str:
    """A light, readable background colour, stable for a type name; `strong`: the same hue, darker (bars)."""
    h = int.from_bytes(hashlib.sha1(type_name.encode("utf-8")).digest()[:2], "big") / 65535
    r, g, b = colorsys.hls_to_rgb(h, 0.45 if strong else 0.82, 0.75)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def located_spans(result: Result) -> list[Span]:
    """Spans with character offsets, once each, in text order (a span may appear in several tuples)."""
    seen: dict[tuple, Span] = {}
    for tup in result.tuples:
        for s in tup:
            if s.offset is not None:
                seen.setdefault((s.type, s.offset), s)
    return sorted(seen.values(), key=lambda s: (s.offset[0], -s.offset[1], s.type))


def labels(result: Result) -> list[Span]:
    """Classification labels: spans without offsets that are not ungrounded generated spans."""
    return [s for tup in result.tuples for s in tup if s.offset is None and s.grounded is not False]


def ungrounded(result: Result) -> list[Span]:
    """Generated spans not found in the text (SeqGPT): shown, but flagged."""
    return [s for tup in result.tuples for s in tup if s.grounded is False]


UNREAD_STYLE = "color:#8a8f98;background:#eceef1;text-decoration:line-through;text-decoration-color:#c3c7cd"


BAR_PX, BAR_GAP_PX = 3, 2         # one level of underline: a bar and the gap above it


def span_levels(spans: list[Span]) -> dict[int, int]:
    """Each span's underline level (index in `spans`, sorted by start): the lowest level free of every span
    it overlaps, as displaCy's span style stacks them; level 0 sits right under the text."""
    ends: list[int] = []                # per level, where its last span ends
    levels: dict[int, int] = {}
    for i, s in enumerate(spans):
        level = next((k for k, e in enumerate(ends) if e <= s.offset[0]), len(ends))
        if level == len(ends):
            ends.append(0)
        ends[level] = s.offset[1]
        levels[i] = level
    return levels


def spans_html(text: str, spans: Iterable[Span], limit: int = MAX_DRAWN_CHARS, start: int = 0,
               note: bool = True, unread: Iterable[tuple[int, int]] = ()) -> str:
    """The text from `start` (at most `limit` characters) with each span underlined by a bar of its type's
    colour on a level of its own, its type whole at its start (displaCy's span style), so nested and
    overlapping spans stay readable. Offsets are clamped to the window, so a span crossing its edge is drawn
    in part. `unread`: character ranges the model did not read (domain.unread), drawn greyed out.

    The text is cut into segments at every span and unread boundary; a segment carries one bar per span
    covering it. The bars are backgrounds of an inline element cloned per line fragment, so a span that
    wraps keeps its bars on both lines.
    """
    start = max(0, min(start, len(text)))
    shown = text[start:start + limit]
    n = len(shown)
    spans = sorted((Span(s.type, s.span, (max(s.offset[0] - start, 0), min(s.offset[1] - start, n)), s.confidence,
                         s.grounded)
                    for s in spans if s.offset is not None and 0 <= s.offset[0] < s.offset[1]
                    and s.offset[1] > start and s.offset[0] < start + n),
                   key=lambda s: (s.offset[0], -s.offset[1], s.type))
    levels = span_levels(spans)
    depth = max(levels.values(), default=-1) + 1
    unread = [(max(0, u - start), min(v - start, n)) for u, v in unread if max(0, u - start) < min(v - start, n)]
    starts: dict[int, list[int]] = {}
    for i, s in enumerate(spans):
        starts.setdefault(s.offset[0], []).append(i)
    cuts = sorted({0, n} | {p for s in spans for p in s.offset} | {p for r in unread for p in r})
    step = BAR_PX + BAR_GAP_PX
    parts = [f'<div class="iew-text" style="white-space:pre-wrap;line-height:calc(2em + {depth * step}px);'
             f'font-size:1.02rem">']
    active: list[int] = []
    for a, b in zip(cuts, cuts[1:]):    # sweep: active = spans covering [a, b)
        for i in starts.get(a, ()):
            active.append(i)
            parts.append(_label_chip(spans[i].type, start_of_span=True))
        active = [i for i in active if spans[i].offset[1] > a]
        segment = escape(shown[a:b])
        if active:
            segment = _underlined(segment, [spans[i] for i in active], [levels[i] for i in active], depth)
        if any(u <= a and b <= v for u, v in unread):
            segment = f'<span class="iew-unread" title="not read by the model" style="{UNREAD_STYLE}">{segment}</span>'
        parts.append(segment)
    parts.append("</div>")
    if note and start == 0 and len(text) > limit:
        parts.append(f'<p style="opacity:0.7"><em>Showing the first {limit:,} of {len(text):,} characters; '
                     f"the table lists every span.</em></p>")
    return "".join(parts)


def _underlined(segment: str, spans: list[Span], levels: list[int], depth: int) -> str:
    """A piece of text under one or more spans: a bar per span at its level, a light fill of the innermost."""
    step = BAR_PX + BAR_GAP_PX
    inner = min(spans, key=lambda s: s.offset[1] - s.offset[0])
    bars = [(type_color(s.type, strong=True), level) for s, level in zip(spans, levels)]
    images = ",".join(f"linear-gradient({c},{c})" for c, _ in bars)
    sizes = ",".join(f"100% {BAR_PX}px" for _ in bars)
    positions = ",".join(f"0 calc(100% - {(depth - 1 - level) * step}px)" for _, level in bars)
    title = escape(" / ".join(f"{s.type}: {s.span}" for s in spans[:8]), quote=True)
    levels_attr = " ".join(str(level) for level in levels)
    return (f'<mark class="iew-span" data-levels="{levels_attr}" title="{title}" '
            f'style="color:inherit;background-color:{type_color(inner.type)}66;background-image:{images};'
            f"background-size:{sizes};background-position:{positions};background-repeat:no-repeat;"
            f"padding:0 0 {depth * step}px 0;-webkit-box-decoration-break:clone;box-decoration-break:clone\">"
            f"{segment}</mark>")


def coverage_note(text: str, coverage: list[tuple[int, int]] | None) -> str | None:
    """One line on how much of the text the model read; None when it does not report it. Plain text."""
    if coverage is None:
        return None
    missed = unread_chars(text, coverage) or 0
    if not missed:
        return f"The model read all of the text ({plural(len(text), 'character')})."
    visible = len(text) - sum(ch.isspace() for ch in text)
    return (f"The model read {visible - missed:,} of {visible:,} characters (whitespace not counted); "
            f"the greyed, struck-through part was not read.")


def _label_chip(type_name: str, start_of_span: bool = False) -> str:
    """A type's name as one unbreakable chip (inline-block, no wrapping: never split across lines)."""
    where = ' class="iew-label"' if start_of_span else ""
    lift = "vertical-align:0.45em;margin:0 0.1em 0 0.15em" if start_of_span else "vertical-align:middle;margin:0 0.2em"
    return (f'<span{where} style="display:inline-block;white-space:nowrap;background:{type_color(type_name)};'
            f"font-size:0.72em;font-weight:600;line-height:1.35;padding:0 0.35em;border-radius:0.3em;{lift}\">"
            f"{escape(type_name)}</span>")


def type_counts(result: Result) -> dict[str, int]:
    """Spans per type over every extraction of a result, most first (ties by name)."""
    counts: dict[str, int] = {}
    for tup in result.tuples:
        for s in tup:
            counts[s.type] = counts.get(s.type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def counts_html(counts: dict[str, int]) -> str:
    """Each type's chip with its count: `person 3  place 1`."""
    return " ".join(f'<span class="iew-count">{_label_chip(t)}{n:,}</span>' for t, n in counts.items())


def legend_html(type_names: Iterable[str]) -> str:
    return " ".join(_label_chip(t) for t in sorted(set(type_names)))


def tuple_text(tup: list[Span]) -> str:
    """A tuple as one readable line: `人物: 谷口清太郎 → 出生地: 日本`. Plain text (tables escape it)."""
    return " → ".join(f"{s.type}: {s.span}" for s in tup)


def tuple_text_json(tup: list[dict]) -> str:
    """The same line for a tuple in our JSON shape ({"type", "span", "offset"} elements)."""
    return " → ".join(f"{e['type']}: {e['span']}" for e in tup)


def tuple_rows(result: Result, limit: int = 2_000) -> list[dict]:
    """One row per extraction (a stored tuple) for a dataframe: it as a readable line, its kind, the offsets."""
    rows = []
    for i, tup in enumerate(result.tuples[:limit]):
        rows.append({
            "#": i + 1,
            "extraction": tuple_text(tup),
            "kind": "span" if len(tup) == 1 else f"{len(tup)} linked spans",
            "offsets": "; ".join(f"[{s.offset[0]}, {s.offset[1]})" if s.offset else "—" for s in tup),
            "confidence": min((s.confidence for s in tup if s.confidence is not None), default=None),
            "grounded": all(s.grounded is not False for s in tup),
        })
    return rows


def key_text(key) -> str:
    """A stored tuple key ((type, span, offset), ...) as a readable line."""
    return " → ".join(f"{t}: {span}" + (f" [{o[0]}, {o[1]})" if o else "") for t, span, o in key)


def comparison_rows(documents, limit: int = 5_000) -> list[dict]:
    """The tuples that differ between two runs, one row each (from quality.comparison.compare_runs' documents)."""
    rows = []
    for d in documents:
        if not (d.in_a and d.in_b):
            rows.append({"document": d.doc_id, "change": "only in A" if d.in_a else "only in B",
                         "extraction": "(the whole document)"})
        for side, keys in (("only in A", d.only_a), ("only in B", d.only_b)):
            rows.extend({"document": d.doc_id, "change": side, "extraction": key_text(k)} for k in keys)
        if len(rows) >= limit:
            break
    return rows[:limit]


def covered_html(text: str, start: int | None, end: int | None, context: int = 24) -> str:
    """What the offsets [start, end) cover, marked, with a little text either side (for re-spanning by hand)."""
    if start is None or end is None:
        return '<span style="opacity:0.7"><em>no position: a label, not a span of the text</em></span>'
    if not 0 <= start < end <= len(text):
        return (f'<span style="color:#b00020">[{start}, {end}) is not a span of this text '
                f"(0 ≤ start &lt; end ≤ {len(text):,})</span>")
    left, right = max(0, start - context), min(len(text), end + context)
    return ('<span class="iew-covered" style="white-space:pre-wrap">'
            + ("…" if left else "") + escape(text[left:start])
            + f'<mark style="background:#ffe08a;padding:0 0.1em">{escape(text[start:end])}</mark>'
            + escape(text[end:right]) + ("…" if right < len(text) else "") + "</span>")
