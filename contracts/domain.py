"""The shapes every model, the engine, storage and the UI agree on.

One `Result` shape for both models: a list of tuples, each tuple a list of typed
spans with [start, end) character offsets into the document text.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
import orjson


class InputError(ValueError):
    """Bad user input (schema, text, file). The message says what and where."""

    def __init__(self, message: str, line: int | None = None):
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


def require_text(document: "Document") -> None:
    """Project decision (docs/faithfulness.md): a blank text is refused, not run as the reference would."""
    if isinstance(document.text, str) and not document.text.strip():
        raise InputError(f"document {document.id!r} has no text (it is empty or only whitespace); "
                         "give the text to extract from", document.line)


class WeightsError(RuntimeError):
    """Missing, corrupt or mismatched model weights."""


class Span(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A typed span of a document's text, [start, end) in characters.

    A msgspec Struct: built in C (a dense document decodes hundreds of thousands of them), written as JSON with
    its unset confidence and grounded left out (`Result.output_json`), and left to reference counting (gc=False:
    it holds only strings and numbers, so it can be in no cycle, and a dense run no longer sets the cyclic
    collector off)."""

    type: str
    span: str
    offset: tuple[int, int] | None          # None: a generated span not found in the text, or a label
    confidence: float | None = None
    grounded: bool | None = None            # generative extraction: was the span found in the text?

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "span": self.span,
                               "offset": list(self.offset) if self.offset is not None else None}
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.grounded is not None:
            out["grounded"] = self.grounded
        return out

    @property
    def empty(self) -> bool:
        """A located span that covers no text. RexUniNLU's reference emits them as [start, 0] when a
        span's end falls on the final [SEP]; they are dropped (docs/faithfulness.md)."""
        return self.offset is not None and (self.offset[1] <= self.offset[0] or not self.span)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Span":
        off = d.get("offset")
        return cls(d["type"], d["span"], tuple(off) if off is not None else None, d.get("confidence"),
                   d.get("grounded"))


# An output (a list of tuples of spans) as JSON and back. msgspec writes what orjson writes for these values, to
# the byte, but for a float of 1e16 or more (a confidence is at most 1): orjson spells its exponent e+16.
_write_output = msgspec.json.Encoder().encode
read_output = msgspec.json.Decoder(list[list[Span]]).decode


@dataclass
class Document:
    """One input: text plus what to extract. `schema` drives RexUniNLU; `task`/`labels` drive SeqGPT."""

    id: str
    text: str
    schema: dict[str, Any] | None = None
    task: str | None = None
    labels: list[str] | None = None
    line: int | None = None                  # 1-based line of the input file, for error messages


@dataclass(slots=True)
class Result:
    document_id: str
    tuples: list[list[Span]] = field(default_factory=list)
    raw: list[str] | None = None             # generative models: the generated text per prompt chunk
    warnings: list[str] = field(default_factory=list)
    # The character ranges [start, end) of the text the model actually read, merged and sorted
    # (RexUniNLU: its windows; SeqGPT: the prompt's kept range). None: not reported by the model.
    coverage: list[tuple[int, int]] | None = None

    @property
    def tuple_count(self) -> int:
        return len(self.tuples)

    def without_empty_spans(self) -> "Result":
        """Project decision: a tuple that holds an empty span is no extraction, so it is dropped whole."""
        # One flat pass first: a document can hold thousands of spans and nearly always none is empty. Span.empty
        # is spelled out in it, because calling the property per span cost more than the rest of the test.
        if not any([(o := s.offset) is not None and (o[1] <= o[0] or not s.span) for t in self.tuples for s in t]):
            return self
        return replace(self, tuples=[t for t in self.tuples if not any(s.empty for s in t)])

    def output_json(self) -> bytes:
        """`to_json()["output"]` as compact JSON in UTF-8, not ASCII-escaped."""
        return _write_output(self.tuples)

    def output_json_text(self) -> str:
        """output_json() as text: what History stores."""
        return self.output_json().decode()

    def to_json(self) -> dict[str, Any]:
        return self._with_extras({"id": self.document_id, "output": [[s.to_json() for s in t] for t in self.tuples]})

    def to_json_line(self) -> bytes:
        """`to_json()` as compact JSON on one line (no newline), UTF-8, not ASCII-escaped: what the CLI and the
        API write as JSON Lines. orjson and msgspec, because on dense outputs json.dumps cost more than decoding.

        Laid out as orjson lays out to_json(), with the output's JSON put in whole: joining bytes copies them,
        where building to_json()'s dicts for a dense output would cost the writer as much as decoding it did."""
        extras = orjson.dumps(self._with_extras({}))[1:-1]
        return b"".join((b'{"id":', orjson.dumps(self.document_id), b',"output":', self.output_json(),
                         b"," if extras else b"", extras, b"}"))

    def to_json_text(self) -> str:
        """to_json_line() as text: what corpus runs store."""
        return self.to_json_line().decode()

    def _with_extras(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.raw is not None:
            out["raw"] = self.raw
        if self.warnings:
            out["warnings"] = self.warnings
        if self.coverage is not None:
            out["coverage"] = [list(r) for r in self.coverage]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Result":
        coverage = d.get("coverage")
        return cls(str(d["id"]), [[Span.from_json(s) for s in t] for t in d.get("output", [])],
                   d.get("raw"), list(d.get("warnings", [])),
                   [tuple(r) for r in coverage] if coverage is not None else None)


def unread(text: str, coverage: list[tuple[int, int]] | None) -> list[tuple[int, int]]:
    """The ranges [start, end) of `text` outside `coverage` that hold more than whitespace: what the model
    did not read. Whitespace is left out because prompts strip it, so a gap of spaces is not a cut.
    [] when everything was read, or when the model did not report its coverage (None)."""
    if coverage is None:
        return []
    gaps, at = [], 0
    for start, end in sorted(coverage) + [(len(text), len(text))]:
        if start > at and text[at:start].strip():
            gaps.append((at, min(start, len(text))))
        at = max(at, end)
    return gaps


def unread_chars(text: str, coverage: list[tuple[int, int]] | None) -> int | None:
    """How many characters of `text` the model did not read (whitespace outside the coverage not counted);
    None when it did not report its coverage. A document with a positive count was cut (read partly)."""
    if coverage is None:
        return None
    return sum(len(text[a:b]) - sum(ch.isspace() for ch in text[a:b]) for a, b in unread(text, coverage))
