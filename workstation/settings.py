"""User settings (settings.toml at the repo root), with working defaults."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.batching import batch_setting

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATH = Path(os.environ.get("IEW_SETTINGS", ROOT / "settings.toml"))


@dataclass
class ModelSettings:
    weights: str = ""            # official checkpoint dir; "" = use the demo weights
    device: str = "auto"         # auto | cpu | cuda | cuda:N
    dtype: str = "fp32"
    batch_size: int | str = 16   # or "auto": the model's table for the device's memory (engine.batch_size_for)


@dataclass
class ApiSettings:
    """[api] in settings.toml: the HTTP API of `launcher.py serve` (docs/api.md)."""

    host: str = "127.0.0.1"          # loopback only; any other address needs a token
    port: int = 8502
    token: str = ""                  # bearer token; IEW_API_TOKEN overrides; required off loopback
    cors_origins: list[str] = field(default_factory=list)     # [] = no CORS headers at all
    models: list[str] = field(default_factory=list)            # served models; [] = every installed one
    max_body_bytes: int = 16 * 1024 * 1024
    max_documents: int = 256         # per /v1/extract request; more go through /v1/jobs
    queue_size: int = 64             # waiting requests per (model, device) before 429
    batch_wait_ms: float = 5.0       # how long the first request waits for others to share its pass
    max_batch_documents: int = 64    # documents per shared forward pass
    timeout_s: float = 120.0         # per /v1/extract request, queueing included


@dataclass
class WeightsSettings:
    """[weights] in settings.toml: where `launcher.py weights fetch` puts official checkpoints and which hub
    servers it asks (a mirror behind a firewall). The environment wins over the file: HF_ENDPOINT, and
    MODELSCOPE_ENDPOINT or its older name MODELSCOPE_DOMAIN."""

    dir: str = ""                    # "" = weights/ beside the history database
    huggingface_endpoint: str = ""   # "" = the client's default (https://huggingface.co)
    modelscope_endpoint: str = ""    # "" = the client's default (https://modelscope.cn)


@dataclass
class Settings:
    models: dict[str, ModelSettings] = field(default_factory=dict)
    optimizations: list[str] = field(default_factory=list)
    database: str = "data/runs.db"
    demo_weights_dir: str = "data/demo-weights"
    demo_size_setting: str = "auto"        # auto: full-size on a CUDA machine, tiny on CPU
    ui_host: str = "127.0.0.1"
    ui_port: int = 8501
    monitor_interval_s: float = 1.0
    # At most this many tuples are kept per document (0: no limit); see engine.capped.
    max_tuples_per_document: int = 10_000
    # Folders whose files Batch may read by path ("A file on this machine"); [] = uploads only.
    input_folders: list[str] = field(default_factory=list)
    api: ApiSettings = field(default_factory=ApiSettings)
    weights: WeightsSettings = field(default_factory=WeightsSettings)
    source: Path | None = None             # the settings.toml these came from

    def path(self, relative: str) -> Path:
        p = Path(relative).expanduser()
        return p if p.is_absolute() else ROOT / p

    def model(self, name: str) -> ModelSettings:
        return self.models.get(name, ModelSettings())

    def demo_size(self) -> str:
        if self.demo_size_setting != "auto":
            return self.demo_size_setting
        import torch
        return "full" if torch.cuda.is_available() else "tiny"

    def weights_for(self, name: str, needs_weights: bool = True) -> tuple[Path, bool]:
        """(weights dir, is_demo). With none configured, a model that needs weights falls back to its demo
        checkpoint; one that does not (ModelFamily.needs_weights False: rules, dictionaries) gets its own
        folder beside the history database, models/NAME, which need not exist."""
        configured = self.model(name).weights
        if configured:
            return self.path(configured), False
        if not needs_weights:
            return self.path(self.database).parent / "models" / name, False
        return self.path(self.demo_weights_dir) / f"{name}-{self.demo_size()}", True


def load_settings(path: Path | None = None) -> Settings:
    path = path or DEFAULT_PATH
    data: dict[str, Any] = tomllib.loads(path.read_text("utf-8")) if path.exists() else {}
    s = Settings()
    for name, m in data.get("models", {}).items():
        s.models[name] = ModelSettings(**{k: v for k, v in m.items() if k in ModelSettings.__dataclass_fields__})
        s.models[name].batch_size = batch_setting(s.models[name].batch_size, f"settings.toml: [models.{name}] batch_size")
    s.optimizations = list(data.get("optimizations", {}).get("enabled", []))
    store = data.get("storage", {})
    s.database = store.get("database", s.database)
    s.demo_weights_dir = store.get("demo_weights_dir", s.demo_weights_dir)
    s.demo_size_setting = store.get("demo_size", s.demo_size_setting)
    ui = data.get("ui", {})
    s.ui_host = ui.get("host", s.ui_host)
    s.ui_port = int(ui.get("port", s.ui_port))
    s.monitor_interval_s = float(data.get("monitor", {}).get("interval_s", s.monitor_interval_s))
    results = data.get("results", {})
    s.max_tuples_per_document = int(results.get("max_tuples_per_document", s.max_tuples_per_document))
    if s.max_tuples_per_document < 0:
        raise ValueError("settings.toml: [results] max_tuples_per_document must be 0 (no limit) or more")
    s.input_folders = [str(f) for f in data.get("batch", {}).get("input_folders", [])]
    api = data.get("api", {})
    s.api = ApiSettings(**{k: v for k, v in api.items() if k in ApiSettings.__dataclass_fields__})
    s.api.token = os.environ.get("IEW_API_TOKEN", s.api.token)
    weights = data.get("weights", {})
    unknown = sorted(set(weights) - set(WeightsSettings.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{path}: [weights] has no setting {unknown[0]!r}; known: "
                         + ", ".join(WeightsSettings.__dataclass_fields__))
    s.weights = WeightsSettings(**{k: str(v) for k, v in weights.items()})
    s.source = path
    return s
