"""Exporting runs from the history in any registered format (built-in or a plugin's).

The formats are plugins (plugins/exporters.py and any installed one); this module finds them through the
plugin manager and writes atomically, so every surface (UI, CLI, HTTP API) exports the same way.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from contracts.domain import InputError
from contracts.exporter import Exporter, ExportReport
from workstation import plugins


def exporters() -> dict[str, Exporter]:
    """name -> Exporter from every plugin, in registration order."""
    return plugins.exporters()


def exporter_named(name: str) -> Exporter:
    """The exporter of that name; an InputError listing every available one for a name nobody registered
    (the CLI exits 2 with it, the API answers 404)."""
    available = exporters()
    if name not in available:
        raise InputError(f"unknown export format {name!r}; available: {', '.join(available)}")
    return available[name]


def export_runs(store, run_ids: Sequence[int], fmt: str, path: str | Path) -> ExportReport:
    """Write the runs in one format. The file appears complete or not at all (temp file, then rename)."""
    exporter = exporter_named(fmt)
    runs = [store.get_run(run_id) for run_id in run_ids]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        report = exporter.write(runs, Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    report.format, report.path = fmt, path
    return report


def export_bytes(store, run_ids: Sequence[int], fmt: str) -> tuple[bytes, str, ExportReport]:
    """(file bytes, suggested file name, report): what a download button needs."""
    suffix = exporter_named(fmt).suffix
    name = f"runs-{'-'.join(str(i) for i in run_ids[:5])}{'-etc' if len(run_ids) > 5 else ''}{suffix}"
    with tempfile.TemporaryDirectory() as folder:
        report = export_runs(store, run_ids, fmt, Path(folder) / name)
        return (Path(folder) / name).read_bytes(), name, report
