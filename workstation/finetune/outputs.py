"""Where fine-tunes write (a folder beside the history database) and which weights a model can run on or
start training from: settings.toml's, the demo ones, and every completed fine-tune still on disk."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from workstation.settings import Settings


def data_dir(settings: Settings) -> Path:
    """Where the workstation keeps its files: the folder of the history database."""
    return settings.path(settings.database).parent


def slug(text: str) -> str:
    """A folder-name-safe version of a dataset name (letters of any script stay)."""
    return re.sub(r"[^\w.-]+", "-", text.strip(), flags=re.UNICODE).strip("-.")[:60] or "dataset"


def default_output(settings: Settings, model: str, dataset_name: str, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    return data_dir(settings) / "finetuned" / f"{model}-{slug(dataset_name)}-{stamp}"


@dataclass(frozen=True)
class WeightChoice:
    path: Path
    title: str
    kind: str                                # "configured" | "demo" | "finetuned"
    training_run: int | None = None


def weight_choices(settings: Settings, store, model: str) -> list[WeightChoice]:
    """settings.toml's weights (or the demo ones when none are configured), the demo weights if present,
    then every completed fine-tune of this model whose output is still on disk, newest first."""
    choices: list[WeightChoice] = []
    configured = settings.model(model).weights
    if configured:
        choices.append(WeightChoice(settings.path(configured), "configured in settings.toml", "configured"))
    demo = settings.path(settings.demo_weights_dir) / f"{model}-{settings.demo_size()}"
    if not configured or demo.is_dir():
        choices.append(WeightChoice(demo, "demo weights (random)", "demo"))
    if store is not None:
        for run in store.list_training_runs(model=model, status="completed"):
            if Path(run.output_dir).is_dir():
                when = run.finished_at or run.created_at
                choices.append(WeightChoice(Path(run.output_dir),
                                            f"fine-tune #{run.id} on {run.train_name} ({when.astimezone():%Y-%m-%d %H:%M})",
                                            "finetuned", run.id))
    return choices
