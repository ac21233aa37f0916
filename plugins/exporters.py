"""Export formats, as a plugin: JSONL, CSV, Excel, Parquet, Label Studio predictions, doccano.

Each format is an `Exporter` registered through the `register_exporters` hook, exactly as a third-party
plugin would add one. `write(runs, path)` gets `RunDetail`s from the store and returns an `ExportReport`.

Spreadsheet safety (CSV, Excel): a text cell that starts with = + - @, a tab or a carriage return could
be run as a formula when the file is opened (CSV injection, OWASP), and the text comes from users'
documents. In CSV such cells get a leading apostrophe, which spreadsheets show as text; a program
reading the CSV back drops a leading apostrophe before those characters (`unguard_formula`, and
docs/exports.md). Excel cells need no apostrophe: they are written as text cells with Excel's own
"quote prefix" style, so Excel shows exactly the text and never evaluates it. Numbers stay numbers.

Offsets are checked against the document text before anything is written: a tuple with a span whose
offsets are not 0 <= start < end <= len(text), or do not cover the span's text, is left out of every
format (old runs may hold RexUniNLU's empty [start, 0] spans), and the report counts it.

Spans without an offset (a generated span not found in the text, a class label) cannot be placed in an
annotation tool: Label Studio and doccano skip them, and any relation that needs them, and the report
counts them. JSONL, CSV, Excel and Parquet keep them with empty start/end.
"""
from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from contracts.domain import Document, Result, Span, unread_chars
from contracts.exporter import Exporter, ExportReport
from contracts.hookspecs import hookimpl
from contracts.runs import RunDetail

# ---- shared rows --------------------------------------------------------------------------------------

SPAN_COLUMNS = ("run_id", "doc_id", "tuple_index", "element_index", "type", "span", "start", "end",
                "confidence", "grounded")
