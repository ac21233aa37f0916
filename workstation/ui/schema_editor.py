"""Schema editing helpers: parse the JSON editor with a message a person can act on; flat type lists."""
from __future__ import annotations

import json
import re
from typing import Any

from contracts.domain import InputError
from contracts.names import Reads
from workstation.inputs import json_problem, loads
from workstation.unicode_text import lone_surrogate


def parse_schema(source: str) -> Any:
    """JSON text -> schema. InputError names the line and column of a syntax error."""
    if not source.strip():
        raise InputError("the schema is empty: give a JSON object such as {\"人物\": null} or a list of labels")
    try:
        schema = loads(source)
    except json.JSONDecodeError as e:
        raise InputError(f"schema is not valid JSON: {json_problem(e)}") from None
    problem = lone_surrogate(schema, "the schema")
    if problem:
        raise InputError(problem)
    return schema


def flat_types(schema: Any, reads: Reads) -> list[str] | None:
    """The type names of a flat schema as the model reads it ({"人物": null, ...}, or ["label", ...] for a
    label model); None when nested or not of that kind."""
    if reads == Reads.LABELS:
        return list(schema) if isinstance(schema, list) and all(isinstance(v, str) for v in schema) else None
    if isinstance(schema, dict) and all(v is None for v in schema.values()):
        return [str(k) for k in schema]
    return None


def split_types(text: str) -> list[str]:
    """Types typed one per line or separated by commas (ASCII or full-width), de-duplicated in order."""
    seen: dict[str, None] = {}
    for part in re.split(r"[\n,，]+", text):
        if part.strip():
            seen.setdefault(part.strip(), None)
    return list(seen)


def flat_schema(types: list[str], reads: Reads) -> Any:
    """A flat schema of `types` as the model reads it: a label list, or an object of types."""
    return list(types) if reads == Reads.LABELS else {t: None for t in types}


def dump(schema: Any) -> str:
    return json.dumps(schema, ensure_ascii=False, indent=2)
