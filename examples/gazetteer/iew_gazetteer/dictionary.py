"""Dictionary matching: every entry of every type in one Aho–Corasick automaton (pyahocorasick).

The automaton is built once, when the model loads, on case-folded entries; a run that must respect case
checks each hit against the entry as written. Hits are all occurrences (overlapping ones too); the
model chooses among them (family.py). An entry that begins or ends with a letter or digit of a
space-separated script matches only on a word boundary there ("UN" is not found in "UNESCO" or "fun"),
while Chinese, Japanese and Korean text has no spaces, so a CJK end of an entry needs no boundary.

Offsets are Python string indices (code points): pyahocorasick's unicode build indexes the text the
same way, so an emoji or other astral character counts as one.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator

import ahocorasick

from contracts import WeightsError

COMMENT = "#"


def fold(text: str) -> str:
    """Lower case with the length kept, so offsets into the folded text are offsets into the text."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)   # "İ".lower() is two characters


def is_cjk(c: str) -> bool:
    o = ord(c)
    return (0x2E80 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF
            or 0xFF66 <= o <= 0xFF9F or 0x20000 <= o <= 0x3FFFF)


def is_word(c: str) -> bool:
    """A letter or digit of a space-separated script: one that must not touch an entry's matching end."""
    return (c.isalnum() or c == "_") and not is_cjk(c)


def read_entries(text: str) -> list[str]:
    """The entries of a dictionary file: one a line, stripped; blank lines and # comments left out."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith(COMMENT)]


def read_folder(folder: Path) -> dict[str, list[str]]:
    """type -> entries of a user dictionary folder: one TYPE.txt per type (UTF-8), the file name is the type.
    Other files and sub-folders are ignored, so a README may sit beside the dictionaries."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.txt")):
        if not path.is_file():
            continue
        try:
            text = path.read_text("utf-8-sig")
        except UnicodeDecodeError as e:
            line = path.read_bytes()[:e.start].count(b"\n") + 1
            raise WeightsError(f"{path}: line {line} is not UTF-8 text; save the dictionary as UTF-8") from None
        except OSError as e:
            raise WeightsError(f"{path} could not be read: {e}") from None
        found[path.stem] = read_entries(text)
    return found


def builtin_entries(type_id: str) -> list[str]:
    """The entries of a dictionary shipped with the package (iew_gazetteer/dictionaries/TYPE.txt)."""
    return read_entries((resources.files(__package__) / "dictionaries" / f"{type_id}.txt").read_text("utf-8"))


@dataclass(frozen=True)
class Hit:
    start: int
    end: int
    type_id: str


@dataclass
class Dictionary:
    """Entries by type, compiled into one automaton. Read-only once built, so runs may share it."""

    entries: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    _automaton: ahocorasick.Automaton | None = None

    def add(self, type_id: str, entries: Iterable[str]) -> None:
        self.entries[type_id].update(e for e in entries if e)
        self._automaton = None

    def build(self) -> "Dictionary":
        automaton = ahocorasick.Automaton()
        forms: dict[str, list[tuple[str, str]]] = defaultdict(list)    # folded entry -> (entry, type)
        for type_id, entries in self.entries.items():
            for entry in entries:
                forms[fold(entry)].append((entry, type_id))
        for key, value in forms.items():
            automaton.add_word(key, sorted(value))
        if forms:
            automaton.make_automaton()
        self._automaton = automaton
        return self

    def types(self) -> dict[str, int]:
        """type -> how many entries it has."""
        return {t: len(e) for t, e in sorted(self.entries.items())}

    def find(self, text: str, ignore_case: bool = False) -> Iterator[Hit]:
        """Every occurrence of every entry (overlaps included) that respects case (unless ignored) and word
        boundaries."""
        automaton = self._automaton if self._automaton is not None else self.build()._automaton
        if automaton.kind == ahocorasick.EMPTY:
            return
        for last, value in automaton.iter(fold(text)):
            end = last + 1
            for entry, type_id in value:
                start = end - len(entry)
                if not ignore_case and text[start:end] != entry:
                    continue
                if is_word(entry[0]) and start > 0 and is_word(text[start - 1]):
                    continue
                if is_word(entry[-1]) and end < len(text) and is_word(text[end]):
                    continue
                yield Hit(start, end, type_id)
