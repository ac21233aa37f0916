"""Input files -> Documents. JSONL (one object a line), TXT (one text a line), CSV (a `text` column),
Parquet (one document a row, the JSONL keys as columns). `text_column` names another column (or JSONL key)
that holds the text, for a file that calls it `content` or `body`.

Every problem names the line it is on, so a person can fix the file.
"""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from contracts.domain import Document, InputError
from contracts.names import Reads
from workstation.unicode_text import lone_surrogate

MAX_LINE_CHARS = 50_000_000


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        self.key = key


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:]')


def _duplicate_position(text: str, key: str) -> int:
    """Where `key` is given a second time in one object (found only when json has said it is)."""
    stack: list[set | None] = []                  # per open container: its keys so far (None: an array)
    tokens = list(_JSON_TOKEN.finditer(text))
    for i, m in enumerate(tokens):
        token = m.group()
        if token in ("{", "["):
            stack.append(set() if token == "{" else None)
        elif token in ("}", "]"):
            if stack:
                stack.pop()
        elif (token.startswith('"') and stack and stack[-1] is not None and i + 1 < len(tokens)
              and tokens[i + 1].group() == ":"):
            name = json.loads(token)
            if name == key and name in stack[-1]:
                return m.start()
            stack[-1].add(name)
    return 0


def loads(text: str) -> Any:
    """json.loads, except that a key given twice in one object is an error: json would keep the last
    value without a word, and a schema or a line would silently lose a type. The error is a
    JSONDecodeError, so it names its line and column like a syntax error does."""
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as e:
        raise json.JSONDecodeError(f"the key {e.key!r} is given twice", text,
                                   _duplicate_position(text, e.key)) from None
    except RecursionError:              # a thousand levels of [[[...: no document is shaped like that
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None


def json_problem(e: json.JSONDecodeError, line: bool = True) -> str:
    """A JSON error as words: "Expecting ',' delimiter at line 2, column 5" (json's own messages may end
    in "at" already: "Unterminated string starting at")."""
    where = f"line {e.lineno}, column {e.colno}" if line else f"column {e.colno}"
    return f"{e.msg} {where}" if e.msg.endswith(" at") else f"{e.msg} at {where}"


def parse_schema_arg(value: str | None) -> Any:
    """--schema takes JSON or a path to a JSON file."""
    if value is None:
        return None
    path = Path(value)
    try:
        is_file = len(value) < 4096 and path.is_file()
    except OSError:
        is_file = False
    text = path.read_text("utf-8-sig") if is_file else value      # utf-8-sig: Windows editors add a BOM
    where = f"file {path}" if is_file else "--schema"
    try:
        schema = loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{where} is not valid JSON: {json_problem(e)}") from None
    problem = lone_surrogate(schema, "the schema")
    if problem:
        raise InputError(f"{where}: {problem}")
    return schema


TEXT = "text"                            # the column (JSONL key) that holds the text, unless told another


def _document(obj: Any, line: int, default: Any, text_column: str = TEXT) -> Document:
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", line)
    if text_column not in obj:
        raise InputError(f"missing {json.dumps(text_column, ensure_ascii=False)}", line)
    doc_id = obj.get("id", line)
    if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool):
        raise InputError(f"\"id\" must be a string or integer, got {type(doc_id).__name__}", line)
    doc = Document(str(doc_id), obj[text_column], obj.get("schema"), obj.get("task"), obj.get("labels"), line)
    return _with_default(doc, default)


