"""A first look at a Batch input before it runs: how many rows, which columns, the first rows, and which
column holds the text (a CSV may call it `content`)."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass

import pandas as pd

from workstation.inputs import TEXT

PREVIEW_ROWS = 5
TEXT_NAMES = (TEXT, "content", "body", "sentence", "document", "passage")   # likely names, in order of preference


@dataclass
class Preview:
    rows: int                            # documents in the file (non-blank lines for TXT and JSONL)
    columns: list[str]                   # CSV/Parquet columns, JSONL keys of the first objects; [] for TXT
    head: pd.DataFrame                   # the first rows as read, every cell as text
    problem: str | None = None           # why the file could not be previewed (it is still read when run)

    def text_guess(self) -> str | None:
        """The column most likely to hold the text: a usual name, else the first column."""
        by_name = {c.casefold(): c for c in self.columns}
        return next((by_name[n] for n in TEXT_NAMES if n in by_name), self.columns[0] if self.columns else None)


def preview(data: bytes, suffix: str) -> Preview:
    """The preview of a file's bytes; `suffix` says the format as inputs.py reads it."""
    suffix = suffix.lower()
    try:
        if suffix == ".parquet":
            return _parquet(data)
        text = data.decode("utf-8-sig")
        if suffix == ".csv":
            return _csv(text)
        if suffix == ".txt":
            lines = [line for line in text.splitlines() if line.strip()]
            return Preview(len(lines), [], pd.DataFrame({"text": lines[:PREVIEW_ROWS]}))
        return _jsonl(text)
    except UnicodeDecodeError as e:
        return Preview(0, [], pd.DataFrame(), f"not UTF-8 text ({e.reason} at byte {e.start})")
    except (csv.Error, ValueError, OSError) as e:
        return Preview(0, [], pd.DataFrame(), f"{type(e).__name__}: {e}")


def _csv(text: str) -> Preview:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    head, rows = [], 0
    for row in reader:
        rows += 1
        if len(head) < PREVIEW_ROWS:
            head.append(dict(zip(header, row)))
    return Preview(rows, header, pd.DataFrame(head, columns=header))


def _jsonl(text: str) -> Preview:
    lines = [line for line in text.splitlines() if line.strip()]
    head = []
    for line in lines[:PREVIEW_ROWS]:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = {"(not JSON)": line}
        head.append({k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in obj.items()}
                    if isinstance(obj, dict) else {"(not an object)": line})
    columns = list(dict.fromkeys(k for row in head for k in row))
    return Preview(len(lines), columns, pd.DataFrame(head, columns=columns))


def _parquet(data: bytes) -> Preview:
    import pyarrow.parquet as pq
    try:
        table = pq.ParquetFile(io.BytesIO(data))
        first = next(table.iter_batches(batch_size=PREVIEW_ROWS), None)
    except Exception as e:              # noqa: BLE001 - pyarrow raises several types for a broken file
        return Preview(0, [], pd.DataFrame(), f"not a readable Parquet file ({type(e).__name__})")
    columns = list(table.schema_arrow.names)
    head = first.to_pandas().astype(str) if first is not None else pd.DataFrame(columns=columns)
    return Preview(table.metadata.num_rows, columns, head)
