"""Annotate with the mouse: a small Streamlit component that draws a text with its spans and lets a person
select a range and give it a type by key or click, pick a span and delete or retype it, as Label Studio,
doccano and Prodigy do.

The frontend is one static page (`frontend/index.html`, plain JavaScript, no build step) speaking
Streamlit's component protocol. It sends one event per action; the host applies it to its own draft and
sends the new spans back, so the draft in session state stays the one source of truth.

JavaScript strings count UTF-16 code units, Python strings code points: a character outside the Basic
Multilingual Plane (an emoji, a rare CJK ideograph of Extension B) is two units there and one here. Offsets
cross the boundary through `Utf16`, in both directions.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit.components.v1 as components

from contracts.domain import InputError

_FRONTEND = Path(__file__).resolve().parent / "frontend"
_component = components.declare_component("span_picker", path=str(_FRONTEND))

SHORTCUT_DIGITS = 9                     # types 1..9 get a digit key


class Utf16:
    """Offsets of one text as Python str indices and as JavaScript (UTF-16) indices."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.length = len(text.encode("utf-16-le")) // 2
        # Only a text with astral characters needs a table: elsewhere both counts are the same.
        self._units: list[int] | None = None
        if self.length != len(text):
            units, n = [0], 0
            for ch in text:
                n += 2 if ord(ch) > 0xFFFF else 1
                units.append(n)
            self._units = units

    def to_js(self, index: int) -> int:
        """The UTF-16 offset of str index `index` (0 ≤ index ≤ len(text))."""
        if not 0 <= index <= len(self.text):
            raise InputError(f"offset {index} is outside the text (0..{len(self.text)})")
        return index if self._units is None else self._units[index]

    def to_str(self, unit: int, *, end: bool = False) -> int:
        """The str index of UTF-16 offset `unit`. An offset inside a surrogate pair (between the two halves of
        one character) moves to the character's start, or, for the `end` of a range, past it, so a range
        never cuts a character in two."""
        if isinstance(unit, bool) or not isinstance(unit, int) or not 0 <= unit <= self.length:
            raise InputError(f"offset {unit!r} is outside the text (0..{self.length} UTF-16 units)")
        if self._units is None:
            return unit
        i = bisect_left(self._units, unit)
        if self._units[i] != unit and not end:
            i -= 1
        return i


@dataclass(frozen=True)
class Shown:
    """One element of a draft tuple drawn over the text: where it is in the draft, its type, [start, end)."""

    tuple: int
    element: int
    type: str
    start: int
    end: int


@dataclass(frozen=True)
class Pick:
    """What the person did, in str offsets: add a span, remove or retype a shown one, or accept the draft."""

    id: str
    op: str                             # "add" | "remove" | "retype" | "accept"
    type: str | None = None
    start: int | None = None
    end: int | None = None
    target: Shown | None = None         # the shown span removed or retyped


def shortcuts(types: list[str]) -> list[list[str]]:
    """Each type's keys: its number for the first nine, and the first letter of its name (a-z) where no
    earlier type took that letter."""
    keys: list[list[str]] = []
    taken: set[str] = set()
    for n, t in enumerate(types):
        own = [str(n + 1)] if n < SHORTCUT_DIGITS else []
        first = t[:1].lower()
        if first.isascii() and first.isalpha() and first not in taken:
            taken.add(first)
            own.append(first)
        keys.append(own)
    return keys


def read_pick(event: Any, text: str, shown: list[Shown], types: list[str], applied: str | None = None) -> Pick | None:
    """The component's event as a Pick in str offsets; None for no event, or for the event whose id is
    `applied` (a component keeps returning its last value on every rerun, when the draft has already changed
    by it). A malformed event is an InputError naming what is wrong."""
    if not isinstance(event, dict) or not event.get("id") or str(event["id"]) == applied:
        return None
    op, pick_id = event.get("op"), str(event["id"])
    if op == "accept":
        return Pick(pick_id, op)
    if op == "add":
        index = Utf16(text)
        start, end = index.to_str(event.get("start")), index.to_str(event.get("end"), end=True)
        if start >= end:
            raise InputError("the selection is empty")
        kind = event.get("type")
        if kind not in types:
            raise InputError(f"type {kind!r} is not one of this document's types")
        return Pick(pick_id, op, kind, start, end)
    if op in ("remove", "retype"):
        n = event.get("span")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < len(shown):
            raise InputError(f"span {n!r} is no longer in the draft")
        kind = event.get("type") if op == "retype" else None
        if op == "retype" and not isinstance(kind, str):
            raise InputError("a retype needs a type")
        return Pick(pick_id, op, kind, target=shown[n])
    raise InputError(f"unknown span-picker action {op!r}")


def span_picker(text: str, shown: list[Shown], types: list[str], colors: dict[str, tuple[str, str]],
                levels: list[int], key: str, version: int) -> Any:
    """Draw the picker; returns its last event (a dict, UTF-16 offsets) or None. `colors`: per type, (fill,
    bar); `levels`: each shown span's underline level; `version` changes whenever the draft does, which tells
    the page to drop a selection it has sent."""
    index = Utf16(text)
    keys = shortcuts(types)
    return _component(
        text=text,
        spans=[{"type": s.type, "start": index.to_js(s.start), "end": index.to_js(s.end), "level": level,
                "title": f"extraction {s.tuple + 1}, element {s.element + 1}"} for s, level in zip(shown, levels)],
        types=[{"name": t, "keys": k} for t, k in zip(types, keys)],
        colors={t: list(c) for t, c in colors.items()},
        version=version, key=key, default=None)
