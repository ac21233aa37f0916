"""Helpers for a plugin's own tests (pytest or any runner): what the host does with a plugin, without the host.

- `recorded_run(items)`: a run as an exporter receives it (`RunDetail`), built in memory;
- `run_model(family, documents)`: documents through a model the way the host runs them, with the checks the
  host makes on the way in (`family.check`) and on the way out (one result per document in input order, checked
  by the engine's own `contracts.results.in_input_order`; every offset a span of its text, coverage inside the
  text, the result's JSON read back equal);
- `Workstation(folder)`: the real host in child processes, on a throwaway history in `folder`: `extract(...)`
  runs `python -m workstation extract`, `read_run(id)` reads a recorded run back through `export --format jsonl`.

It imports only `contracts`, like a plugin: the host is reached through its command line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from contracts.domain import Document, Result, Span
from contracts.model import Knobs, LoadedModel, ModelFamily
from contracts.results import in_input_order
from contracts.runs import RunDetail, RunSummary
from contracts.stages import IDLE, StageClock


def recorded_run(items: Iterable[tuple[Document, Result]], run_id: int = 1, model: str = "test-model",
                 **summary: Any) -> RunDetail:
    """A run of `items` ((Document, Result) pairs, in input order) as the history hands it to an exporter.
    Any `RunSummary` field may be given (`label="gold"`); the rest are those of a short CPU run."""
    items = list(items)
    fields: dict[str, Any] = dict(
        id=run_id, created_at=datetime(2024, 3, 5, tzinfo=timezone.utc), source="cli", model=model, task=None,
        weights="", weights_checksum=None, demo=False, device="cpu", dtype="fp32", attention="none",
        optimizations={}, batch_size=8, options={}, documents=len(items), wall_seconds=0.1,
        docs_per_second=len(items) / 0.1, tokens=0, peak_memory_bytes=None, label=None, note=None)
    fields.update(summary)
    return RunDetail(RunSummary(**fields), {"model": model}, items)


def run_model(family: ModelFamily, documents: Sequence[Document], weights: str | Path | None = None,
              batch_size: int = 8, **options: Any) -> list[Result]:
    """The results of `documents`, run as the host runs them, on the CPU in fp32. Raises the plugin's own
    InputError for a document its checks refuse (assert on it with pytest.raises), and AssertionError naming
    the document when a result breaks a rule every surface relies on. `weights`: the folder `load` gets
    (None for a model that needs none: a folder that does not exist, as the host gives it). Results out of
    order, or more or fewer than the documents, raise the RuntimeError a run of the host raises."""
    for document in documents:
        family.check(document)                       # blank text, the kind of input, then family.validate
    if weights is None:
        assert not family.needs_weights, f"{family.name} needs weights: give run_model weights=FOLDER"
        weights = Path(os.devnull) / family.name     # a path that cannot exist
    model = family.load(Path(weights), "cpu", "fp32")
    check_loaded(model, family)
    model.clock = StageClock("cpu")
    try:
        results = list(model.extract(list(documents), batch_size=batch_size, **options))
    finally:
        model.clock = IDLE
    checked = []
    for document, result in in_input_order(list(documents), results):      # the engine's own check
        result = result.without_empty_spans()        # the host drops tuples that hold an empty span
        check_result(document, result)
        checked.append(result)
    return checked


def check_loaded(model: LoadedModel, family: ModelFamily) -> None:
    """What the host reads from a loaded model before a run is there, of the right kind."""
    assert model.family is family, "a LoadedModel's family is the ModelFamily that loaded it"
    assert isinstance(model.knobs, Knobs) and isinstance(model.device, str) and isinstance(model.is_demo, bool)
    assert isinstance(model.weights, Path), "a LoadedModel's weights is the Path it was loaded from"


def check_result(document: Document, result: Result) -> None:
    """Every span placed in its document's text (or without an offset), coverage inside the text, and the
    result's JSON (what the CLI writes and the history keeps) read back equal."""
    text = document.text
    for number, spans in enumerate(result.tuples, start=1):
        assert spans and all(isinstance(s, Span) for s in spans), f"document {document.id!r}: tuple {number} " \
                                                                  "must be a non-empty list of Spans"
        for span in spans:
            if span.offset is None:
                continue
            start, end = span.offset
            assert 0 <= start < end <= len(text) and text[start:end] == span.span, (
                f"document {document.id!r}, tuple {number}: {span.type} {span.span!r} at {span.offset} is not that "
                f"span of the text ({text[max(0, start):max(0, end)]!r}); offsets are Python string indices")
    if result.coverage is not None:
        ranges = [tuple(r) for r in result.coverage]
        assert ranges == sorted(ranges) and all(0 <= a <= b <= len(text) for a, b in ranges), (
            f"document {document.id!r}: coverage {result.coverage} must be sorted ranges inside the text")
    assert read_back(result).to_json() == result.to_json(), f"document {document.id!r}: the result's JSON reads back different"