def defaults_for(reads: Reads, value: Any, where: str = "--schema") -> dict[str, Any]:
    """What `value` (--schema, the Batch page's default box, an upload's form fields) fills in for documents
    that leave it out, as the model reads it: {"schema": ...} for a schema model; {"task", "labels"} for a
    label model, given as {"task": "ext", "labels": [...]} or as a bare list of labels. The other kind is an
    error that says what to give instead."""
    if value is None:
        return {}
    if reads == Reads.LABELS:
        if isinstance(value, list):
            return {"labels": value}
        if isinstance(value, dict) and value and set(value) <= {"task", "labels"}:     # a task alone is a default too
            return {k: value[k] for k in ("task", "labels") if value.get(k) is not None}
        raise InputError(f"{where}: this model reads a task and labels; give {{\"task\": \"ext\", \"labels\": "
                         f"[\"人物\", \"地点\"]}} or a list of labels, not {_kind(value)}")
    if isinstance(value, dict):
        return {"schema": value}
    raise InputError(f"{where}: this model reads a schema; give a JSON object of types such as "
                     f"{{\"人物\": null}}, not {_kind(value)}")


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a JSON object of types"
    return {list: "a list", str: "a string", bool: "true/false"}.get(type(value), "a number")


def _with_default(doc: Document, default: dict[str, Any] | None) -> Document:
    """Fill what a line leaves out from `defaults_for`'s fields (a schema, or a task and labels)."""
    for key, value in (default or {}).items():
        if getattr(doc, key) is None:
            setattr(doc, key, value)
    return doc


SUFFIXES = (".jsonl", ".json", ".csv", ".txt", ".parquet")


def require_file(path: Path, what: str = "input file", name: str = "") -> None:
    """A path that is a readable file; a folder or a missing path is named as what it is."""
    if path.is_dir():
        raise InputError(f"{what} {name or path} is a folder, not a file")
    if not path.is_file():
        raise InputError(f"{what} {name or path} does not exist")


def read_documents(path: Path, default: dict[str, Any] | None = None, skip_invalid: bool = False, name: str = "",
                   text_column: str = TEXT) -> tuple[list[Document], list[InputError]]:
    """Read every document; with skip_invalid, bad lines are collected instead of raised. `default` fills what
    a line leaves out (`defaults_for`). `name` is what messages call the file (an upload's own name, not the
    temporary file it was saved to)."""
    path = Path(path)
    require_file(path, name=name)
    with open(path, "rb") as f:
        return parse_documents(f, path.suffix, name or str(path), default, skip_invalid, text_column)


def iter_documents(path: Path, default: Any = None, on_invalid: Callable[[InputError], None] | None = None,
                   name: str = "") -> Iterator[Document]:
    """The documents of an input file, read one line (Parquet: one row batch) at a time as they are asked
    for, so a file of any length is never held. A line that is not a document raises InputError naming it,
    or, given `on_invalid`, is handed there and skipped. A missing file is refused now, not at the first read."""
    path = Path(path)
    require_file(path, name=name)

    def read() -> Iterator[Document]:
        with open(path, "rb") as f:
            yield from stream_documents(f, path.suffix, name or str(path), default, on_invalid)
    return read()


def parse_documents(stream: BinaryIO, suffix: str, name: str, default: Any = None, skip_invalid: bool = False,
                    text_column: str = TEXT) -> tuple[list[Document], list[InputError]]:
    """The documents of one input file's bytes (`suffix` says the format, `name` is used in messages).
    The corpus runner parses shards it was handed as bytes through here, exactly as the CLI reads a file."""
    errors: list[InputError] = []
    docs = list(stream_documents(stream, suffix, name, default, errors.append if skip_invalid else None, text_column))
    return docs, errors


