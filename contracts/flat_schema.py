"""A flat schema with aliases: what a model that finds named types (dictionaries, patterns, a tokenizer's
tags) reads, such as {"日期": null, "city": null}.

Each type a schema may ask for is a `SchemaType`: an id, the names people write for it (Chinese and English,
say; matched case-insensitively) and the type ids it selects (a composite "location" selects country,
province and city). `FlatSchema` checks a document's schema in two steps, because which names exist may
depend on what a loaded model read (user dictionaries):

- `check_shape(document)` from `ModelFamily.validate`: a non-empty JSON object, every key a name, every
  value null; the error names the line and shows an example;
- `select(document)` from the loaded model: each key as written, with the type ids it selects, or one
  error listing the unknown keys and every known name.

Spans then carry the key as the schema wrote it, so a person sees their own word back.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from contracts.domain import Document, InputError


def fold(name: str) -> str:
    """How names compare: surrounding blanks and case do not matter ("City", " city")."""
    return name.strip().casefold()


@dataclass(frozen=True)
class SchemaType:
    """A type a schema may name: its id, the names people write for it, the type ids it selects."""

    id: str
    names: tuple[str, ...] = ()              # aliases besides the id, such as ("日期",); the first is shown first
    covers: frozenset[str] = field(default=frozenset())   # type ids it selects; empty: only its own id

    @property
    def selects(self) -> frozenset[str]:
        return self.covers or frozenset((self.id,))

    @property
    def title(self) -> str:
        """Its names for an error message: "日期/date"."""
        return "/".join(dict.fromkeys((*self.names, self.id)))


class FlatSchema:
    """The types a flat schema may name, looked up by any of their names."""

    def __init__(self, types: Iterable[SchemaType], example: str = '{"date": null}'):
        self.types: list[SchemaType] = []
        self.example = example
        self._by_name: dict[str, SchemaType] = {}
        for schema_type in types:
            self.add(schema_type)

    def add(self, schema_type: SchemaType) -> None:
        """A type with all its names; a name already taken keeps its first type (a built-in wins)."""
        self.types.append(schema_type)
        for name in (schema_type.id, *schema_type.names):
            self._by_name.setdefault(fold(name), schema_type)

    def find(self, name: str) -> SchemaType | None:
        return self._by_name.get(fold(name))

    def extended(self, types: Iterable[SchemaType]) -> "FlatSchema":
        """A copy with more types (those a loaded model found in its weights folder, say)."""
        copy = FlatSchema(self.types, self.example)
        for schema_type in types:
            copy.add(schema_type)
        return copy

    def known(self) -> str:
        return ", ".join(dict.fromkeys(t.title for t in self.types))

    def check_shape(self, document: Document) -> None:
        """A non-empty JSON object of names, every value null; InputError with the document's line if not."""
        schema, line = document.schema, document.line
        if schema is None:
            raise InputError(f'no schema: give "schema" in the line or --schema, such as {self.example}', line)
        if not isinstance(schema, dict) or not schema:
            raise InputError(f"the schema must be a non-empty JSON object of types, such as {self.example}", line)
        for name, value in schema.items():
            if not isinstance(name, str) or not name.strip():
                raise InputError(f"schema type {name!r} is not a name", line)
            if value is not None:
                raise InputError(f"schema type {name!r} has a nested value: this model reads a flat schema "
                                 f"(every value null), such as {self.example}", line)

    def select(self, document: Document, where: str = "") -> list[tuple[str, frozenset[str]]]:
        """(key as written, the type ids it selects) for each key of the document's schema, in order; an
        InputError naming every unknown key and the known names (`where` adds where more names came from)."""
        unknown = [name for name in document.schema if self.find(name) is None]
        if unknown:
            raise InputError(f"unknown type(s) {', '.join(map(repr, unknown))} in the schema of document "
                             f"{document.id!r}; known: {self.known()}{where}", document.line)
        return [(name, self.find(name).selects) for name in document.schema]
