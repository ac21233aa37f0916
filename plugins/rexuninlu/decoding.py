"""Model outputs of one window -> typed spans (docs/models/rexuninlu.md §3). Pure functions over link lists.

Links (threshold logit > 0), with nh the first text token:
  span (r, c):  r, c >= nh and r <= c      -> head r, tail c
  head link:    r >= nh, c a [TYPE] token   -> heads[type] gets r
  tail link:    r a [TYPE] token, c >= nh   -> tails[type] gets c
A span is typed T when its head links to T and T links to its tail.
Its confidence is the weakest of those three links (span, head, tail) as a probability, so it is > 0.5
exactly when the span is accepted; a classification label keeps the reference's own confidence.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from contracts.domain import Span
from plugins.rexuninlu.prompting import Hint

INFOKEY = "[INFOKEY]"


@dataclass
class Window:
    """One model input: [CLS] hint [SEP] text-window [SEP], and what decoding needs to read it back."""

    ids: list[int]                 # (an int32 array in the copy a host worker hands the device's process)
    positions: Sequence[int]       # these three: read-only int64 arrays cut from the hint's layout
    groups: Sequence[int]          # (Prompter.window_layout), or lists
    types: Sequence[int]
    offsets: list[tuple[int, int]]
    n_hint: int                    # index of the first text token
    hint: Hint
    text: str                      # the text as it stood for this window (cls windows mutate it)
    need_probs: bool = False


@dataclass
class TypedHits:
    """One window's spans paired on the device: (head, tail, [TYPE] token) rows [n, 3] and their confidences [n].
    Arrays, so that handing them to a host worker costs a copy, not a pickled tuple per span; iterating gives
    (head, tail, [TYPE] token, confidence to 4 places), the form decoding reads."""

    tokens: np.ndarray
    confidence: np.ndarray

    def __iter__(self):
        return zip(*self.tokens.T.tolist(), to_4_places(self.confidence))

    def __len__(self) -> int:
        return len(self.confidence)


def to_4_places(probabilities: np.ndarray) -> list[float]:
    """[round(p, 4) for p in probabilities], to the last bit, with array operations (on dense outputs Python's
    round cost more than the rest of the read-back).

    round(p, 4) is the double nearest to k / 10^4, k the integer nearest to p * 10^4 exactly (ties to even).
    Here p * 1e4 is rounded to a double first, off the exact product by at most half an ulp (under 1e-12
    while |p| <= 1), so its rint is that k unless it lies that close to a half; k / 1e4, an IEEE division,
    is the nearest double again. The few values near a half take round() itself, as does anything that is
    not a probability."""
    p = np.asarray(probabilities, np.float64)
    scaled = np.where(np.abs(p) <= 1, p, np.nan) * 1e4        # not a probability: NaN, so unsure below
    k = np.rint(scaled)
    out = (k / 1e4).tolist()
    for i in np.flatnonzero(~(np.abs(scaled - k) <= 0.4999)).tolist():
        out[i] = round(float(p[i]), 4)
    return out


@dataclass
class Links:
    rows: list[int]                # positive entries of logits, row-major
    cols: list[int]
    probs: np.ndarray | None       # [n, n] float32 sigmoid(logits), for classification windows
    # Extraction windows scored on a device: the typed spans (head, tail, [TYPE] token, confidence)
    # already paired there, in decoding's order. None: pair them here from rows/cols.
    typed: TypedHits | list[tuple[int, int, int, float]] | None = None
    # sigmoid of each (row, col) link, for the confidences of spans paired here. None: no confidences.
    link_probs: list[float] | None = None


def type_tokens(window: Window) -> dict[int, tuple]:
    """token index of each registered [TYPE] -> (prefix_tuple, type)."""
    char_to_token: dict[int, int] = {}
    for i in range(window.n_hint):
        char_to_token[window.offsets[i][0]] = i      # (0,0) of [CLS]/[SEP] is overwritten harmlessly
    return {char_to_token[c]: key for key, c in window.hint.type_chars.items()}


def _link_maps(window: Window, links: Links):
    nh = window.n_hint
    token_type = type_tokens(window)
    heads, tails = defaultdict(set), defaultdict(set)      # the reference's lists, as sets: same test
    spans = []
    for r, c in zip(links.rows, links.cols):
        if r >= nh and c >= nh and r <= c:
            spans.append((r, c))
        if c < nh and r >= nh and c in token_type:
            heads[token_type[c]].add(r)
        if c >= nh and r < nh and r in token_type:
            tails[token_type[r]].add(c)
    return spans, heads, tails


def _char_span(window: Window, head: int, tail: int) -> tuple[int, int] | None:
    text = window.text
    a, b = window.offsets[head][0], window.offsets[tail][1]
    try:
        while text[a] == " ":
            a += 1
    except IndexError:                               # the reference skips such spans
        return None
    return a, b


def _matches(window: Window, candidates, heads, tails, blank: bool = False):
    """(head, tail, prefix, type, (a, b)) for each candidate span linked to a registered type, in
    the reference's order: spans row-major, then types in hint order."""
    for head, tail in candidates:
        for key in window.hint.type_chars:
            if not blank and not (head in heads[key] and tail in tails[key]):
                continue
            ab = _char_span(window, head, tail)
            if ab is not None:
                yield head, tail, key[0], key[1], ab


