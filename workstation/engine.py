"""The engine: load a model, and the one run path every surface takes.

Data flows one way: documents -> model plugin (prompting, batching, forward, decoding) -> Results,
wrapped in a RunReport with the settings snapshot and measurements. Storage and the UI consume reports.

`run` is the only way documents reach a model: the Extract page (workstation/ui/runs.py), batch jobs
(workstation/jobs.py), `launcher.py extract`, the HTTP API's lanes and the corpus workers all call it, each
with the RunConfig its surface resolved once (workstation/run_config.py): `run` reads no settings.
In order, it:

- reads the documents as it needs them (any iterable: a 200,000-line file is never held), in slices of
  `slice_size(batch_size)` documents, checking each one once (`family.check`) as it is read. A bad one
  stops the run with the InputError naming its line, or, given `on_invalid`, is handed there and skipped;
- checks the first slice before it takes the model, so a bad first line costs no load (`model` may be a
  loaded model or a `Lend`: a shelf's borrow, a loader) and holds the model alone for the whole run;
- sets the model up once: the named optimizations on, the others off, then the dtype rule, then what each
  optimization runs now that the dtype is set (`settle`);
- gives the model one slice at a time (it batches across the slice's documents and prepares its next group
  on a thread while the device works); a cancel takes effect between slices;
- hands every result, less empty-span tuples, capped at `max_tuples` and thresholded, to `on_result` with
  its document, in input order, and keeps it only if `keep_results`;
- keeps the objects that existed before it out of the cyclic garbage collector while it runs (`_collector_aside`);
- reports what ran: the attention kernel the model actually used, seconds per stage, OOM back-offs,
  tokens, peak GPU memory.
"""
from __future__ import annotations

import gc
import threading
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timezone
from itertools import chain, islice
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import torch

from contracts.domain import Document, InputError, Result, WeightsError
from contracts.model import LoadedModel, ModelFamily
from contracts.report import RunReport
from contracts.results import in_input_order
from contracts.stages import IDLE, Cancelled, StageClock  # noqa: F401  (Cancelled: run raises it, callers catch it)
from workstation import plugins
from workstation.quality.thresholds import apply_thresholds
from workstation.run_config import RunConfig, batch_size_for, resolve_device  # noqa: F401  (the engine's names too)

AS_IT_IS = RunConfig()      # batch 8, the model's knobs as they are, no thresholds, the default tuple cap

# A model lent for one run: a context manager factory (ModelShelf.borrow, a loader). `run` enters it only
# after the first documents have passed their checks.
Lend = Callable[[], AbstractContextManager[LoadedModel]]


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


def settle(model: LoadedModel, optimizations: Sequence[str] | None, dtype: str | None = None,
           configured_dtype: str | None = None, only_applicable: bool = False) -> dict[str, str]:
    """Set a run's knobs on the model: the named optimizations on and the others off (None: the knobs as
    they are, for a caller that set them by hand), then the dtype rule. The dtype rule: an explicit `dtype`
    wins; the configured one (settings.toml, a job's) applies only where no optimization chose one (precision
    casts to bf16). `only_applicable`: skip named optimizations that do not apply instead of refusing."""
    active: dict[str, str] = {}
    if optimizations is not None:
        names = applicable(model, optimizations) if only_applicable else list(optimizations)
        active = apply_optimizations(model, names)
    chosen = dtype or (configured_dtype if model.knobs.dtype == "fp32" else model.knobs.dtype)
    if chosen and chosen != model.knobs.dtype:
        model.set_dtype(chosen)
    # What runs is read once everything is set: the dtype may change what an optimization's enable() saw.
    registry = plugins.optimizations()
    return {name: registry[name].running(model) or what for name, what in active.items()}


def slice_size(batch_size: int) -> int:
    """Documents given to the model at once: enough for its batching and its prefetch of the next group to
    work inside the slice, few enough that a cancel takes effect soon and memory stays bounded."""
    return max(batch_size * 32, 256)


