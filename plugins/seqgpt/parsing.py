"""Generated text -> typed spans grounded in the input text, tolerant of what a model writes
(docs/models/seqgpt.md §1.5).

Extraction output is one `label: span` line per label (`LOC: MELBOURNE`, `时间: None`). Several
spans on a line are split on `，`, on a comma not inside a number (`1,000` stays whole) and on runs
of two or more spaces — the separator is not documented upstream. Classification output is the
chosen label(s), several joined by `，` or `,`. Nothing the model wrote is dropped silently: a label
outside the label set is kept under the name the model wrote and reported in the warnings, and a
line that is not `label: span` is kept whole under the type UNPARSED.

Grounding rule (character offsets are Python str indices into the document text): the k-th mention
of span s under label L takes the k-th non-overlapping occurrence of s in the text, searching left
to right. A span that does not occur is kept with offset None and grounded False. So is a mention
beyond the number of occurrences (the model repeated itself): the string is in the text, but no
unclaimed occurrence is left to tie it to; a warning says so. (offset None with grounded None is
what a classification label looks like, so generated spans never take that shape.)
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from contracts.domain import Span

UNPARSED = "_unparsed"                 # the type of output lines that are not `label: span`
NONE_VALUES = {"none", "null", "无", "空", ""}
_SPAN_SEPARATORS = re.compile(r"，|\s{2,}|(?<!\d),|,(?!\d)")
_LABEL_SEPARATORS = re.compile(r"[，,\n]")
_KEY_VALUE = re.compile(r"[:：]")


@dataclass(frozen=True)
class Mention:
    """A span as the model wrote it, before grounding."""

    label: str
    span: str


def _canonical(label: str, labels: list[str]) -> str | None:
    """The label-set entry the model meant: exact match, else case-insensitive, else None."""
    if label in labels:
        return label
    folded = [x for x in labels if x.casefold() == label.casefold()]
    return folded[0] if folded else None


def parse_classification(raw: str, labels: list[str]) -> tuple[list[str], list[str]]:
    """The chosen labels (each once, in output order) and warnings."""
    chosen, warnings = [], []
    for piece in _LABEL_SEPARATORS.split(raw.strip()):
        piece = piece.strip()
        if piece.casefold() in NONE_VALUES:
            continue
        label = _canonical(piece, labels)
        if label is None:
            label = piece
            warnings.append(f"the model chose {piece!r}, which is not in the label set; kept as written")
        if label not in chosen:
            chosen.append(label)
    return chosen, warnings


def parse_extraction(raw: str, labels: list[str]) -> tuple[list[Mention], list[str]]:
    """Mentions in output order, and warnings."""
    mentions, warnings = [], []
    for line in raw.split("\n"):
        line = line.strip()
        if not line:
            continue
        parts = _KEY_VALUE.split(line, maxsplit=1)
        if len(parts) == 1:
            if _canonical(line, labels) is None:       # a bare known label is a label with no span
                mentions.append(Mention(UNPARSED, line))
                warnings.append(f"output line {line!r} is not 'label: span'; kept under {UNPARSED!r}")
            continue
        key, value = parts[0].strip(), parts[1].strip()
        label = _canonical(key, labels)
        if label is None:
            label = key
            warnings.append(f"the model wrote label {key!r}, which is not in the label set; kept as written")
        if value.casefold() in NONE_VALUES:
            continue
        for span in _SPAN_SEPARATORS.split(value):
            span = span.strip()
            if span and span.casefold() not in NONE_VALUES:
                mentions.append(Mention(label, span))
    return mentions, warnings


def ground(text: str, mentions: list[Mention]) -> tuple[list[Span], list[str]]:
    """Spans with offsets by the rule in the module docstring, in mention order; and warnings."""
    claimed: dict[tuple[str, str], int] = defaultdict(int)    # (label, span) -> where the next search starts
    spans, warnings = [], []
    for m in mentions:
        start = text.find(m.span, claimed[(m.label, m.span)])
        if start >= 0:
            claimed[(m.label, m.span)] = start + len(m.span)
            spans.append(Span(m.label, m.span, (start, start + len(m.span)), grounded=True))
        else:
            spans.append(Span(m.label, m.span, None, grounded=False))
            if m.span in text:
                warnings.append(f"{m.label}: {m.span!r} is repeated more often than it occurs in the text; "
                                "the extra mention is left ungrounded")
    return spans, warnings