def _weakest_link(probs: dict, head: int, tail: int, t_tok: int) -> float:
    """A span's confidence from its links' probabilities: the span, head and tail links decoding required."""
    return round(min(probs[head, tail], probs[head, t_tok], probs[t_tok, tail]), 4)


def _typed_hits(window: Window, links: Links) -> Iterable[tuple[int, int, int, float | None]]:
    """(head, tail, [TYPE] token, confidence) of each typed span, in decoding's order: the device-paired hits
    as they came, or paired here from rows/cols. The confidence is None when the links came without probabilities."""
    if links.typed is not None:
        return links.typed
    spans, heads, tails = _link_maps(window, links)
    probs = None if links.link_probs is None else dict(zip(zip(links.rows, links.cols), links.link_probs))
    token_of = {key: tok for tok, key in type_tokens(window).items()}
    return [(head, tail, tok := token_of[prefix, t], None if probs is None else _weakest_link(probs, head, tail, tok))
            for head, tail, prefix, t, _ in _matches(window, spans, heads, tails)]


def _kind(key: tuple, level_map: dict, legal: set, confidences: dict) -> tuple:
    """What every span of one (prefix, type) shares: (type, sub-schema, the prefix's elements as Spans, whether
    the full type path is one the schema asks for, prefix). A prefix's confidence is from an earlier level:
    fixed here."""
    prefix, t = key
    head = [Span(e[0].strip(), e[1], tuple(e[2]), confidences.get(prefix[:i + 1])) for i, e in enumerate(prefix)]
    return t, level_map[prefix][t], head, tuple(s.type for s in head) + (t,) in legal, prefix


def decode_spans(window: Window, links: Links, level_map: dict, legal: set, next_map: dict,
                 confidences: dict | None = None) -> list[list[Span]]:
    """Extraction windows: typed spans as output tuples; spans with a sub-schema go to next_map.

    `confidences` (kept by the caller across schema levels): path -> confidence of the path's last
    element, for the spans that become prefixes. A relation's or event's elements each carry the
    confidence of the window that extracted them; a prefix found by several overlapping windows runs the
    next level once, so it carries the highest of their confidences.
    """
    confidences = {} if confidences is None else confidences
    token_type, kinds = type_tokens(window), {}                     # [TYPE] token -> _kind, as they come
    offsets, text, out = window.offsets, window.text, []
    # A character read alone is a new string (but for Latin-1), so a text without spaces skips that test.
    n, spaced = len(text), " " in text
    # The hot loop of dense outputs (hundreds of spans per document): one pass, no per-span calls but the
    # Span's and, for a head on a space, _char_span, which resolves it exactly as the reference does.
    for head, tail, tok, conf in _typed_hits(window, links):
        kind = kinds.get(tok)
        if kind is None:
            key = token_type.get(tok)
            if key is None:                          # a [TYPE] token no type registered (never linked)
                continue
            kind = kinds[tok] = _kind(key, level_map, legal, confidences)
        a = offsets[head][0]
        if a >= n or spaced and text[a] == " ":
            ab = _char_span(window, head, tail)
            if ab is None:
                continue
            a = ab[0]
        b = offsets[tail][1]
        t, sub, head_spans, wanted, prefix = kind
        if sub:
            path = prefix + ((t, text[a:b], (a, b)),)
            next_map[path] = sub
            if conf is not None:
                confidences[path] = max(conf, confidences.get(path, conf))
        if wanted:
            out.append([*head_spans, Span(t, text[a:b], (a, b), conf)])
    return out