def read_back(result: Result) -> Result:
    """The result as the history and the CLI's output give it back: its JSON line, read again."""
    return Result.from_json(json.loads(result.to_json_line()))


class Workstation:
    """The host in child processes, with a settings file and a history of its own in `folder`.

    `plugins`: the installed distributions it loads besides the built-ins (IEW_LOAD_PLUGINS); the plugin must
    be installed (`pip install -e .`). No GPU is used (CUDA_VISIBLE_DEVICES is emptied)."""

    def __init__(self, folder: str | Path, plugins: str | Sequence[str] = (), settings: str = ""):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.settings = self.folder / "settings.toml"
        self.settings.write_text(f'[storage]\ndatabase = "{(self.folder / "runs.db").as_posix()}"\n'
                                 f'demo_weights_dir = "{(self.folder / "demo-weights").as_posix()}"\n'
                                 f'demo_size = "tiny"\n{settings}', encoding="utf-8")
        self.plugins = [plugins] if isinstance(plugins, str) else list(plugins)
        self.runs = 0            # runs recorded so far: a fresh history numbers them 1, 2, ...
        self.last: subprocess.CompletedProcess | None = None     # the last command (its stderr: what it said)

    def command(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        """`python -m workstation ARGS` (the launcher's commands, in this environment); with check, a non-zero
        exit is an AssertionError showing its stderr."""
        env = {**os.environ, "IEW_SETTINGS": str(self.settings), "IEW_LOAD_PLUGINS": ",".join(self.plugins),
               "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run([sys.executable, "-m", "workstation", *map(str, args)], cwd=self.folder, env=env,
                              capture_output=True, text=True, timeout=timeout)
        self.last = done
        assert not check or done.returncode == 0, f"workstation {' '.join(map(str, args))}: exit " \
                                                  f"{done.returncode}\n{done.stderr}"
        return done

    def extract(self, model: str, documents: Iterable[dict], *args: str) -> list[dict]:
        """Run `extract --model MODEL` over input lines ({"id", "text", "schema"} ...) plus any other arguments;
        the output lines. The run is recorded (unless --no-record is among `args`)."""
        source, output = self.folder / "in.jsonl", self.folder / "out.jsonl"
        source.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents), encoding="utf-8")
        self.command("extract", "--model", model, "--input", source, "--output", output, *args)
        self.runs += "--no-record" not in args
        return [json.loads(line) for line in output.read_text("utf-8").splitlines()]

    def export(self, fmt: str, run_id: int | None = None, suffix: str = "") -> Path:
        """Export a recorded run (default: the last) in a format, through `export`; the file written."""
        run_id = run_id or self.runs
        path = self.folder / f"run-{run_id}-{fmt}{suffix}"
        self.command("export", "--run", str(run_id), "--format", fmt, "--output", path)
        return path

    def read_run(self, run_id: int | None = None) -> list[tuple[Document, Result]]:
        """A recorded run (default: the last) read back from the history: its documents and results, in order."""
        items = []
        for line in self.export("jsonl", run_id, ".jsonl").read_text("utf-8").splitlines():
            d = json.loads(line)
            items.append((Document(str(d["id"]), d["text"], d.get("schema"), d.get("task"), d.get("labels")),
                          Result.from_json(d)))
        return items