def stream_documents(stream: BinaryIO, suffix: str, name: str, default: Any = None,
                     on_invalid: Callable[[InputError], None] | None = None, text_column: str = TEXT
                     ) -> Iterator[Document]:
    """parse_documents, one document at a time: a bad line raises, or goes to `on_invalid` and is skipped.
    What is wrong with the whole file (not UTF-8, no text column, not Parquet) always raises."""
    suffix = suffix.lower()

    def made(make) -> Document | None:
        try:
            return make()
        except InputError as e:
            if on_invalid is None:
                raise
            on_invalid(e)
            return None

    def lines() -> Iterator[Document | None]:
        if suffix == ".parquet":
            for n, row in enumerate(_parquet_rows(stream, name), start=1):
                yield made(lambda: _document(_decoded(row, n), n, default, text_column))
        elif suffix == ".csv":
            f = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                raise InputError(f"{name} is empty: a CSV needs a header row naming its {text_column!r} column")
            if not reader.fieldnames or text_column not in reader.fieldnames:
                raise InputError(f"{name} has no {text_column!r} column (columns: "
                                 f"{', '.join(reader.fieldnames or []) or 'none'}); name the column that holds "
                                 "the text (Batch: Text column)")
            for n, row in enumerate(reader, start=2):
                yield made(lambda: _with_default(Document(row.get("id") or str(n - 1), row[text_column] or "",
                                                          line=n), default))
        elif suffix == ".txt":
            # utf-8-sig: a byte-order mark (Notepad writes one) is not part of the first text or line.
            for n, text in enumerate(io.TextIOWrapper(stream, encoding="utf-8-sig"), start=1):
                if text.strip():                     # a blank line separates texts; it is not one
                    yield made(lambda: _with_default(Document(str(n), text.rstrip("\r\n"), line=n), default))
        else:                                        # .jsonl / .json lines
            for n, raw in enumerate(io.TextIOWrapper(stream, encoding="utf-8-sig"), start=1):
                if raw.strip():
                    yield made(lambda: _document(json_line(raw, n), n, default, text_column))

    try:
        for doc in lines():
            if doc is not None:
                yield doc
    except UnicodeDecodeError as e:
        raise InputError(f"{name} is not UTF-8 text ({e.reason} at byte {e.start}); is it a binary file?") from None


PARQUET_ROWS = 1024                      # rows read from a Parquet file at a time


def _parquet_rows(stream: BinaryIO, name: str) -> Iterator[dict[str, Any]]:
    """Rows of a Parquet file as JSONL-like objects, a row batch at a time."""
    import pyarrow.parquet as pq
    try:
        for batch in pq.ParquetFile(stream).iter_batches(batch_size=PARQUET_ROWS):
            yield from batch.to_pylist()
    except Exception as e:              # noqa: BLE001 - pyarrow raises several types for a broken file
        raise InputError(f"{name} is not a readable Parquet file ({type(e).__name__}: {e})") from None


def _decoded(row: dict[str, Any], line: int) -> dict[str, Any]:
    """Nested values may be stored as JSON text (the easy way to keep a schema dict in a column), so
    `schema` and `labels` strings are decoded; a null id falls back to the row number, as in JSONL."""
    row = {k: v for k, v in row.items() if not (k == "id" and v is None)}
    for key in ("schema", "labels"):
        if isinstance(row.get(key), str):
            row[key] = json_line(row[key], line, f"column {key!r}")
    return row


def json_line(raw: str, line: int, source: str = "") -> Any:
    """One line of a JSONL file, parsed; a syntax error names the line and the column (and the file)."""
    try:
        value = loads(raw)
    except json.JSONDecodeError as e:
        raise InputError(f"{source + ': ' if source else ''}malformed JSON ({json_problem(e, line=False)})",
                         line) from None
    problem = lone_surrogate(value)
    if problem:
        raise InputError(f"{source + ': ' if source else ''}{problem}", line)
    return value


def read_valid_documents(path: Path, family, default: Any = None, skip_invalid: bool = False, name: str = "",
                         where: str = "--schema", text_column: str = TEXT
                         ) -> tuple[list[Document], list[InputError]]:
    """read_documents, then the model's own checks (schema, labels, text) on every document. `default` is the
    value given for lines without their own (--schema), read as the family reads it (`defaults_for`)."""
    documents, errors = read_documents(path, defaults_for(family.reads, default, where), skip_invalid, name,
                                       text_column)
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
