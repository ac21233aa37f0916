"""What a checkpoint folder holds: whether a download left it half-finished, where it came from, its size,
and whether the model's own strict check accepts it (ModelFamily.check_weights)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from contracts.domain import WeightsError
from contracts.model import ModelFamily
from workstation.settings import Settings

SOURCE_FILE = "WEIGHTS_SOURCE.json"         # written by `weights fetch`: hub, repo, revision, files and hashes


def partial_marks(folder: Path) -> list[str]:
    """Traces of an unfinished download: the clients' *.incomplete files (ModelScope beside the file,
    huggingface_hub under .cache/huggingface/download)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.incomplete"))


def check_folder(family: ModelFamily, folder: Path) -> str:
    """The model's one-line description of the checkpoint in `folder`, or WeightsError naming what is wrong."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise WeightsError(f"{folder} is not a folder")
    marks = partial_marks(folder)
    if marks:
        raise WeightsError(f"{folder} is a half-finished download ({', '.join(marks[:3])}); run "
                           f"`python3 launcher.py weights fetch {family.name}` again to finish it")
    if family.is_demo(folder):
        raise WeightsError(f"{folder} holds random demo weights, not a trained checkpoint")
    return family.check_weights(folder)


def read_source(folder: Path) -> dict | None:
    try:
        return json.loads((Path(folder) / SOURCE_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) if Path(folder).is_dir() else 0


@dataclass(frozen=True)
class WeightsInUse:
    model: str
    path: Path
    demo: bool
    source: str                  # "huggingface DAMO-NLP/SeqGPT-560M", "a local folder", "random demo weights"
    revision: str
    size: int
    loads: bool
    detail: str                  # the check's description, or what is wrong


def weights_in_use(family: ModelFamily, settings: Settings, check: bool = True) -> WeightsInUse:
    path, demo = settings.weights_for(family.name, family.needs_weights)
    demo = demo or (path.is_dir() and family.is_demo(path))
    meta = read_source(path) or {}
    if demo:
        source = "random demo weights"
    elif meta:
        source = f"{meta.get('hub')} {meta.get('repo_id')}"
    else:
        source = "a local folder"
    loads, detail = True, ""
    if check:
        try:
            detail = family.check_weights(path) if demo else check_folder(family, path)
        except WeightsError as e:
            loads, detail = False, str(e)
        except Exception as e:                  # noqa: BLE001 - a plugin's own failure is reported, not raised
            loads, detail = False, f"{type(e).__name__}: {e}"
    return WeightsInUse(family.name, path, demo, source, str(meta.get("revision", "")), folder_size(path), loads,
                        detail)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
