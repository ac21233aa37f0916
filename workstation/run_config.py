"""A run's configuration, resolved once: which weights, device, dtype, batch size, optimizations, options,
thresholds and tuple cap a run uses, as one frozen value handed to `engine.run`.

Every surface (`launcher.py extract` and `corpus`, the HTTP API, the UI's Extract and Batch pages) asks
`resolve(settings, family, overrides)`: what the person asked for on that surface wins, settings.toml
fills in the rest, and the same rules apply everywhere (a model that needs no weights never gets a demo
path; the settings' default optimizations run where they apply, named ones must apply). A batch job or a
corpus worker runs the value its job was queued with, so settings.toml edited meanwhile do not change it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import torch

from contracts.batching import AUTO, auto_batch_size
from contracts.domain import InputError
from contracts.model import ModelFamily
from workstation import plugins

if TYPE_CHECKING:
    from workstation.settings import Settings

DTYPES = ("fp32", "fp16", "bf16")
MAX_TUPLES = 10_000          # settings.toml's default for [results] max_tuples_per_document


@dataclass(frozen=True)
class RunConfig:
    """What a run runs with. Equal configs give equal outputs on equal documents, so the API's lanes let
    requests with equal configs share a forward pass."""

    model: str = ""
    weights: Path | None = None
    device: str = "auto"
    dtype: str | None = None                     # asked for; None: the configured one, where no optimization chose
    optimizations: tuple[str, ...] | None = None  # on, the others off; None: the model's knobs as they are
    options: tuple[tuple[str, Any], ...] = ()    # the model's own extract() options, sorted (name, value) pairs
    batch_size: int = 8
    only_applicable: bool = False                # skip the optimizations that do not apply (settings' defaults)
    configured_dtype: str | None = None          # settings.toml's (or a job's) dtype
    thresholds: tuple[tuple[str, float], ...] = ()   # per-type confidence thresholds, sorted; () = none
    max_tuples: int = MAX_TUPLES                 # tuples kept per document; 0: no limit
    demo: bool = False                           # the weights are random demo weights

    def __post_init__(self):
        # Normalised here so that configs built from dicts and lists compare (and hash) by content.
        set_ = object.__setattr__
        if self.weights is not None and not isinstance(self.weights, Path):
            set_(self, "weights", Path(self.weights))
        if self.optimizations is not None:
            set_(self, "optimizations", tuple(dict.fromkeys(self.optimizations)))
        set_(self, "options", tuple(sorted(dict(self.options).items())))
        set_(self, "thresholds", tuple(sorted(dict(self.thresholds or {}).items())))

    @property
    def option_values(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def threshold_values(self) -> dict[str, float] | None:
        return dict(self.thresholds) or None

    @property
    def load_dtype(self) -> str:
        """The dtype a model for this run is set to when nothing else chooses one."""
        return self.dtype or self.configured_dtype or "fp32"

    def replace(self, **changes) -> RunConfig:
        return replace(self, **changes)

    def snapshot(self) -> dict[str, Any]:
        """The settings a recorded run or a job keeps (JSON)."""
        snap: dict[str, Any] = {"model": self.model, "weights": str(self.weights or ""), "device": self.device,
                                "dtype": self.load_dtype, "optimizations": list(self.optimizations or ()),
                                "batch_size": self.batch_size, "options": self.option_values}
        if self.thresholds:
            snap["thresholds"] = dict(self.thresholds)
        return snap


@dataclass(frozen=True)
class Overrides:
    """What a surface was asked for; None (or empty) leaves a value to settings.toml."""

    weights: Path | str | None = None
    device: str | None = None
    dtype: str | None = None
    batch_size: int | str | None = None
    optimizations: Sequence[str] | None = None     # None: settings.toml's, run where they apply
    only_applicable: bool | None = None            # None: True for settings.toml's list, False for a named one
    options: Mapping[str, Any] = field(default_factory=dict)
    thresholds: Mapping[str, float] | None = None
    max_tuples: int | None = None


def resolve(settings: Settings, family: ModelFamily, overrides: Overrides | Mapping[str, Any] | None = None
            ) -> RunConfig:
    """The run configuration for `family` from `settings` (loaded by the caller, and not read again) and what
    the surface asked for. A bad choice is an InputError naming it."""
    asked = overrides if isinstance(overrides, Overrides) else _overrides(overrides or {})
    ms = settings.model(family.name)
    # A weights folder the surface was given (--weights, a fine-tune picked in the sidebar) is checked there,
    # in that surface's words; a missing one the model needs is refused when it loads (engine.load_model).
    weights, demo = (Path(asked.weights), False) if asked.weights else \
        settings.weights_for(family.name, family.needs_weights)
    demo = demo or family.is_demo(weights)
    if asked.dtype is not None and asked.dtype not in DTYPES:
        raise InputError(f"dtype {asked.dtype!r} is not one of {', '.join(DTYPES)}")
    device = resolve_device(asked.device or ms.device)
    names = list(settings.optimizations if asked.optimizations is None else asked.optimizations)
    registry = plugins.optimizations()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise InputError(f"unknown optimization(s) {', '.join(unknown)}; available: {', '.join(registry) or 'none'}")
    only_applicable = asked.optimizations is None if asked.only_applicable is None else asked.only_applicable
    batch_size = batch_size_for(family, asked.batch_size or ms.batch_size, device, asked.dtype or ms.dtype)
    if batch_size < 1:
        raise InputError("the batch size must be at least 1")
    max_tuples = settings.max_tuples_per_document if asked.max_tuples is None else asked.max_tuples
    return RunConfig(family.name, weights, device, asked.dtype, tuple(names), tuple(dict(asked.options).items()),
                     batch_size, only_applicable, ms.dtype, tuple((asked.thresholds or {}).items()), max_tuples, demo)


def _overrides(given: Mapping[str, Any]) -> Overrides:
    known = {f.name for f in fields(Overrides)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise TypeError(f"resolve: no override {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return Overrides(**{k: v for k, v in given.items() if v is not None})


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


def batch_size_for(fam: ModelFamily, setting: int | str, device: str, dtype: str) -> int:
    """The batch size a run uses: `setting` itself, or for "auto" the family's batch_table row for this device's
    memory (as the device reports it) and dtype. The back-off still halves a batch that does not fit."""
    if setting != AUTO:
        return int(setting)
    device = resolve_device(device)
    memory = torch.cuda.get_device_properties(device).total_memory if device.startswith("cuda") else None
    return auto_batch_size(fam.batch_table, dtype, memory)