def run(model: LoadedModel | Lend, documents: Iterable[Document], config: RunConfig = AS_IT_IS, *,
        family: ModelFamily | None = None, total: int | None = None,
        on_start: Callable[[RunReport], None] | None = None,
        on_result: Callable[[Document, Result], None] | None = None,
        on_progress: Callable[[int, int | None], None] | None = None,
        on_invalid: Callable[[Document, InputError], None] | None = None,
        cancel: threading.Event | None = None, on_clock: Callable[[StageClock], None] | None = None,
        keep_results: bool = True) -> RunReport:
    """Run documents through a model with a resolved configuration and measure the run (the module's
    docstring has the steps).

    model:          a loaded model, or a Lend entered once the first slice has passed its checks
    config:         what the run runs with (workstation/run_config.py): batch size, optimizations (None: the
                    knobs as they are), the dtype rule (`settle`), options, thresholds, the tuple cap.
                    Its model, weights and device say what the caller lends; the run reads them from the model
    family:         the model's family, needed when `model` is lent (it checks the documents)
    total:          the number of documents when known, for `on_progress(done, total)`
    on_start:       called with the report (settings, no measurements) once the model is set up
    on_result:      called with (document, result) in input order; `keep_results=False` keeps none in the
                    report, so a long input is streamed to its writer, not held
    on_invalid:     called with (document, InputError) for a document that fails its checks, which is then
                    skipped; without it the first such document stops the run
    cancel:         set it to stop the run with Cancelled: between slices, and inside the model at its next
                    device step (contracts/stages.py)
    on_clock:       called with the run's StageClock before the first slice; its progress() may be read from
                    another thread while the run goes on (the Extract page's elapsed time and prompt counts)
    """
    lent = callable(model) and not isinstance(model, LoadedModel)
    if lent and family is None:
        raise TypeError("engine.run with a lent model needs family=: documents are checked before it is taken")
    checker = family or model.family
    size = slice_size(config.batch_size)
    slices = _slices(_checked(documents, checker, on_invalid), size)
    first = next(slices, [])            # checked before the model is taken: a bad first line costs no load
    with (model() if lent else nullcontext(model)) as taken, _alone(taken):
        active = settle(taken, config.optimizations, config.dtype, config.configured_dtype, config.only_applicable)
        # Before the first batch: the model starts what the run will need (host workers import while the graphs
        # are captured), or says which optimization sits out a run this short.
        active.update(taken.prepare_run(len(first) if len(first) < size else None))
        report = RunReport(taken.family.name, str(taken.weights), taken.is_demo, taken.device, taken.knobs.dtype,
                           taken.attention_kernel(), active, config.batch_size, config.option_values,
                           datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           thresholds=config.threshold_values)
        # The first run on a loaded model pays one-time costs (allocation, kernel choice, graph capture) that
        # later runs do not: comparisons say so rather than credit a setting with the difference.
        report.first_after_load = not vars(taken).get("_engine_warm", False)
        vars(taken)["_engine_warm"] = True
        if on_start:
            on_start(report)
        with _collector_aside():
            _measure(taken, report, chain([first], slices), config.max_tuples, total, on_result, on_progress, cancel, keep_results,
                     on_clock)
        report.optimizations.update(taken.finish_run())
    return report


def _measure(model: LoadedModel, report: RunReport, slices: Iterator[list[Document]], limit: int,
             total: int | None, on_result, on_progress, cancel: threading.Event | None, keep_results: bool,
             on_clock: Callable[[StageClock], None] | None = None) -> None:
    on_cuda = model.device.startswith("cuda")
    if on_cuda:
        torch.cuda.synchronize(model.device)
        torch.cuda.reset_peak_memory_stats(model.device)
    tokens_before = model.tokens_processed()
    clock = model.clock = StageClock(model.device, cancel)
    if on_clock:
        on_clock(clock)
    start = clock.started                 # the clock starts when it is made, i.e. now
    try:
        while True:
            with clock.stage("prepare"):  # reading and checking the next documents is host work too
                documents = next(slices, None)
            if documents is None:
                break
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            for document, result in in_input_order(documents, extract(model, documents, report.batch_size,
                                                               **report.options)):
                result = capped(result, limit)
                report.documents += 1
                with clock.stage("write"):
                    if report.thresholds:
                        result = apply_thresholds(result, report.thresholds)
                    if keep_results:
                        report.results.append(result)
                    if on_result:
                        on_result(document, result)
                if on_progress:
                    on_progress(report.documents, total)
        if on_cuda:
            torch.cuda.synchronize(model.device)
            report.peak_memory_bytes = torch.cuda.max_memory_allocated(model.device)
        report.wall_seconds = time.perf_counter() - start
        report.stages, report.backoffs = clock.finish(), clock.backoffs
    finally:
        model.clock = IDLE
    report.tokens = model.tokens_processed() - tokens_before