def _confidence(probs: np.ndarray, head: int, tail: int, t_tok: int) -> float:
    # The reference reads the transposed entries, sums three float32 scalars and rounds (float32 throughout in
    # numpy too: a Python int does not widen a float32 scalar).
    return round(((probs[tail, head] + probs[t_tok, head] + probs[tail, t_tok]) / 3).item(), 4)


def decode_classes(window: Window, links: Links, cls_token: str, level_map: dict, legal: set,
                   next_map: dict, found: dict[str, list], blank: bool = False) -> None:
    """Classification windows: candidates keyed by their type path go into `found`.

    blank=True is the reference's fallback when nothing was found: every [TYPE] is linked to
    the first text token (the cls token), and only the confidences decide.
    """
    nh = window.n_hint
    token_of = {key: tok for tok, key in type_tokens(window).items()}
    candidates, heads, tails = ([(nh, nh)], None, None) if blank else _link_maps(window, links)
    for head, tail, prefix, t, (a, b) in _matches(window, candidates, heads, tails, blank):
        span = window.text[a:b]
        conf = _confidence(links.probs, head, tail, token_of[(prefix, t)])
        if level_map[prefix][t]:
            next_map[prefix + ((t, span, (a, b), conf),)] = level_map[prefix][t]
        chain = [e for e in prefix if e[1] == cls_token]
        info = [{"type": e[0].strip(), "span": e[1], "offset": list(e[2]), "confidence": e[3]} for e in chain]
        info.append({"type": t, "span": span, "offset": [a, b], "confidence": conf})
        if tuple(i["type"] for i in info) in legal and span == cls_token:
            found[INFOKEY.join([e[0].strip() for e in chain] + [t])].append(info)


def best_of_hint(found: dict[str, list]) -> tuple[str, list[float]] | None:
    """Single-label: the candidate of one hint (key, confidences per path element)."""
    if not found:
        return None
    if len(found) == 1:
        key = next(iter(found))
        return key, [i["confidence"] for i in found[key][0]]
    means = {}
    for key, occurrences in found.items():
        cols = zip(*[[i["confidence"] for i in info] for info in occurrences])
        means[key] = [sum(c) / len(c) for c in cols]
    key = sorted(means.items(), key=lambda kv: sum(kv[1]), reverse=True)[0]
    return key[0], key[1]


def path_info(key: str, confidences: list[float], cls_token: str) -> list[dict[str, Any]]:
    return [{"type": t, "span": cls_token, "offset": [0, len(cls_token)], "confidence": c}
            for t, c in zip(key.split(INFOKEY), confidences)]


def multi_of_hint(found: dict[str, list], cls_token: str) -> list[list[dict]]:
    """Multi-label: every key's first occurrence."""
    return [path_info(key, [i["confidence"] for i in occ[0]], cls_token) for key, occ in found.items()]


def label_spans(preds: list[list[dict]]) -> list[list[Span]]:
    """Classification results (the reference's dicts) as output tuples. A label's confidence can be a mean
    over windows (best_of_hint), so it is rounded here like every span's."""
    return [[Span(e["type"], e["span"], tuple(e["offset"]), None if e.get("confidence") is None
                  else round(e["confidence"], 4)) for e in info] for info in preds]


def final_selection(preds: list[list[dict]], kind: str) -> list[list[dict]]:
    """prediction_step's last step: cls keeps the best mean, multi_cls those above 0.9 (else the best)."""
    if kind in ("cls", "multi_cls") and preds:
        means = [sum(i["confidence"] for i in p) / len(p) for p in preds]
        if kind == "cls":
            preds = [preds[means.index(max(means))]]
        else:
            keep = [i for i, m in enumerate(means) if m > 0.9] or [means.index(max(means))]
            preds = [p for i, p in enumerate(preds) if i in keep]
    return preds