RUN_COLUMNS = ("id", "created_at", "source", "model", "task", "label", "note", "weights", "weights_checksum",
               "demo", "device", "dtype", "attention", "optimizations", "batch_size", "options", "documents",
               "wall_seconds", "docs_per_second", "tokens", "peak_memory_bytes")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def guard_formula(value: Any) -> Any:
    """Text a spreadsheet could run as a formula gets a leading apostrophe (see the module docstring)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def unguard_formula(value: str) -> str:
    """The inverse of `guard_formula`, for a program reading our CSV back."""
    return value[1:] if value.startswith("'") and value[1:].startswith(_FORMULA_START) else value


def placed_in(text: str, span: Span) -> bool:
    """A span without an offset (a label, an ungrounded generation) or one whose offsets cover its text."""
    if span.offset is None:
        return True
    start, end = span.offset
    return (all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end))
            and 0 <= start < end <= len(text) and text[start:end] == span.span)


def checked(document: Document, result: Result) -> tuple[Result, int]:
    """The result without tuples that hold a misplaced span, and how many were left out."""
    kept = [t for t in result.tuples if all(placed_in(document.text, s) for s in t)]
    if len(kept) == len(result.tuples):
        return result, 0
    return replace(result, tuples=kept), len(result.tuples) - len(kept)


def _documents(runs: Sequence[RunDetail], report: ExportReport | None = None
               ) -> Iterator[tuple[RunDetail, int, Document, Result]]:
    """Every (run, position, document, checked result); tuples left out are counted in `report`."""
    for run in runs:
        for position, (document, result) in enumerate(run.items):
            result, invalid = checked(document, result)
            if report is not None:
                report.invalid += invalid
            yield run, position, document, result


def span_rows(runs: Sequence[RunDetail], report: ExportReport | None = None) -> Iterator[dict[str, Any]]:
    """One row per span (element of a tuple); ungrounded spans keep empty start/end, labels an empty `grounded`."""
    for run, _, document, result in _documents(runs, report):
        for t, spans in enumerate(result.tuples):
            for e, s in enumerate(spans):
                start, end = s.offset if s.offset is not None else (None, None)
                yield {"run_id": run.id, "doc_id": document.id, "tuple_index": t, "element_index": e,
                       "type": s.type, "span": s.span, "start": start, "end": end, "confidence": s.confidence,
                       "grounded": grounded(s)}


def grounded(span: Span) -> bool | None:
    """Whether the span stands at a place in the text, as the UI shows it. An extractive model (RexUniNLU)
    leaves `Span.grounded` unset because every span it returns has offsets, and `checked` has already left
    out any whose offsets do not cover its text; a generative one sets it. A class label has no place to be
    found at: None (an empty cell)."""
    if span.grounded is not None:
        return span.grounded
    return True if span.offset is not None else None


def run_row(run: RunDetail) -> dict[str, Any]:
    s = run.summary
    row = {c: getattr(s, c) for c in RUN_COLUMNS}
    row["created_at"] = s.created_at.replace(tzinfo=None)   # Excel has no time zones; the header says UTC
    row["optimizations"] = json.dumps(s.optimizations, ensure_ascii=False)
    row["options"] = json.dumps(s.options, ensure_ascii=False)
    return row


# ---- JSONL: our own output format -----------------------------------------------------------------------

def write_jsonl(runs: Sequence[RunDetail], path: Path) -> ExportReport:
    report = ExportReport()
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for run, _, document, result in _documents(runs, report):
            line: dict[str, Any] = {"run_id": run.id, "id": document.id, "text": document.text}
            for key in ("schema", "task", "labels"):
                if getattr(document, key) is not None:
                    line[key] = getattr(document, key)
            line.update({k: v for k, v in result.to_json().items() if k != "id"})
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            report.documents += 1
            report.spans += sum(len(t) for t in result.tuples)
    return report


# ---- CSV ------------------------------------------------------------------------------------------------

def write_csv(runs: Sequence[RunDetail], path: Path) -> ExportReport:
    report = ExportReport(documents=sum(len(r.items) for r in runs))
    # utf-8-sig: the byte-order mark is how Excel knows the file is UTF-8 (Chinese would be garbled without it).
    with open(path, "w", encoding="utf-8-sig", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SPAN_COLUMNS)
        writer.writeheader()
        for row in span_rows(runs, report):
            writer.writerow({k: guard_formula(v) for k, v in row.items()})
            report.spans += 1
    return report


# ---- Excel ----------------------------------------------------------------------------------------------

EXCEL_CELL_LIMIT = 32_767                      # characters (UTF-16 code units) per cell
EXCEL_ROW_LIMIT = 1_048_576
TRUNCATED = "…[truncated]"


def excel_text(value: Any) -> Any:
    """A value Excel can hold: no control characters (invalid in the file format), within the cell limit."""
    if not isinstance(value, str):
        return value
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
    value = ILLEGAL_CHARACTERS_RE.sub("", value)
    if len(value.encode("utf-16-le")) // 2 <= EXCEL_CELL_LIMIT:
        return value
    keep, units, cut = EXCEL_CELL_LIMIT - len(TRUNCATED), 0, 0
    for cut, ch in enumerate(value):                 # count UTF-16 units: an emoji takes two
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > keep:
            break
    return value[:cut] + TRUNCATED


def _coverage_text(result: Result) -> str | None:
    """The ranges read, as JSON ("[[0, 512], [480, 990]]"); empty when the model does not report them."""
    return json.dumps([list(r) for r in result.coverage]) if result.coverage is not None else None


def excel_cell(sheet, value: Any) -> Any:
    """A cell value; text that could be read as a formula becomes a text cell with Excel's quote prefix
    (the apostrophe Excel keeps out of the value), so it shows exactly as written and never runs."""
    value = excel_text(value)
    if not (isinstance(value, str) and value.startswith(_FORMULA_START)):
        return value
    from openpyxl.cell import WriteOnlyCell
    cell = WriteOnlyCell(sheet, value=value)
    cell.data_type = "s"                             # openpyxl would store "=..." as a formula
    cell.quotePrefix = True
    return cell


def write_excel(runs: Sequence[RunDetail], path: Path) -> ExportReport:
    from openpyxl import Workbook

    report = ExportReport(documents=sum(len(r.items) for r in runs))
    rows = list(span_rows(runs, report))
    if max(len(rows), report.documents) >= EXCEL_ROW_LIMIT:
        raise ValueError(f"{len(rows)} spans do not fit in an Excel sheet (at most {EXCEL_ROW_LIMIT - 1:,} rows); "
                         "export CSV or Parquet instead")
    book = Workbook(write_only=True)
    sheets = {
        "Runs": ([c if c != "created_at" else "created_at (UTC)" for c in RUN_COLUMNS],
                 ([run_row(r)[c] for c in RUN_COLUMNS] for r in runs)),
        "Documents": (["run_id", "position", "doc_id", "text", "coverage", "unread_chars"],
                      ([run.id, position, d.id, d.text, _coverage_text(r), unread_chars(d.text, r.coverage)]
                       for run, position, d, r in _documents(runs))),
        "Spans": (list(SPAN_COLUMNS), ([row[c] for c in SPAN_COLUMNS] for row in rows)),
    }
    for title, (header, values) in sheets.items():
        sheet = book.create_sheet(title)
        sheet.append(header)
        for row in values:
            sheet.append([excel_cell(sheet, v) for v in row])
    book.save(path)
    report.spans = len(rows)
    return report


# ---- Parquet --------------------------------------------------------------------------------------------

def write_parquet(runs: Sequence[RunDetail], path: Path) -> ExportReport:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("run_id", pa.int64()), ("doc_id", pa.string()), ("tuple_index", pa.int32()),
                        ("element_index", pa.int32()), ("type", pa.string()), ("span", pa.string()),
                        ("start", pa.int64()), ("end", pa.int64()), ("confidence", pa.float64()),
                        ("grounded", pa.bool_())])
    report = ExportReport(documents=sum(len(r.items) for r in runs))
    frame = pd.DataFrame(list(span_rows(runs, report)), columns=list(SPAN_COLUMNS))
    # Nullable pandas dtypes: the file's pandas metadata then reads back as Int64/boolean, not float64/object
    # (an ungrounded span has no start/end).
    frame = frame.astype({"start": "Int64", "end": "Int64", "grounded": "boolean"})
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), path)
    report.spans = len(frame)
    return report


# ---- annotation tools: Label Studio, doccano --------------------------------------------------------------

@dataclass
class _Placed:
    """A document's spans as an annotation tool sees them: regions (deduplicated) and relations between them."""
    regions: list[tuple[str, int, int, Span]]          # (type, start, end, first span seen)
    relations: list[tuple[int, int, str]]              # (head region, tail region, label)
    skipped: int