def _checked(documents: Iterable[Document], family: ModelFamily,
             on_invalid: Callable[[Document, InputError], None] | None) -> Iterator[Document]:
    """Each document checked once, as it is read: the family's rules (blank text, schema, labels)."""
    for document in documents:
        try:
            family.check(document)
        except InputError as e:
            if on_invalid is None:
                raise
            on_invalid(document, e)
            continue
        yield document


def _slices(documents: Iterable[Document], size: int) -> Iterator[list[Document]]:
    it = iter(documents)
    while chunk := list(islice(it, size)):
        yield chunk


_LOCKS = threading.Lock()
_ASIDE = {"runs": 0, "collected_at": time.monotonic()}
# A process that runs pass after pass (the API's lanes, a batch job) is nearly always inside a run, so the cycles
# that reached the oldest generation before a run began are set aside with everything else and never looked at:
# once this long has passed, the run that ends last makes a full collection (a server grew without it).
FULL_COLLECTION_EVERY_S = 60.0


@contextmanager
def _collector_aside() -> Iterator[None]:
    """Keep the objects that exist when a run starts (the model, the libraries: a million and more) out of
    Python's cyclic garbage collector until the last concurrent run ends (gc.freeze, then gc.unfreeze).

    A full collection walks every tracked object, and a dense run allocates enough objects (a Span, a list
    and a tuple per extracted span) to set off several, which made decoding time jump from run to run; set
    aside, they cost almost nothing (docs/performance.md §4 has the figures). Only
    when collections happen changes: what the run frees is freed, and the objects set aside are looked at
    again by the first full collection after it, made here at most FULL_COLLECTION_EVERY_S apart.
    """
    with _LOCKS:
        _ASIDE["runs"] += 1
        if _ASIDE["runs"] == 1:
            gc.freeze()
    try:
        yield
    finally:
        with _LOCKS:
            _ASIDE["runs"] -= 1
            if not _ASIDE["runs"]:
                gc.unfreeze()
                if time.monotonic() - _ASIDE["collected_at"] >= FULL_COLLECTION_EVERY_S:
                    gc.collect()
                    _ASIDE["collected_at"] = time.monotonic()


@contextmanager
def _alone(model: LoadedModel) -> Iterator[None]:
    """One run at a time on a loaded model: a run sets knobs, the dtype and the stage clock on the object
    itself. Borrowers of the model shelf already take turns; this holds for a model shared any other way."""
    with _LOCKS:
        lock = vars(model).setdefault("_engine_run_lock", threading.Lock())
    with lock:
        yield


def capped(result: Result, limit: int) -> Result:
    """Keep the first `limit` tuples (0: all) and say how many were dropped. One pathological document (a
    huge line, a degenerate schema) must not produce hundreds of megabytes that every page then loads."""
    if not limit or result.tuple_count <= limit:
        return result
    dropped = result.tuple_count - limit
    result.tuples = result.tuples[:limit]
    result.warnings.append(f"{dropped:,} more tuple(s) were dropped: at most {limit:,} are kept per document "
                           "([results] max_tuples_per_document in settings.toml)")
    return result


def extract(model: LoadedModel, documents: Sequence[Document], batch_size: int, **options) -> Iterator[Result]:
    """A model's results, less the tuples that hold an empty span (docs/faithfulness.md): what `run` gives
    each slice to, and what fine-tuning's evaluation reads (its gold documents are checked by validate_gold)."""
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
