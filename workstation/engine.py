"""The engine: load a model, apply optimizations, run documents, measure the run.

Data flows one way: documents -> model plugin (prompting, batching, forward, decoding) -> Results,
wrapped in a RunReport with the settings snapshot and measurements. Storage and the UI consume reports.
"""
from __future__ import annotations

import gc
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from contracts.domain import Document, InputError, Result, WeightsError
from contracts.model import LoadedModel, ModelFamily
from contracts.report import RunReport
from contracts.stages import IDLE, StageClock
from workstation import plugins
from workstation.settings import load_settings
from workstation.thresholds import apply_thresholds


def resolve_device(device: str) -> str:
    if device in ("", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        # InputError: a wrong choice of device is the user's to fix, so every surface says it in one line.
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"device {device!r} was asked for, but this machine has no CUDA GPU that PyTorch "
                             "can use; choose the CPU (--device cpu, or cpu in the sidebar)")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= count):
            raise InputError(f"device {device!r} does not exist: this machine has {count} CUDA GPU(s), "
                             f"cuda:0 to cuda:{count - 1}")
    return device


def family(name: str) -> ModelFamily:
    families = plugins.model_families()
    if name not in families:
        raise InputError(f"unknown model {name!r}; installed: {', '.join(families) or 'none'}")
    return families[name]


def load_model(name: str, weights: Path, device: str = "auto", dtype: str = "fp32") -> LoadedModel:
    fam = family(name)
    if fam.needs_weights and not Path(weights).exists():
        raise WeightsError(missing_weights(name, Path(weights)))
    return fam.load(Path(weights), resolve_device(device), dtype)


def missing_weights(name: str, weights: Path) -> str:
    """What to do when a model that needs weights has none: the same words on every surface."""
    return (f"{name} has no weights: {weights} does not exist. Set [models.{name}] weights in settings.toml to its "
            f"checkpoint directory, or pass --weights DIR (`python3 launcher.py demo-weights --model {name}` writes "
            "random demo weights where the model offers them)")


def applicable(model: LoadedModel, names: Sequence[str]) -> list[str]:
    """The named optimizations that apply to this model; unknown names are kept, for apply_optimizations to refuse."""
    registry = plugins.optimizations()
    return [n for n in names if n not in registry or registry[n].applies_to(model)[0]]


def apply_optimizations(model: LoadedModel, names: Sequence[str]) -> dict[str, str]:
    """Enable the named optimizations (others off). Returns name -> what now runs when extracting, which
    is what a run records: one that acts in fine-tuning only is switched on but not listed. Errors name
    the reason."""
    registry = plugins.optimizations()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise InputError(f"unknown optimization(s) {', '.join(unknown)}; available: {', '.join(registry) or 'none'}")
    active: dict[str, str] = {}
    for name, opt in registry.items():
        ok, reason = opt.applies_to(model)
        if name in names:
            if not ok:
                raise InputError(f"optimization {name!r} does not apply to {model.family.name}: {reason}")
            what = opt.enable(model)
            if opt.inference:
                active[name] = what
        elif ok:
            opt.disable(model)
    return active


def load_for_run(name: str, weights: Path, device: str, optimizations: Sequence[str] | None, dtype: str | None = None,
                 configured_dtype: str = "fp32") -> tuple[LoadedModel, dict[str, str]]:
    """Load a model, switch the named optimizations on, settle the dtype: what `extract` and the corpus
    workers both do. An explicit dtype wins; the configured one applies only where no optimization chose one.
    Named optimizations must apply to the model; None means settings.toml's defaults, switched on where they
    apply (a default list written for one model must not stop another from running)."""
    model = load_model(name, weights, device, "fp32")
    names = applicable(model, load_settings().optimizations) if optimizations is None else optimizations
    active = apply_optimizations(model, names)
    chosen = dtype or (configured_dtype if model.knobs.dtype == "fp32" else model.knobs.dtype)
    if chosen != model.knobs.dtype:
        model.set_dtype(chosen)
    return model, active


