"""A fake hub on loopback serving tiny checkpoints in the official layouts, with the real clients pointed at it."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_hub import FakeHub

# A commit id for the fake ModelScope repo (its tag is the pinned revision, as on the real hub).
MS_COMMIT = "d4c0e0399e3b1b91f5f63d66e27986e9638fda85"

SETTINGS = """# IE Workstation settings (a test's copy)

[models.rexuninlu]
# the RexUniNLU checkpoint
weights = ""
device = "cpu"        # stays

[storage]
database = "{db}"
"""


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    from plugins.rexuninlu import demo as rex_demo
    from plugins.seqgpt import demo as seq_demo
    root = tmp_path_factory.mktemp("official")
    return {"rexuninlu": rex_demo.write(root / "rexuninlu", "tiny", seed=0),
            "seqgpt": seq_demo.write(root / "seqgpt", "tiny", seed=0)}


@pytest.fixture
def families():
    from plugins.rexuninlu.family import RexUniNLU
    from plugins.seqgpt.family import SeqGPT
    return {"rexuninlu": RexUniNLU(), "seqgpt": SeqGPT()}


def serve_official(hub: FakeHub, families, checkpoints) -> None:
    """Both models' repos, as their pinned revisions name them."""
    for name, fam in families.items():
        o = fam.official
        extra = {f: b"{}" for f in o.files if f.endswith(".json") and not (checkpoints[name] / f).exists()}
        if o.hub == "modelscope":
            hub.add(o.repo_id, checkpoints[name], MS_COMMIT, refs=(o.revision, "master"), extra=extra)
        else:
            hub.add(o.repo_id, checkpoints[name], o.revision, refs=("main",), extra=extra)


@pytest.fixture
def hub(monkeypatch, tmp_path, families, tiny_checkpoints):
    """The fake hub, started, with HF_ENDPOINT and MODELSCOPE_ENDPOINT pointing at it and the clients' caches
    in tmp_path. The clients' transfer chunk and retry count are made small, so an interruption the test makes
    is seen within a small file and ends the fetch (the real defaults: 10 MiB chunks, 5 retries with back-off)."""
    import huggingface_hub.constants
    import modelscope_hub._download
    fake = FakeHub()
    serve_official(fake, families, tiny_checkpoints)
    running = fake.start()
    monkeypatch.setenv("HF_ENDPOINT", running.url)
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", running.url)
    monkeypatch.delenv("MODELSCOPE_DOMAIN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)
    monkeypatch.setattr(modelscope_hub._download, "DOWNLOAD_RETRY_TIMES", 0)
    yield fake
    running.stop()


@pytest.fixture
def settings_file(tmp_path, monkeypatch) -> Path:
    """A settings.toml with comments, which `load_settings()` reads by default during the test."""
    import workstation.settings
    path = tmp_path / "settings.toml"
    path.write_text(SETTINGS.format(db=(tmp_path / "data" / "runs.db").as_posix()), "utf-8")
    monkeypatch.setattr(workstation.settings, "DEFAULT_PATH", path)
    return path
