"""Long texts for SeqGPT: which part of a text the model read (coverage), and a window mode that reads all.

The reference tokenizes each prompt with max_length=1024, truncating on the left, so the start of a
long text never reaches the model. Two modes, chosen per run:

- "truncate" (the default, the reference): documents go through the pipeline unchanged; each result
  records as its coverage the part of the text that every prompt of the document kept.
- "window": a document whose prompts would be cut is split into overlapping windows that end at
  sentence ends (Chinese and English punctuation, line breaks; a hard cut between tokens when one
  sentence alone is too long). Each window runs through the unchanged per-prompt path as a document
  of its own (prompting -> generation -> parsing -> grounding in the window); its spans are moved to
  offsets in the whole text and the windows are merged: a span found by two windows (in their overlap)
  is kept once. Documents that fit are not split, so their results are exactly those of "truncate".

This is a layer around `Pipeline.run`: documents -> windows -> the per-prompt path -> merge.
"""
from __future__ import annotations

import bisect
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import msgspec

from contracts.domain import Document, InputError, Result, Span
from plugins.seqgpt.prompting import (
    MARKERS,
    MAX_PROMPT_TOKENS,
    Prompt,
    chunk_labels,
    normalise_labels,
    prompt_text,
    prompts_for,
    task_of,
)

MODES = ("truncate", "window")
OVERLAP_TOKENS = 96        # text repeated at the start of the next window, so a join never splits a span unseen
SAFETY_TOKENS = 8          # byte-level BPE may merge across the marker/text join: leave room for it
MAX_REPLANS = 4

# A sentence ends after these, plus any closing quotes or brackets. A "." ends one only before whitespace
# (not in 1.5 or e.g.), and a line break always does.
_SENTENCE_END = re.compile(r"(?:[。！？!?；;…]+|\.(?=\s)|\n)[”’」』）)】\"']*")

Range = tuple[int, int]


@dataclass(frozen=True)
class Window:
    """Characters [start, end) of a document. cut_before / cut_after: the edge lies inside a sentence (a
    hard cut), so a span touching it may be a piece of a longer one that another window sees whole."""

    start: int
    end: int
    cut_before: bool = False
    cut_after: bool = False


def sentence_starts(text: str) -> list[int]:
    """Character positions where a sentence begins (0 excluded)."""
    return [m.end() for m in _SENTENCE_END.finditer(text) if 0 < m.end() < len(text)]