class Cancelled(Exception):
    pass


def run(model: LoadedModel, documents: Sequence[Document], batch_size: int = 8,
        optimizations: dict[str, str] | None = None, on_result: Callable[[Result], None] | None = None,
        on_progress: Callable[[int, int], None] | None = None, cancel: threading.Event | None = None,
        keep_results: bool = True, thresholds: dict[str, float] | None = None,
        max_tuples: int | None = None, **options) -> RunReport:
    """Run documents through a loaded model; measure wall time, tokens and peak GPU memory.

    thresholds (opt-in): per-type confidence thresholds (workstation/thresholds.py) applied to every
    result before it is kept or handed on; the report records them."""
    for doc in documents:
        model.family.check(doc)
    report = RunReport(model.family.name, str(model.weights), model.is_demo, model.device, model.knobs.dtype,
                       model.knobs.attention, dict(optimizations or {}), batch_size, options,
                       datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       thresholds=dict(thresholds) if thresholds else None)
    on_cuda = model.device.startswith("cuda")
    if on_cuda:
        torch.cuda.synchronize(model.device)
        torch.cuda.reset_peak_memory_stats(model.device)
    tokens_before = model.tokens_processed()
    clock = model.clock = StageClock(model.device)
    start = clock.started                 # the clock starts when it is made, i.e. now
    try:
        for result in iter_results(model, documents, batch_size, cancel, max_tuples=max_tuples, **options):
            report.documents += 1
            with clock.stage("write"):
                if report.thresholds:
                    result = apply_thresholds(result, report.thresholds)
                if keep_results:
                    report.results.append(result)
                if on_result:
                    on_result(result)
            if on_progress:
                on_progress(report.documents, len(documents))
        if on_cuda:
            torch.cuda.synchronize(model.device)
            report.peak_memory_bytes = torch.cuda.max_memory_allocated(model.device)
        report.wall_seconds = time.perf_counter() - start
        report.stages, report.backoffs = clock.finish(), clock.backoffs
    finally:
        model.clock = IDLE
    report.tokens = model.tokens_processed() - tokens_before
    return report


def iter_results(model: LoadedModel, documents: Sequence[Document], batch_size: int,
                 cancel: threading.Event | None = None, max_tuples: int | None = None, **options) -> Iterator[Result]:
    """The model's results, each capped at `max_tuples` tuples (None: settings.toml's limit). Every surface
    (Extract, Batch jobs, the CLI) takes its results from here."""
    limit = load_settings().max_tuples_per_document if max_tuples is None else max_tuples
    # Documents go to the model in slices so a cancel takes effect between slices while batching
    # (and the model's own prefetching of the next documents) happens inside each slice.
    step = max(batch_size * 32, 256)
    for start in range(0, len(documents), step):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        for result in extract(model, documents[start:start + step], batch_size, **options):
            yield capped(result, limit)


def capped(result: Result, limit: int) -> Result:
    """Keep the first `limit` tuples (0: all) and say how many were dropped. One pathological document (a
    huge line, a degenerate schema) must not produce hundreds of megabytes that every page then loads."""
    if not limit or len(result.tuples) <= limit:
        return result
    dropped = len(result.tuples) - limit
    result.tuples = result.tuples[:limit]
    result.warnings.append(f"{dropped:,} more tuple(s) were dropped: at most {limit:,} are kept per document "
                           "([results] max_tuples_per_document in settings.toml)")
    return result


def extract(model: LoadedModel, documents: Sequence[Document], batch_size: int, **options) -> Iterator[Result]:
    """The one way from a model to results for every surface (runs, jobs, evaluation): the model's
    results, less the tuples that hold an empty span (docs/faithfulness.md)."""
    for result in model.extract(documents, batch_size=batch_size, **options):
        yield result.without_empty_spans()


def unload(model: LoadedModel | None) -> None:
    """Drop a model and give its GPU memory back."""
    if model is None:
        return
    device = model.device
    del model
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
