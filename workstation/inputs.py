"""Input files -> Documents. JSONL (one object a line), TXT (one text a line), CSV (a `text` column).

Every problem names the line it is on, so a person can fix the file.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from workstation.domain import Document, InputError

MAX_LINE_CHARS = 50_000_000


def parse_schema_arg(value: str | None) -> Any:
    """--schema takes JSON or a path to a JSON file."""
    if value is None:
        return None
    path = Path(value)
    try:
        is_file = len(value) < 4096 and path.is_file()
    except OSError:
        is_file = False
    text = path.read_text("utf-8") if is_file else value
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        where = f"file {path}" if is_file else "--schema"
        raise InputError(f"{where} is not valid JSON: {e.msg} at position {e.pos}") from None


def _document(obj: Any, line: int, default: Any) -> Document:
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", line)
    if "text" not in obj:
        raise InputError("missing \"text\"", line)
    doc_id = obj.get("id", line)
    if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool):
        raise InputError(f"\"id\" must be a string or integer, got {type(doc_id).__name__}", line)
    doc = Document(str(doc_id), obj["text"], obj.get("schema"), obj.get("task"), obj.get("labels"), line)
    return _with_default(doc, default)


def _with_default(doc: Document, default: Any) -> Document:
    """--schema fills what a line leaves out: a RexUniNLU schema, or {"task", "labels"} for SeqGPT."""
    if default is None:
        return doc
    if isinstance(default, dict) and set(default) <= {"task", "labels"} and "labels" in default:
        doc.task = doc.task if doc.task is not None else default.get("task")
        doc.labels = doc.labels if doc.labels is not None else default.get("labels")
    elif doc.schema is None:
        doc.schema = default
    return doc


def read_documents(path: Path, default: Any = None, skip_invalid: bool = False
                   ) -> tuple[list[Document], list[InputError]]:
    """Read every document; with skip_invalid, bad lines are collected instead of raised."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file {path} does not exist")
    suffix = path.suffix.lower()
    docs: list[Document] = []
    errors: list[InputError] = []

    def add(make, line):
        try:
            docs.append(make())
        except InputError as e:
            if not skip_invalid:
                raise
            errors.append(e)

    try:
        if suffix == ".csv":
            with open(path, encoding="utf-8-sig", newline="") as f:
                reader = csv.DictReader(f)
                if not reader.fieldnames or "text" not in reader.fieldnames:
                    raise InputError(f"{path} has no 'text' column (columns: {reader.fieldnames})")
                for n, row in enumerate(reader, start=2):
                    add(lambda: _with_default(Document(row.get("id") or str(n - 1), row["text"] or "", line=n),
                                              default), n)
        elif suffix == ".txt":
            with open(path, encoding="utf-8") as f:
                for n, text in enumerate(f, start=1):
                    if not text.strip():
                        continue                         # a blank line separates texts; it is not one
                    add(lambda: _with_default(Document(str(n), text.rstrip("\r\n"), line=n), default), n)
        else:                                            # .jsonl / .json lines
            with open(path, encoding="utf-8") as f:
                for n, raw in enumerate(f, start=1):
                    if not raw.strip():
                        continue
                    add(lambda raw=raw, n=n: _document(json_line(raw, n), n, default), n)
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    return docs, errors


def json_line(raw: str, line: int, source: str = "") -> Any:
    """One line of a JSONL file, parsed; a syntax error names the line and the column (and the file)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise InputError(f"{source + ': ' if source else ''}malformed JSON ({e.msg} at column {e.colno})",
                         line) from None


def read_valid_documents(path: Path, family, default: Any = None, skip_invalid: bool = False
                         ) -> tuple[list[Document], list[InputError]]:
    """read_documents, then the model's own checks (schema, labels, text) on every document."""
    documents, errors = read_documents(path, default, skip_invalid)
    valid = []
    for doc in documents:
        try:
            family.check(doc)
            valid.append(doc)
        except InputError as e:
            if not skip_invalid:
                raise
            errors.append(e)
    return valid, errors
