"""An export format: the spans of any runs as gazetteer dictionaries, a zip of TYPE.txt files.

Unzipped, the folder is what the gazetteer reads as its weights, so the extractions of a slow model
(RexUniNLU's entities, say) become a dictionary the gazetteer matches in microseconds. Every distinct
span of a type is one entry, sorted. A span is left out, and counted as skipped, when it has no offset
(a class label, an ungrounded generation) or cannot be one line of a dictionary (it holds a line break,
or starts with #, which marks a comment); a tuple whose offsets are not a span of its text is left out
whole and counted as invalid, as the built-in formats do.
"""
from __future__ import annotations

import re
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from contracts import ExportReport, RunDetail, Span

from .dictionary import COMMENT

UNSAFE_IN_FILE_NAME = re.compile(r'[\x00-\x1f/\\:*?"<>|]')


def placed(text: str, span: Span) -> bool:
    start, end = span.offset
    return 0 <= start < end <= len(text) and text[start:end] == span.span


def file_name(type_name: str, taken: set[str]) -> str:
    """TYPE.txt, with characters no file system accepts replaced and a number added on a clash."""
    stem = UNSAFE_IN_FILE_NAME.sub("_", type_name).strip(" .") or "type"
    name, n = f"{stem}.txt", 1
    while name.casefold() in taken:
        n += 1
        name = f"{stem}-{n}.txt"
    taken.add(name.casefold())
    return name


def write_dictionaries(runs: Sequence[RunDetail], path: Path) -> ExportReport:
    report = ExportReport()
    entries: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        for document, result in run.items:
            report.documents += 1
            for spans in result.tuples:
                if any(s.offset is not None and not placed(document.text, s) for s in spans):
                    report.invalid += 1
                    continue
                for span in spans:
                    entry = span.span.strip()
                    if span.offset is None or not entry or "\n" in entry or "\r" in entry \
                            or entry.startswith(COMMENT):
                        report.skipped += 1
                        continue
                    entries[span.type].add(entry)
                    report.spans += 1
    taken: set[str] = set()
    source = ", ".join(str(run.id) for run in runs)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for type_name in sorted(entries):
            lines = [f"# {type_name}: {len(entries[type_name])} entries from IE Workstation run(s) {source}"]
            archive.writestr(file_name(type_name, taken), "\n".join(lines + sorted(entries[type_name])) + "\n")
    return report