def _place(result: Result) -> _Placed:
    # A tuple of 2+ spans becomes relations from its first element (the subject, the event trigger) to each
    # other element, labelled with that element's type (the relation or the argument role).
    index: dict[tuple[str, int, int], int] = {}
    placed = _Placed([], [], 0)
    for spans in result.tuples:
        ids: list[int | None] = []
        for s in spans:
            if s.offset is None:
                placed.skipped += 1
                ids.append(None)
                continue
            key = (s.type, s.offset[0], s.offset[1])
            if key not in index:
                index[key] = len(placed.regions)
                placed.regions.append((*key, s))
            ids.append(index[key])
        for s, tail in zip(spans[1:], ids[1:]):
            if ids[0] is not None and tail is not None and (ids[0], tail, s.type) not in placed.relations:
                placed.relations.append((ids[0], tail, s.type))
    return placed


def write_label_studio(runs: Sequence[RunDetail], path: Path) -> ExportReport:
    report, tasks = ExportReport(), []
    for run, _, document, result in _documents(runs, report):
        placed = _place(result)
        items: list[dict[str, Any]] = []
        for i, (label, start, end, span) in enumerate(placed.regions):
            item = {"id": f"r{i}", "from_name": "label", "to_name": "text", "type": "labels",
                    "value": {"start": start, "end": end, "text": document.text[start:end], "labels": [label]}}
            if span.confidence is not None:
                item["score"] = span.confidence
            items.append(item)
        items += [{"type": "relation", "from_id": f"r{head}", "to_id": f"r{tail}", "direction": "right",
                   "labels": [label]} for head, tail, label in placed.relations]
        tasks.append({"data": {"text": document.text, "doc_id": document.id, "run_id": run.id},
                      "predictions": [{"model_version": f"{run.summary.model} run {run.id}", "result": items}]})
        report.documents += 1
        report.spans += len(placed.regions)
        report.relations += len(placed.relations)
        report.skipped += placed.skipped
    path.write_text(json.dumps(tasks, ensure_ascii=False, indent=1), encoding="utf-8")
    return report


