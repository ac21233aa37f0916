"""Run documents on a shared model from the UI and record the run (source 'ui')."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from contracts.domain import Document, InputError
from contracts.model import ModelFamily, TaskPreset
from contracts.names import Reads
from workstation import engine
from workstation.run_config import Overrides, RunConfig, resolve
from workstation.shelf import ModelShelf, reload_optimizations
from workstation.ui import state

RERUN_IN_PAGE = 64                      # more documents than this re-run as a background job


@dataclass(frozen=True)
class RunRequest:
    model: str
    device: str
    optimizations: tuple[str, ...]
    task: str | None = None
    batch_size: int | None = None
    options: tuple[tuple[str, Any], ...] = ()
    thresholds: tuple[tuple[str, float], ...] = ()      # confidence thresholds to apply (opt-in), type -> t

    def snapshot(self, config: RunConfig) -> dict[str, Any]:
        """The settings a UI run records: its configuration's, with the device and batch size as the page
        asked for them ("auto" stays "auto") and the task."""
        return config.snapshot() | {"device": self.device, "batch_size": self.batch_size, "task": self.task}


def json_kind(value: Any) -> str:
    """What a parsed JSON value is, in the words of JSON (not Python's type names)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return {dict: "a JSON object", list: "a list", str: "a string"}.get(type(value), "a number")


def check_schema_shape(family: ModelFamily, preset: TaskPreset | None, schema: Any) -> None:
    """The schema box must hold what the model reads (`family.reads`): a list of labels, or a JSON object of
    types. Said in the UI's words, with an example from the task's preset."""
    if family.reads == Reads.LABELS:
        if not isinstance(schema, list):
            example = list(preset.schema)[:2] if preset and isinstance(preset.schema, (list, tuple)) else ["人物", "地点"]
            raise InputError(f"this task takes a list of labels in the schema box, such as "
                             f"{json.dumps(example, ensure_ascii=False)}; it holds {json_kind(schema)}")
    elif not isinstance(schema, dict):
        example = dict(list(preset.schema.items())[:2]) if preset and isinstance(preset.schema, dict) else {"人物": None}
        raise InputError(f"this task takes a JSON object of types in the schema box, such as "
                         f"{json.dumps(example, ensure_ascii=False)}; it holds {json_kind(schema)}")


def document_for(family: ModelFamily, preset: TaskPreset | None, schema: Any, text: str,
                 doc_id: str = "1") -> Document:
    """The schema box as the model reads it: a schema drives span extraction (RexUniNLU), a label list a
    generative task (SeqGPT). Labels are passed as given: the model names a label that is not a string
    (str() would hide it)."""
    check_schema_shape(family, preset, schema)
    if family.reads == Reads.LABELS:
        return Document(doc_id, text, task=preset.name if preset else None, labels=list(schema))
    return Document(doc_id, text, schema=schema)


def config_for(request: RunRequest) -> RunConfig:
    """The request's run configuration: the page's choices over settings.toml's (run_config.resolve). The
    sidebar's optimizations are toggles: those that do not apply to the model are skipped."""
    weights, _ = state.weights_for(request.model)       # settings.toml's, or a fine-tune chosen in the sidebar
    return resolve(state.settings(), engine.family(request.model), Overrides(
        weights=weights, device=request.device, batch_size=request.batch_size, optimizations=request.optimizations,
        only_applicable=True, options=dict(request.options), thresholds=dict(request.thresholds)))


def target(request: RunRequest) -> tuple[tuple, RunConfig]:
    """(shelf key, run configuration) for a request."""
    config = config_for(request)
    key = ModelShelf.key(config.model, config.weights, config.device, config.load_dtype,
                         reload_optimizations(config.optimizations))
    return key, config


def run_only(request: RunRequest, documents: Sequence[Document]) -> tuple[engine.RunReport, str, str]:
    """Run on the shelf's model, without recording: (report, weights, dtype). engine.run checks the documents
    before it borrows the model (a bad schema costs no load and no GPU time), then holds the model's lock
    for the run; the chosen optimizations that do not apply to the model are skipped."""
    key, config = target(request)
    return _run(state.model_shelf(), key, config, documents), str(config.weights), config.load_dtype


def _run(shelf: ModelShelf, key: tuple, config: RunConfig, documents: Sequence[Document], **watch) -> engine.RunReport:
    return engine.run(lambda: shelf.borrow(key), documents, config, family=engine.family(config.model), **watch)


def run_and_record(request: RunRequest, documents: Sequence[Document], source: str = "ui") -> int:
    """Validate, run under the model's lock, record. Raises InputError/WeightsError for the page to show."""
    return recorded_run(request, documents, source)(None, None)


def recorded_run(request: RunRequest, documents: Sequence[Document], source: str = "ui"
                 ) -> Callable[[threading.Event | None, Callable | None], int]:
    """What the page's session decides (weights, device, the store) resolved now; the run itself left to a
    call `work(cancel, on_clock) -> run id`, which may happen on another thread (the Extract page's
    background run: a thread has no session to read)."""
    key, config = target(request)
    shelf, store = state.model_shelf(), state.store()

    def work(cancel: threading.Event | None, on_clock: Callable | None) -> int:
        report = _run(shelf, key, config, documents, cancel=cancel, on_clock=on_clock)
        return store.record_run(report, list(documents), source, task=request.task,
                                settings_snapshot=request.snapshot(config))
    return work


def rerun(detail) -> tuple[str, int]:
    """The documents and settings of a recorded run, run again: ("run", id) now, or ("job", id) in the
    background when there are too many documents to wait for."""
    snap, s = detail.settings or {}, detail.summary
    request = RunRequest(s.model, snap.get("device") or s.device,
                         tuple(snap.get("optimizations", list(s.optimizations))), task=s.task,
                         batch_size=s.batch_size, options=tuple(sorted(s.options.items())),
                         thresholds=tuple(sorted((snap.get("thresholds") or {}).items())))
    documents = [doc for doc, _ in detail.items]
    if len(documents) > RERUN_IN_PAGE and not request.thresholds:   # batch jobs apply no thresholds
        return "job", start_job(request, documents, f"re-run of run {s.id}")
    return "run", run_and_record(request, documents)


def start_job(request: RunRequest, documents: Sequence[Document], source_name: str,
              inputs: dict[str, Any] | None = None) -> int:
    """Queue documents as a background job (recorded as a 'batch' run when done) and start it. `inputs`: how
    the input file was read (its name, the text column), kept in the job's settings."""
    key, config = target(request)
    with state.model_shelf().borrow(key) as model:      # loaded now: the job's slices borrow this one
        names = engine.applicable(model, config.optimizations)    # the job would fail on one that does not apply
    weights, dtype = str(config.weights), config.load_dtype
    snapshot = request.snapshot(config) | ({"input": dict(inputs)} if inputs else {})
    job_id = state.store().create_job(
        list(documents), request.model, weights, config.batch_size, names, config.option_values, source_name,
        device=request.device, dtype=dtype, task=request.task, settings_snapshot=snapshot)
    state.job_runner().submit(job_id)
    return job_id
