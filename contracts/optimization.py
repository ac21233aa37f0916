"""What an optimization plugin provides. Each one turns knobs on a LoadedModel (see contracts.model.Knobs)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

from contracts.model import LoadedModel

Switch = Literal["live", "reload", "restart"]


class Optimization(ABC):
    name: str                 # the id used by --optimizations and settings.toml
    title: str
    description: str          # one honest line
    switch: Switch = "live"   # live: acts on the loaded model; reload: model is reloaded; restart: process restart
    lossless: bool = True     # False: outputs may move within a stated tolerance (reduced precision)
    inference: bool = True    # False: acts in fine-tuning only, so an extraction run does not record it as active
    training: bool = False    # True: acts in fine-tuning, so the trainer offers and accepts it
    # Environment variables the process needs before CUDA starts (read once, so they take a restart): the
    # launcher sets them when settings.toml enables this optimization, unless already set.
    environment: dict[str, str] = {}

    @abstractmethod
    def applies_to(self, model: LoadedModel) -> tuple[bool, str]:
        """(yes/no, the reason a person can read)."""

    @abstractmethod
    def enable(self, model: LoadedModel, **params) -> str:
        """Switch on; return what now runs (e.g. the kernel chosen)."""

    def running(self, model: LoadedModel) -> str | None:
        """What runs for this optimization once the run's knobs and dtype are all set: what the run records
        (the host asks after it has set the dtype, which may change the answer `enable` gave, as a kernel that
        has no fp32 path). None: what `enable` returned still holds."""
        return None

    @abstractmethod
    def disable(self, model: LoadedModel) -> None:
        """Back to the fp32 eager behaviour for what this optimization controls."""
