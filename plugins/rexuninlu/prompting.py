"""Schema -> hints -> windows -> model inputs (docs/models/rexuninlu.md §2).

Project decision on top of the reference: no shuffling. Prefixes are packed in discovery order
and types sorted by codepoint, which is what the reference does when `random.shuffle` is a no-op.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from contracts.domain import InputError

PREFIX, TYPE, CLASSIFY, MULTICLASSIFY = "[PREFIX]", "[TYPE]", "[CLASSIFY]", "[MULTICLASSIFY]"
MAX_LEN, STRIDE, HINT_MAX_LEN, PREFIX_MAX_LEN, TYPE_MAX_LEN = 512, 32, 256, 125, 125

# A prefix tuple is a path of extracted elements: (type, span, (start, end)[, confidence]).
PrefixTuple = tuple


# ---------------------------------------------------------------- schema

def validate_schema(schema: Any, line: int | None = None, path: str = "schema") -> None:
    """A schema is a non-empty object of type names -> None / {} / a nested schema."""
    if not isinstance(schema, dict):
        raise InputError(f"{path} must be a JSON object mapping type names to null or a nested object, "
                         f"got {type(schema).__name__}", line)
    if not schema:
        raise InputError(f"{path} is empty; give at least one type, e.g. {{\"人物\": null}}", line)
    for key, sub in schema.items():
        if not isinstance(key, str) or not key.strip():
            raise InputError(f"{path} has a blank or non-string key {key!r}", line)
        for token in (PREFIX, TYPE, CLASSIFY, MULTICLASSIFY):
            if token in key:
                raise InputError(f"{path} key {key!r} contains the reserved token {token}, "
                                 "which would corrupt the prompt", line)
        if sub is None or sub == {}:
            continue
        validate_schema(sub, line, f"{path}[{key!r}]")


def validate_text(text: Any, line: int | None = None) -> None:
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}", line)
    for token in (PREFIX, TYPE):
        if token in text:
            raise InputError(f"text contains the reserved token {token}, which would corrupt the prompt", line)
    if CLASSIFY in text and MULTICLASSIFY in text:
        raise InputError(f"text contains both {CLASSIFY} and {MULTICLASSIFY}; use one", line)


def legal_paths(schema: dict) -> set[tuple[str, ...]]:
    """Root-to-leaf type paths: only full paths are output (a bare relation subject is not)."""
    # A loop, not a nested function calling itself: such a function holds itself through its closure, a cycle
    # that only a full collection frees, and a server running pass after pass grew by it (docs/benchmarks.md).
    paths: set[tuple[str, ...]] = set()
    stack = [(schema, ())]
    while stack:
        node, prefix = stack.pop()
        if not node:
            paths.add(prefix)
        else:
            stack.extend((sub, (*prefix, key)) for key, sub in node.items())
    return paths


def task_kind(text: str) -> str:
    if CLASSIFY in text:
        return "cls"
    if MULTICLASSIFY in text:
        return "multi_cls"
    return "no_cls"


# ---------------------------------------------------------------- hints

@dataclass
class Hint:
    text: str
    # (prefix_tuple, type) -> character index of that type's [TYPE] token inside `text`
    type_chars: dict[tuple[PrefixTuple, str], int] = field(default_factory=dict)


Layout = tuple[list[int], list[int], list[int]]          # positions, groups, types (Prompter.layout)
# The same as int64 arrays: what a Window holds, read by WindowScorer.fill without a per-token loop.
ArrayLayout = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Head:
    """[CLS] hint [SEP] of one hint, and the layout its windows share when the hint holds no [SEP]: a
    window of n tokens has the first n of `padded` (its text continues the positions as global tokens).
    The arrays are read-only: windows hold views of them."""

    ids: list[int]
    offsets: list[tuple[int, int]]
    padded: ArrayLayout | None


@dataclass
class Encoded:
    """Every window of one text under one hint (Prompter.encode)."""

    n_hint: int                                  # tokens before the text: [CLS] hint [SEP]
    ids: list[list[int]]
    offsets: list[list[tuple[int, int]]]
    padded: ArrayLayout | None                   # the hint's padded layout, None where windows need `layout`


@dataclass(frozen=True)
class Vocabulary:
    """What prompting needs of the tokenizer: its Rust backend (a `tokenizers.Tokenizer`) and the ids of the special
    and prompt tokens. It pickles without transformers or torch, so a host worker process (workers.py) gets it whole
    and starts without importing either: importing them took each worker seconds, inside the run that waited."""

    rust: Any
    cls_id: int
    sep_id: int
    pad_id: int
    prefix_id: int
    type_id: int
    classify_id: int
    multi_id: int
    split_special_tokens: bool = False      # transformers' switch, set on the backend before each call

    @classmethod
    def of(cls, tokenizer) -> "Vocabulary":
        """From a transformers fast tokenizer (loading.load_tokenizer), sharing its backend."""
        return cls(tokenizer.backend_tokenizer, tokenizer.cls_token_id, tokenizer.sep_token_id,
                   tokenizer.pad_token_id, *tokenizer.convert_tokens_to_ids([PREFIX, TYPE, CLASSIFY, MULTICLASSIFY]),
                   bool(getattr(tokenizer, "split_special_tokens", False)))


class Prompter:
    """Tokenizer-bound prompt building. Token counts are cached: schemas repeat across documents."""

    def __init__(self, vocabulary: Vocabulary):
        self.vocabulary = v = vocabulary
        self.cls_id, self.sep_id, self.pad_id = v.cls_id, v.sep_id, v.pad_id
        self.prefix_id, self.type_id, self.classify_id, self.multi_id = v.prefix_id, v.type_id, v.classify_id, v.multi_id
        self._prompt_ids = frozenset((self.prefix_id, self.type_id))
        self.token_count = lru_cache(maxsize=65536)(self._token_count)
        self._pieces: dict[str, tuple] = {}
        self._long: dict[str, tuple] = {}
        # A fast tokenizer must not be called from two threads at once (its Rust state is borrowed
        # mutably per call); the prefetch thread and the main thread both tokenize.
        self._tok_lock = threading.Lock()
        # The Rust backend, called directly: transformers' wrapping of each result in dicts and lists costs host
        # time per document.
        self._rust = v.rust
        self.head_layout = lru_cache(maxsize=4096)(self._head_layout)
        self.head = lru_cache(maxsize=4096)(self._head)                # hints repeat across documents
        self.first_hints = lru_cache(maxsize=1024)(self._first_hints)

    def _token_count(self, s: str) -> int:
        with self._tok_lock:
            self._settle_rust()
            # [CLS] s [SEP], as transformers' `tok(s)` gives it, less one: the tokens + 1 (the [PREFIX]/[TYPE] in front)
            return len(self._rust.encode(s).ids) - 1

    def hints(self, level_map: dict[PrefixTuple, dict]) -> list[Hint]:
        """Pack every (prefix, type) of one level into hints of at most 256 tokens (docs/models/rexuninlu.md §2.3).

        The first level's hints depend only on the schema's type names, which repeat across documents:
        they are made once and shared (Hints are only read after this)."""
        if len(level_map) == 1 and () in level_map:         # the first level: the empty prefix alone
            return list(self.first_hints(tuple(level_map[()])))
        return self._hints(level_map)

    def _first_hints(self, types: tuple[str, ...]) -> list[Hint]:
        return self._hints({(): dict.fromkeys(types)})

    def _hints(self, level_map: dict[PrefixTuple, dict]) -> list[Hint]:
        hints: list[Hint] = []
        hint = Hint("")
        n = 2                                               # [CLS] + [SEP]
        for prefix in level_map:
            ps = ",".join(f"{e[0]}: {e[1]}" for e in prefix)
            lp = self.token_count(ps)
            if lp > PREFIX_MAX_LEN:
                continue                                    # the reference drops over-long prefixes silently
            first = True
            for t in sorted(level_map[prefix]):
                lt = self.token_count(t)
                if lt > TYPE_MAX_LEN:
                    continue
                if (first and n + lp + lt > HINT_MAX_LEN) or (not first and n + lt > HINT_MAX_LEN):
                    if hint.text:
                        hints.append(hint)
                    hint = Hint(PREFIX + ps)
                    n = 2 + lp + lt
                else:
                    if first:
                        hint.text += PREFIX + ps
                    n += (lp if first else 0) + lt
                hint.type_chars[(prefix, t)] = len(hint.text)
                hint.text += TYPE + t
                first = False
        if hint.text:
            hints.append(hint)
        return hints

    # ------------------------------------------------------------ windows

    def encode(self, hint: str, text: str, kind: str) -> Encoded:
        """[CLS] hint [SEP] text-window [SEP] for every window of `text` (docs/models/rexuninlu.md §2.4).

        Same windows as `tok(hint, text, truncation="only_second", max_length=512, stride=...,
        return_overflowing_tokens=True)` gives in the reference's tokenizers: text windows of
        512 - 3 - len(hint) tokens starting every (that - stride) tokens until the text is covered.
        Built by hand because tokenizers 0.23 returns only the first overflow window.
        """
        head = self.head(hint)
        t_ids, t_offs = self.pieces(text)
        budget = MAX_LEN - 1 - len(head.ids)
        step = budget - (STRIDE if kind == "no_cls" else 0)
        spans = []
        for start in range(0, max(len(t_ids), 1), step):
            stop = min(start + budget, len(t_ids))
            spans.append((start, stop))
            if stop == len(t_ids):
                break
        plain = head.padded is not None and self._prompt_ids.isdisjoint(t_ids)
        return Encoded(len(head.ids), [[*head.ids, *t_ids[a:b], self.sep_id] for a, b in spans],
                       [[*head.offsets, *t_offs[a:b], (0, 0)] for a, b in spans], head.padded if plain else None)

    def _head(self, hint: str) -> Head:
        h_ids, h_offs = self._tokenize(hint)
        ids = [self.cls_id, *h_ids, self.sep_id]
        n_head = ids.index(self.sep_id)
        if ids[1:2] != [self.prefix_id] or not self._prompt_ids.isdisjoint(ids[n_head:]):
            return Head(ids, [(0, 0), *h_offs, (0, 0)], None)     # laid out window by window (`layout`)
        pos, grp, typ = self.head_layout(tuple(ids[:n_head]))
        nxt, rest = max(pos) + 1, MAX_LEN                           # no window is longer than MAX_LEN
        padded = read_only(([*pos, *range(nxt, nxt + rest)], [*grp, *[-1] * rest], [*typ, *[0] * rest]))
        return Head(ids, [(0, 0), *h_offs, (0, 0)], padded)

    def window_layout(self, enc: Encoded, ids: list[int]) -> ArrayLayout:
        """`layout(ids)` of one window of `enc`, as arrays: views of its hint's padded layout where that holds."""
        if enc.padded is None:
            return read_only(self.layout(ids))
        n = len(ids)
        pos, grp, typ = enc.padded
        return pos[:n], grp[:n], typ[:n]

    def pieces(self, s: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and character offsets of `s` alone (no special tokens)."""
        found = self._pieces.get(s)
        if found is None:
            found = self._long.get(s) or self._tokenize(s)
            if len(s) > 1000:                               # long texts are re-read for every hint
                self._long = {s: found}
        return found

    def _tokenize(self, s: str) -> tuple[list[int], list[tuple[int, int]]]:
        return self._tokenize_all([s])[0]

    def _tokenize_all(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Ids and offsets of each text, as `tok(texts, add_special_tokens=False, return_offsets_mapping=True)`
        gives them; one call, which the Rust tokenizer runs in parallel."""
        with self._tok_lock:
            self._settle_rust()
            encodings = self._rust.encode_batch(texts, add_special_tokens=False)
        return [(e.ids, e.offsets) for e in encodings]

    def _settle_rust(self) -> None:
        """Set the Rust tokenizer as transformers sets it before such a call: an earlier call through the
        transformers tokenizer that shares it, with truncation or padding, leaves those switched on."""
        rust, split = self._rust, self.vocabulary.split_special_tokens
        if rust.truncation is not None:
            rust.no_truncation()
        if rust.padding is not None:
            rust.no_padding()
        if rust.encode_special_tokens != split:
            rust.encode_special_tokens = split

    def prefetch(self, texts: list[str]) -> None:
        """Tokenize many texts in one call (the Rust tokenizer runs them in parallel). Several
        groups of documents may be prefetched at once (a prefetch thread prepares the next group)."""
        texts = [t for t in dict.fromkeys(texts) if t and t not in self._pieces]
        if texts:
            self._pieces.update(zip(texts, self._tokenize_all(texts)))

    def forget(self, texts: list[str]) -> None:
        for t in texts:
            self._pieces.pop(t, None)

    def layout(self, ids: list[int]) -> Layout:
        """Position ids and the isolation structure of one window (docs/models/rexuninlu.md §2.5–2.6).

        grp[i]: the prefix group of a hint token, -1 for global tokens ([CLS], [SEP], text);
        typ[i]: 0 for a prefix-span token, k >= 1 for the k-th type span of its group.
        Every group restarts at position 1, every type span at 1 + len(prefix span);
        the text region (from the first [SEP]) continues after the largest hint position.
        """
        n_head = ids.index(self.sep_id)
        if self.prefix_id in ids[n_head:] or self.type_id in ids[n_head:]:
            return self.reference_layout(ids)               # a [SEP] inside the hint
        pos, grp, typ = self.head_layout(tuple(ids[:n_head]))
        nxt, rest = max(pos) + 1, len(ids) - n_head
        return list(pos) + list(range(nxt, nxt + rest)), list(grp) + [-1] * rest, list(typ) + [0] * rest

    def _head_layout(self, head: tuple[int, ...]) -> tuple[tuple, tuple, tuple]:
        """Layout of [CLS] + hint; the same for every window of a hint, so it is cached."""
        if len(head) < 2 or head[0] != self.cls_id or head[1] != self.prefix_id:
            raise ValueError("a window must start with [CLS][PREFIX]")
        pos, grp, typ = [0], [-1], [0]
        group, ntype, prefix_len, span_len, in_prefix = -1, 0, 0, 0, True
        for t in head[1:]:
            if t == self.prefix_id:
                group, ntype, prefix_len, in_prefix = group + 1, 0, 1, True
                pos.append(1)
            elif t == self.type_id:
                ntype, span_len, in_prefix = ntype + 1, 1, False
                pos.append(1 + prefix_len)
            elif in_prefix:
                prefix_len += 1
                pos.append(prefix_len)
            else:
                span_len += 1
                pos.append(prefix_len + span_len)
            grp.append(group)
            typ.append(0 if in_prefix else ntype)
        return tuple(pos), tuple(grp), tuple(typ)

    def reference_layout(self, ids: list[int]) -> tuple[list[int], list[int], list[int]]:
        """Port of the reference's build_position_ids_attn_mask, for hints holding a [SEP] token
        (a schema key with "[SEP]", or a prefix span cut from a text that contains "[SEP]").

        The reference sends every [SEP], and the tokens after it up to the next [PREFIX]/[TYPE],
        to the text segment, then lists positions segment by segment (cls, groups, text) rather
        than in token order; its mask blanks whole index ranges (group: [PREFIX] .. last token of
        its last type span; type: [TYPE] .. its last token). Reproduced here as-is.
        """
        if len(ids) < 2 or ids[0] != self.cls_id or ids[1] != self.prefix_id:
            raise ValueError("a window must start with [CLS][PREFIX]")
        groups: list[tuple[list[int], list[list[int]]]] = []
        text: list[int] = []
        last = self.prefix_id
        for i, t in enumerate(ids[1:], 1):
            if t == self.prefix_id:
                groups.append(([i], []))
                last = t
            elif t == self.type_id:
                groups[-1][1].append([i])
                last = t
            elif t == self.sep_id or last == self.sep_id:
                text.append(i)
                last = self.sep_id
            elif last == self.prefix_id:
                groups[-1][0].append(i)
            else:
                groups[-1][1][-1].append(i)
        pos = [0]
        for span, types in groups:
            pos += range(1, 1 + len(span))
            for t_span in types:
                pos += range(1 + len(span), 1 + len(span) + len(t_span))
        nxt = max(pos) + 1
        pos += range(nxt, nxt + len(text))
        grp, typ = [-1] * len(ids), [0] * len(ids)
        for g, (span, types) in enumerate(groups):
            if not types:
                continue
            for i in range(span[0], types[-1][-1] + 1):
                grp[i] = g
            for k, t_span in enumerate(types, 1):
                for i in range(t_span[0], t_span[-1] + 1):
                    typ[i] = k
        return pos, grp, typ


def read_only(layout: Layout) -> ArrayLayout:
    pos, grp, typ = (np.array(x, np.int64) for x in layout)
    for a in (pos, grp, typ):
        a.flags.writeable = False
    return pos, grp, typ


def allowed(grp_q: int, typ_q: int, grp_k: int, typ_k: int) -> bool:
    """The prompt-isolation rule (closed form of the reference mask)."""
    return grp_q < 0 or grp_k < 0 or (grp_q == grp_k and (typ_q == typ_k or typ_q == 0 or typ_k == 0))
