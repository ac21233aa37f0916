"""settings.toml rewritten for one value, its comments and layout kept (tomlkit round-trips the document)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from workstation.settings import ROOT


def setting_path(folder: Path, base: Path = ROOT) -> str:
    """How a settings file in `base` names `folder`: relative to `base` when inside it (Settings.path resolves
    relative names against the settings file's folder), else absolute."""
    folder = Path(folder).expanduser().resolve()
    try:
        return str(folder.relative_to(Path(base).resolve()))
    except ValueError:
        return str(folder)


def set_weights(settings_file: Path, model: str, folder: Path) -> None:
    """[models.MODEL] weights = folder, written atomically (a reader never sees half a file)."""
    import tomlkit
    settings_file = Path(settings_file)
    doc = tomlkit.parse(settings_file.read_text("utf-8")) if settings_file.exists() else tomlkit.document()
    if "models" not in doc:
        doc["models"] = tomlkit.table(is_super_table=True)
    if model not in doc["models"]:
        doc["models"][model] = tomlkit.table()
    doc["models"][model]["weights"] = setting_path(folder, settings_file.parent)
    fd, tmp = tempfile.mkstemp(dir=settings_file.parent, prefix=".settings-", suffix=".toml")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(tomlkit.dumps(doc))
    os.replace(tmp, settings_file)
