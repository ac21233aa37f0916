"""Loaded models shared by every browser tab and by batch jobs (the UI's and the API's).

One model per device: asking for a different model, weights, dtype or reload-type optimization set on a
device unloads the old one first (engine.unload), so its GPU memory is back before the new one loads.
Devices are keyed by their canonical name ("auto" and "cuda" are the current GPU, "cuda:0"), so a page
asking for "auto" and a job's worker on "cuda:0" find the same model.
Each model has a lock, held for a whole borrow: optimizations turn knobs on the shared object, so knobs are
set and the run happens under the same lock, and two threads never run one model at once. A batch job
borrows per slice (`borrow_for_job`), so pages and jobs take turns between slices.
"""
from __future__ import annotations

import threading
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from contracts.model import LoadedModel
from storage.views import JobStatus
from workstation import engine, plugins

ModelKey = tuple[str, str, str, str, frozenset]     # (model, weights, device, dtype, reload-type optimizations)


@dataclass
class ModelSlot:
    key: ModelKey
    model: LoadedModel | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> LoadedModel | None:
        model, self.model = self.model, None
        return model


class ModelShelf:
    def __init__(self, load: Callable[[str, Path, str, str], LoadedModel] = engine.load_model) -> None:
        self._load = load
        self._slots: dict[str, ModelSlot] = {}          # device -> slot
        self._lock = threading.Lock()

    @staticmethod
    def key(model: str, weights: Path | str, device: str, dtype: str,
            reload_optimizations: frozenset = frozenset()) -> ModelKey:
        return (model, str(weights), canonical_device(device), dtype, frozenset(reload_optimizations))

    def borrow_for_job(self, job: JobStatus, device: str) -> AbstractContextManager[LoadedModel]:
        """The model a batch job's slice on `device` runs on (JobRunner's `borrow`): the one a page of this
        process has loaded for the same model, weights and dtype (workstation/ui/runs.py queues jobs with
        the settings of its own runs), so a job started from the UI never loads a second copy."""
        return self.borrow(self.key(job.model, job.weights, device, job.dtype,
                                    reload_optimizations(job.optimizations)))

    @contextmanager
    def borrow(self, key: ModelKey) -> Iterator[LoadedModel]:
        """The loaded model for `key`, held exclusively for the duration of the `with` block."""
        while True:
            slot = self._slot_for(key)
            with slot.lock:
                if slot.model is None and self._slots.get(key[2]) is slot:
                    slot.model = self._load(key[0], Path(key[1]), key[2], key[3])
                if slot.model is not None:
                    yield slot.model
                    return
            # the slot was evicted while we waited for it: ask again

    def _slot_for(self, key: ModelKey) -> ModelSlot:
        with self._lock:
            slot = self._slots.get(key[2])
            if slot is not None and slot.key == key:
                return slot
            if slot is not None:
                self._release(slot)
            slot = self._slots[key[2]] = ModelSlot(key)
            return slot

    def loaded(self) -> list[ModelKey]:
        with self._lock:
            return [s.key for s in self._slots.values() if s.model is not None]

    def evict(self, device: str | None = None) -> None:
        """Unload the model on `device` (all devices when None)."""
        with self._lock:
            for dev in [d for d in self._slots if device is None or d == device]:
                self._release(self._slots.pop(dev))

    @staticmethod
    def _release(slot: ModelSlot) -> None:
        with slot.lock:                 # waits for a run in progress on the old model to finish
            # take() hands unload the only reference, so its `del` really frees the weights
            engine.unload(slot.take())


def canonical_device(device: str) -> str:
    """One name per device: "auto" and "cuda" resolve to the current GPU's "cuda:N"."""
    device = engine.resolve_device(device)
    return f"cuda:{torch.cuda.current_device()}" if device == "cuda" else device


def reload_optimizations(names) -> frozenset:
    """The named optimizations that take a reload to switch: a model with other ones is another model."""
    registry = plugins.optimizations()
    return frozenset(n for n in names if n in registry and registry[n].switch == "reload")
