"""The engine: load a model, apply optimizations, run documents, measure the run.

Data flows one way: documents -> model plugin (prompting, batching, forward, decoding) -> Results,
wrapped in a RunReport with the settings snapshot and measurements. Storage and the UI consume reports.
"""
from __future__ import annotations

import gc
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from workstation import plugins
from workstation.domain import Document, InputError, Result
from workstation.models import LoadedModel, ModelFamily
from workstation.stages import IDLE, StageClock


def resolve_device(device: str) -> str:
    if device in ("", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} was asked for, but no CUDA GPU is available; use --device cpu")
    return device


def family(name: str) -> ModelFamily:
    families = plugins.model_families()
    if name not in families:
        raise InputError(f"unknown model {name!r}; installed: {', '.join(families) or 'none'}")
    return families[name]


def load_model(name: str, weights: Path, device: str = "auto", dtype: str = "fp32") -> LoadedModel:
    return family(name).load(Path(weights), resolve_device(device), dtype)


def apply_optimizations(model: LoadedModel, names: Sequence[str]) -> dict[str, str]:
    """Enable the named optimizations (others off). Returns name -> what now runs. Errors name the reason."""
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
            active[name] = opt.enable(model)
        elif ok:
            opt.disable(model)
    return active


def load_for_run(name: str, weights: Path, device: str, optimizations: Sequence[str], dtype: str | None = None,
                 configured_dtype: str = "fp32") -> tuple[LoadedModel, dict[str, str]]:
    """Load a model, switch the named optimizations on, settle the dtype: what `extract` and the corpus
    workers both do. An explicit dtype wins; the configured one applies only where no optimization chose one."""
    model = load_model(name, weights, device, "fp32")
    active = apply_optimizations(model, optimizations)
    chosen = dtype or (configured_dtype if model.knobs.dtype == "fp32" else model.knobs.dtype)
    if chosen != model.knobs.dtype:
        model.set_dtype(chosen)
    return model, active


@dataclass
class RunReport:
    model: str
    weights: str
    demo: bool
    device: str
    dtype: str
    attention: str
    optimizations: dict[str, str]
    batch_size: int
    options: dict
    started_at: str
    documents: int = 0
    wall_seconds: float = 0.0
    tokens: int = 0
    peak_memory_bytes: int | None = None
    stages: dict[str, float] = field(default_factory=dict)     # seconds per stage (workstation/stages.py)
    backoffs: list[dict] = field(default_factory=list)         # OOM back-offs: when, and to how many rows
    results: list[Result] = field(default_factory=list)

    @property
    def device_busy(self) -> float | None:
        """Share of the wall time the device was working (CUDA-event time on GPUs)."""
        return self.stages.get("device", 0.0) / self.wall_seconds if self.wall_seconds else None

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("results")
        d["docs_per_second"] = self.documents / self.wall_seconds if self.wall_seconds else None
        d["device_busy"] = self.device_busy
        return d


class Cancelled(Exception):
    pass


def run(model: LoadedModel, documents: Sequence[Document], batch_size: int = 8,
        optimizations: dict[str, str] | None = None, on_result: Callable[[Result], None] | None = None,
        on_progress: Callable[[int, int], None] | None = None, cancel: threading.Event | None = None,
        keep_results: bool = True, **options) -> RunReport:
    """Run documents through a loaded model; measure wall time, tokens and peak GPU memory."""
    for doc in documents:
        model.family.validate(doc)
    report = RunReport(model.family.name, str(model.weights), model.is_demo, model.device, model.knobs.dtype,
                       model.knobs.attention, dict(optimizations or {}), batch_size, options,
                       datetime.now(timezone.utc).isoformat(timespec="seconds"))
    on_cuda = model.device.startswith("cuda")
    if on_cuda:
        torch.cuda.synchronize(model.device)
        torch.cuda.reset_peak_memory_stats(model.device)
    tokens_before = model.tokens_processed()
    clock = model.clock = StageClock(model.device)
    start = clock.started = time.perf_counter()
    try:
        for result in iter_results(model, documents, batch_size, cancel, **options):
            report.documents += 1
            with clock.stage("write"):
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
                 cancel: threading.Event | None = None, **options) -> Iterator[Result]:
    # Documents go to the model in slices so a cancel takes effect between slices
    # while batching across documents still happens inside each slice.
    step = max(batch_size * 8, 64)
    for start in range(0, len(documents), step):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        yield from model.extract(documents[start:start + step], batch_size=batch_size, **options)


def unload(model: LoadedModel | None) -> None:
    """Drop a model and give its GPU memory back."""
    if model is None:
        return
    device = model.device
    del model
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
