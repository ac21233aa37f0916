"""The export-format contract: a plugin registers `Exporter`s through the `register_exporters` hook.

`write(runs, path)` receives the runs to export as `RunDetail`s (contracts/runs.py: each run's summary,
settings and its documents with their results), writes one file at `path` and returns an `ExportReport`.
The host writes to a temporary path and renames it only when `write` returns, so a failing exporter
leaves no partial file behind.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from contracts.runs import RunDetail
from contracts.words import agree, plural


@dataclass
class ExportReport:
    documents: int = 0
    spans: int = 0
    relations: int = 0
    skipped: int = 0             # ungrounded spans the format cannot place (relations needing them go too)
    invalid: int = 0             # tuples left out: a span's offsets are not a span of the text
    format: str = ""
    path: Path | None = None

    def message(self) -> str:
        text = f"{plural(self.documents, 'document')}, {plural(self.spans, 'span')}"
        if self.relations:
            text += f", {plural(self.relations, 'relation')}"
        if self.skipped:
            text += f"; {plural(self.skipped, 'span')} without a position in the text {agree(self.skipped, 'was', 'were')} skipped"
        if self.invalid:
            text += (f"; {plural(self.invalid, 'tuple')} {agree(self.invalid, 'was', 'were')} left out because a span's offsets are not a span of its "
                     "text (empty, reversed, outside the text, or covering other text)")
        return text


@dataclass(frozen=True)
class Exporter:
    name: str           # the id every surface uses: History's choice, `export --format`, the API's ?format=
    suffix: str         # the file's extension (".csv"): names the download and `launcher.py export`'s default file
    write: Callable[[Sequence[RunDetail], Path], ExportReport]
    title: str = ""     # what History's format list shows
    mime: str = "application/octet-stream"     # the download's media type (the API's Content-Type)
