"""Checkpoints for the fine-tuning tests (session-wide, built once)."""
import json
import shutil
from pathlib import Path

import pytest


def with_dropout(src: Path, dst: Path, hidden: float, attention: float) -> Path:
    """A copy of a checkpoint whose config.json sets other dropout rates (same weights)."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text("utf-8"))
    if config["model_type"] == "bloom":
        config.update(hidden_dropout=hidden, attention_dropout=attention)
    else:
        config.update(hidden_dropout_prob=hidden, attention_probs_dropout_prob=attention)
    (dst / "config.json").write_text(json.dumps(config), "utf-8")
    return dst


@pytest.fixture(scope="session")
def rex_tiny_no_dropout(rex_tiny, tmp_path_factory) -> Path:
    """The tiny RexUniNLU without dropout: exact comparisons between training runs that draw
    differently, and quick memorisation (0.1 dropout is a lot for a model this small)."""
    return with_dropout(rex_tiny, tmp_path_factory.mktemp("rex") / "no-dropout", 0.0, 0.0)