def label_studio_config(runs: Sequence[RunDetail]) -> str:
    """The labeling config that matches `write_label_studio` output (paste it into the Label Studio project)."""
    labels, relation_labels = set(), set()
    for *_, result in _documents(runs):
        placed = _place(result)
        labels.update(label for label, *_ in placed.regions)
        relation_labels.update(label for *_, label in placed.relations)
    lines = ["<View>", '  <Labels name="label" toName="text">']
    lines += [f"    <Label value={quoteattr(v)}/>" for v in sorted(labels)]
    lines += ["  </Labels>", '  <Relations>']
    lines += [f"    <Relation value={quoteattr(v)}/>" for v in sorted(relation_labels)]
    lines += ["  </Relations>", '  <Text name="text" value="$text"/>', "</View>"]
    return "\n".join(lines)


def write_doccano(runs: Sequence[RunDetail], path: Path) -> ExportReport:
    # The relation-project shape (what PaddleNLP's doccano.py reads); ids are unique across the file.
    report, next_entity, next_relation = ExportReport(), 1, 1
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for run, _, document, result in _documents(runs, report):
            placed = _place(result)
            ids = list(range(next_entity, next_entity + len(placed.regions)))
            next_entity += len(ids)
            entities = [{"id": ids[i], "label": label, "start_offset": start, "end_offset": end}
                        for i, (label, start, end, _) in enumerate(placed.regions)]
            relations = [{"id": next_relation + k, "from_id": ids[head], "to_id": ids[tail], "type": label}
                         for k, (head, tail, label) in enumerate(placed.relations)]
            next_relation += len(relations)
            line = {"text": document.text, "entities": entities, "relations": relations,
                    "doc_id": document.id, "run_id": run.id}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            report.documents += 1
            report.spans += len(entities)
            report.relations += len(relations)
            report.skipped += placed.skipped
    return report


# ---- the plugin -------------------------------------------------------

@hookimpl
def register_exporters(register):
    register(Exporter("jsonl", ".jsonl", write_jsonl, "JSONL (id, text, output, raw, coverage)",
                      "application/x-ndjson"))
    register(Exporter("csv", ".csv", write_csv, "CSV, one row per span", "text/csv"))
    register(Exporter("excel", ".xlsx", write_excel, "Excel (Runs, Documents with coverage, Spans)",
                      "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"))
    register(Exporter("parquet", ".parquet", write_parquet, "Parquet, one row per span",
                      "application/vnd.apache.parquet"))
    register(Exporter("label-studio", ".json", write_label_studio, "Label Studio predictions (JSON)",
                      "application/json"))
    register(Exporter("doccano", ".jsonl", write_doccano, "doccano relation project (JSONL)",
                      "application/x-ndjson"))