def cut(text: str, offsets: Sequence[Range], budget: int, overlap: int = OVERLAP_TOKENS) -> list[Window]:
    """Windows of at most `budget` tokens of the text (token char offsets `offsets`), ending at a sentence end
    where one lies past the first `overlap` tokens, else at a token boundary (a hard cut). The next window
    starts at the earliest sentence within the last `overlap` tokens, else at the last sentence when it is
    at most a third of the budget (hard cuts: `overlap` tokens back)."""
    n = len(offsets)
    if n <= budget:
        return [Window(0, len(text))]
    overlap = max(0, min(overlap, budget // 4))
    # Token i may start a window when it does not share a character with token i-1 (byte pieces of one
    # character do); position(i) is the character where a window starting at token i begins.
    clean = [i for i in range(1, n) if offsets[i][0] >= offsets[i - 1][1]]

    def position(i: int) -> int:
        return 0 if i == 0 else len(text) if i >= n else offsets[i][0]

    starts = [o[0] for o in offsets]
    sentence_set = {i for i in (bisect.bisect_left(starts, c) for c in sentence_starts(text))
                    if 0 < i < n and offsets[i][0] >= offsets[i - 1][1]}
    sentences = sorted(sentence_set)

    def last_in(items: list[int], low: int, high: int) -> int | None:     # the largest item in (low, high]
        k = bisect.bisect_right(items, high) - 1
        return items[k] if k >= 0 and items[k] > low else None

    def first_in(items: list[int], low: int, high: int) -> int | None:    # the smallest item in [low, high)
        k = bisect.bisect_left(items, low)
        return items[k] if k < len(items) and items[k] < high else None

    windows, a, cut_before = [], 0, False
    while n - a > budget:
        b = last_in(sentences, a + overlap, a + budget)
        hard = b is None
        if hard:
            b = last_in(clean, a + overlap, a + budget) or a + budget
        windows.append(Window(position(a), position(b), cut_before, hard))
        if hard:
            nxt = last_in(clean, a, b - overlap) or max(a + 1, b - overlap)
        else:                      # the sentences in the overlap; else the last sentence, if not too long
            nxt = first_in(sentences, b - overlap, b) or last_in(sentences, max(a, b - budget // 3 - 1), b - 1) or b
        cut_before = hard and nxt not in sentence_set
        a = nxt
    windows.append(Window(position(a), len(text), cut_before, False))
    return windows


# ---- what a prompt kept ----------------------------------------------------------------------------------

def kept_range(tokenizer, document: Document, prompts: Sequence[Prompt], markers: str = "zh",
               max_prompt_tokens: int = MAX_PROMPT_TOKENS) -> tuple[list[Range], int]:
    """The characters of document.text that every prompt kept after the left truncation (the coverage),
    and the longest prompt in tokens. A character split over a dropped and a kept byte token counts as
    not read. The text sits in the prompt after "{input marker}: ", stripped (prompting.prompt_text)."""
    text = document.text
    stripped = text.strip()
    lead, head = len(text) - len(text.lstrip()), len(MARKERS[markers].input) + 2
    start, longest = 0, 0
    for prompt in prompts:
        encoded = tokenizer(prompt.text, return_offsets_mapping=True)
        length = len(encoded["input_ids"])
        longest = max(longest, length)
        if length > max_prompt_tokens:
            dropped_until = encoded["offset_mapping"][length - max_prompt_tokens - 1][1]
            start = max(start, dropped_until - head)
    if not prompts or start >= len(stripped):
        return [], longest
    return [(lead + max(0, start), lead + len(stripped))], longest


def merge_ranges(ranges: Iterable[Range], text: str) -> list[Range]:
    """Sorted, overlapping ones merged; ranges separated by whitespace only are joined (prompts strip the
    edges of every window, so those gaps are not text left unread)."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and not text[out[-1][1]:a].strip():
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


# ---- planning a document ----------------------------------------------------------------------------------

@dataclass
class Plan:
    """A document and how it is read: whole (windows None) or in windows, with each part's coverage."""

    document: Document
    windows: list[Window] | None = None
    coverage: list[list[Range]] = field(default_factory=list)    # per part, in the part's own characters
    notes: list[str] = field(default_factory=list)

    @property
    def parts(self) -> list[Document]:
        d = self.document
        if self.windows is None:
            return [d]
        return [Document(d.id, d.text[w.start:w.end], d.schema, d.task, d.labels, d.line) for w in self.windows]


def plan(document: Document, tokenizer, mode: str = "truncate", markers: str = "zh", label_batch: int = 6,
         max_prompt_tokens: int = MAX_PROMPT_TOKENS, overlap: int = OVERLAP_TOKENS) -> Plan:
    """Windows for a document whose prompts would be cut, in window mode; otherwise the document whole."""
    prompts = prompts_for(document, markers, label_batch)
    coverage, longest = kept_range(tokenizer, document, prompts, markers, max_prompt_tokens)
    whole = Plan(document, None, [coverage])
    if mode == "truncate" or longest <= max_prompt_tokens:
        return whole
    if document.task == "nli":
        whole.notes.append("window mode does not split a sentence pair (nli): the text was read as the reference "
                           "reads it, keeping the last tokens")
        return whole
    task, labels = task_of(document), normalise_labels(document.labels, document.line)
    chunks = [labels] if task == "cls" else chunk_labels(labels, label_batch)
    overhead = max(len(tokenizer(prompt_text("x", task, c, MARKERS[markers]))["input_ids"]) for c in chunks) - 1
    budget = max_prompt_tokens - overhead - SAFETY_TOKENS
    if budget < 2 * SAFETY_TOKENS:
        whole.notes.append(f"the labels alone take {overhead} of the {max_prompt_tokens} prompt tokens, leaving no "
                           "room for windows of text: the text was cut as the reference cuts it")
        return whole
    offsets = [tuple(o) for o in tokenizer(document.text, add_special_tokens=False,
                                           return_offsets_mapping=True)["offset_mapping"]]
    for _ in range(MAX_REPLANS):
        windows = cut(document.text, offsets, budget, overlap)
        windowed = Plan(document, windows)
        lengths = []
        for part in windowed.parts:
            part_coverage, part_longest = kept_range(tokenizer, part, prompts_for(part, markers, label_batch),
                                                     markers, max_prompt_tokens)
            windowed.coverage.append(part_coverage)
            lengths.append(part_longest)
        excess = max(lengths) - max_prompt_tokens
        if excess <= 0:
            break
        budget -= excess + SAFETY_TOKENS          # a window's prompt came out longer than counted: shrink all
    return windowed                                # still too long after the retries: its coverage says so


# ---- merging the windows' results ---------------------------------------------------------------------------

def _moved(span: Span, by: int) -> Span:
    return span if span.offset is None else msgspec.structs.replace(span, offset=(span.offset[0] + by, span.offset[1] + by))


def merge(p: Plan, results: Sequence[Result]) -> Result:
    """One Result for the whole document from its parts' results (in window order)."""
    d = p.document
    if p.windows is None:
        result = results[0]
        result.coverage = p.coverage[0]
        result.warnings = list(result.warnings) + p.notes
        return result
    windows = p.windows
    raw: list[str] = []
    warnings = [f"read in {len(windows)} overlapping windows (long-text window mode)"]
    found: list[tuple[int, Span, bool]] = []                # (window, span in whole-text offsets, at a hard cut)
    for k, (w, r) in enumerate(zip(windows, results)):
        raw += r.raw or []
        warnings += [f"window {k + 1} of {len(windows)} (characters {w.start}–{w.end}): {x}" for x in r.warnings]
        for tup in r.tuples:
            for s in tup:
                s = _moved(s, w.start)
                edge = s.offset is not None and ((w.cut_before and s.offset[0] == w.start)
                                                  or (w.cut_after and s.offset[1] == w.end))
                found.append((k, s, edge))
    whole = [(k, s) for k, s, edge in found if not edge and s.offset is not None]
    spans: list[Span] = []
    seen: set[tuple] = set()
    for k, s, edge in found:
        if edge and any(o.type == s.type and j != k and o.offset[0] < s.offset[1] and s.offset[0] < o.offset[1]
                        for j, o in whole):
            continue                                        # a piece of a span another window saw whole
        key = (s.type, s.offset) if s.offset is not None else (s.type, s.span, s.grounded)
        if key not in seen:                                 # the overlap's spans come from both windows: once
            seen.add(key)
            spans.append(s)
    coverage = merge_ranges(((a + w.start, b + w.start) for w, part in zip(windows, p.coverage) for a, b in part),
                            d.text)
    return Result(d.id, [[s] for s in spans], raw, warnings + p.notes, coverage)


def read(documents: Sequence[Document], run: Callable[[list[Document]], Iterator[Result]], tokenizer,
         mode: str = "truncate", markers: str = "zh", label_batch: int = 6,
         on_progress: Callable[[int], None] | None = None, max_prompt_tokens: int = MAX_PROMPT_TOKENS,
         overlap: int = OVERLAP_TOKENS, clock=None) -> Iterator[Result]:
    """Results in input order, with coverage: the documents' parts go to `run` (the pipeline) as one stream,
    so windows of different documents batch together, and each document is merged once its parts are back.
    Planning (tokenizing for coverage and windows) is timed as the run's "prepare" stage when given a clock."""
    if mode not in MODES:
        raise InputError(f"unknown long-text mode {mode!r}; use 'truncate' (the reference: keep the last "
                         f"{MAX_PROMPT_TOKENS} prompt tokens) or 'window' (read all of the text in windows)")
    with clock.stage("prepare") if clock is not None else nullcontext():
        plans = [plan(d, tokenizer, mode, markers, label_batch, max_prompt_tokens, overlap) for d in documents]
        parts = [p.parts for p in plans]
    stream = run([part for each in parts for part in each])
    for done, (p, each) in enumerate(zip(plans, parts), 1):
        yield merge(p, [next(stream) for _ in each])
        if on_progress:
            on_progress(done)
    # Run the stream to its end: the pipeline counts the run's tokens and retires its pools after its last
    # result, and a generator left suspended there never does (History showed such runs with 0 tokens).
    for extra in stream:
        raise RuntimeError(f"the pipeline gave a result for {extra.document_id!r} beyond the documents' parts")
