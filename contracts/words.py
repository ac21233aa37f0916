"""Counted nouns in messages, worded the same on every surface: "1 document", "3 documents", "1 run was"."""
from __future__ import annotations


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`1 span`, `3 spans`, `0 spans`, `1,200 spans`; `nouns` for an irregular plural."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def agree(n: int, one: str, many: str) -> str:
    """The word that agrees with a count: agree(1, "was", "were") is "was"."""
    return one if n == 1 else many
