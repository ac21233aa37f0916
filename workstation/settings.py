"""User settings (settings.toml at the repo root, or the file IEW_SETTINGS names), with working defaults.

The file is checked against the schema below (pydantic-settings): an unknown key or section, or a value of the
wrong type, is one SettingsError naming the key and the file, never silently dropped. Environment variables
override the file: IEW_<SECTION>__<KEY>, e.g. IEW_UI__PORT=8600 or IEW_MODELS__SEQGPT__DEVICE=cpu (docs/settings.md).
Relative paths in the file are relative to the file's own folder.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, TomlConfigSettingsSource
from pydantic_settings import SettingsError as SourceError

from contracts.batching import batch_setting

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATH = Path(os.environ.get("IEW_SETTINGS", ROOT / "settings.toml"))
ENV_PREFIX = "IEW_"
ENV_NESTING = "__"


class SettingsError(ValueError):
    """settings.toml (or an IEW_* override) names an unknown key or holds a value of the wrong type."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSettings(_Section):
    """[models.NAME]: one model family's weights and where and how it runs."""

    weights: str = ""            # official checkpoint dir; "" = use the demo weights
    device: str = "auto"         # auto | cpu | cuda | cuda:N
    dtype: Literal["fp32", "fp16", "bf16"] = "fp32"
    batch_size: int | str = 16   # or "auto": the model's table for the device's memory (engine.batch_size_for)

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, value):
        return batch_setting(value, "batch_size")


class ApiSettings(_Section):
    """[api] in settings.toml: the HTTP API of `launcher.py serve` (docs/api.md)."""

    host: str = "127.0.0.1"          # loopback only; any other address needs a token
    port: int = 8502
    token: str = ""                  # bearer token; IEW_API_TOKEN overrides; required off loopback
    cors_origins: list[str] = Field(default_factory=list)     # [] = no CORS headers at all
    models: list[str] = Field(default_factory=list)            # served models; [] = every installed one
    max_body_bytes: int = 16 * 1024 * 1024
    max_documents: int = 256         # per /v1/extract request; more go through /v1/jobs
    queue_size: int = 64             # waiting requests per (model, device) before 429
    batch_wait_ms: float = 5.0       # how long the first request waits for others to share its pass
    max_batch_documents: int = 64    # documents per shared forward pass
    timeout_s: float = 120.0         # per /v1/extract request, queueing included
    # server processes; each loads its own models and shares the history (SQLite, WAL). >1 where one Python
    # process is the limit (a CPU host); the CPU's cores are split between them.
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    label_studio_model: str = ""     # the model behind /ls; "" = the first installed one that reads a schema


class WeightsSettings(_Section):
    """[weights] in settings.toml: where `launcher.py weights fetch` puts official checkpoints and which hub
    servers it asks (a mirror behind a firewall). The environment wins over the file: HF_ENDPOINT, and
    MODELSCOPE_ENDPOINT or its older name MODELSCOPE_DOMAIN."""

    dir: str = ""                    # "" = weights/ beside the history database
    huggingface_endpoint: str = ""   # "" = the client's default (https://huggingface.co)
    modelscope_endpoint: str = ""    # "" = the client's default (https://modelscope.cn)


class _Optimizations(_Section):
    enabled: list[str] = Field(default_factory=list)


class _Storage(_Section):
    database: str = "data/runs.db"
    demo_weights_dir: str = "data/demo-weights"
    demo_size: Literal["auto", "full", "tiny"] = "auto"


class _Results(_Section):
    max_tuples_per_document: Annotated[int, Field(ge=0)] = 10_000


class _Batch(_Section):
    input_folders: list[str] = Field(default_factory=list)


class _Ui(_Section):
    host: str = "127.0.0.1"
    port: int = 8501


class _Monitor(_Section):
    interval_s: Annotated[float, Field(gt=0)] = 1.0


class SettingsFile(BaseSettings):
    """The layout of settings.toml, section by section. Sources, strongest first: IEW_* environment variables,
    then the file (read by load_settings through pydantic-settings' TOML source and passed in)."""

    model_config = SettingsConfigDict(extra="forbid", env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTING,
                                      nested_model_default_partial_update=True)

    models: dict[str, ModelSettings] = Field(default_factory=dict)
    optimizations: _Optimizations = Field(default_factory=_Optimizations)
    storage: _Storage = Field(default_factory=_Storage)
    weights: WeightsSettings = Field(default_factory=WeightsSettings)
    results: _Results = Field(default_factory=_Results)
    batch: _Batch = Field(default_factory=_Batch)
    ui: _Ui = Field(default_factory=_Ui)
    monitor: _Monitor = Field(default_factory=_Monitor)
    api: ApiSettings = Field(default_factory=ApiSettings)

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        return env_settings, init_settings          # the environment wins over the file; no .env, no secrets dir


@dataclass
class Settings:
    """What the rest of the workstation reads: the file's sections flattened to the names used everywhere."""

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

    def base(self) -> Path:
        """The folder relative paths are relative to: the settings file's (as its header says), else the project's."""
        return self.source.resolve().parent if self.source else ROOT

    def path(self, relative: str) -> Path:
        p = Path(relative).expanduser()
        return p if p.is_absolute() else self.base() / p

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
    """The settings in `path` (default: DEFAULT_PATH; a missing file means all defaults) with IEW_* overrides.
    Raises SettingsError naming the file and the key when one is unknown or has a value of the wrong type."""
    path = Path(path or DEFAULT_PATH)
    try:
        in_file = TomlConfigSettingsSource(SettingsFile, toml_file=path)() if path.exists() else {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SettingsError(f"{path}: not valid TOML: {e}") from None
    try:
        parsed = SettingsFile(**in_file)
    except ValidationError as e:
        raise SettingsError(_first_problem(e, path, in_file)) from None
    except SourceError as e:            # an IEW_* value for a list or a table that is not JSON
        field = str(e).split('"')[1] if str(e).count('"') >= 2 else ""
        names = sorted(n for n in os.environ if n.upper().startswith(f"{ENV_PREFIX}{field.upper()}{ENV_NESTING}"))
        raise SettingsError(f"environment variable {' or '.join(names) or ENV_PREFIX + field.upper()}: "
                            f"{e.__cause__ or e}; a list or a table is written as JSON, e.g. '[\"a\", \"b\"]'") from None
    api = parsed.api.model_copy()
    api.token = os.environ.get("IEW_API_TOKEN", api.token)      # the older, shorter name of IEW_API__TOKEN
    return Settings(
        models=dict(parsed.models), optimizations=list(parsed.optimizations.enabled),
        database=parsed.storage.database, demo_weights_dir=parsed.storage.demo_weights_dir,
        demo_size_setting=parsed.storage.demo_size, ui_host=parsed.ui.host, ui_port=parsed.ui.port,
        monitor_interval_s=parsed.monitor.interval_s,
        max_tuples_per_document=parsed.results.max_tuples_per_document,
        input_folders=list(parsed.batch.input_folders), api=api, weights=parsed.weights, source=path)


def _first_problem(error: ValidationError, path: Path, in_file: dict[str, Any]) -> str:
    """One line for the first problem: where it is (the environment variable that set it, else the file's
    [section] key) and what is wrong with it; the others, if any, are counted."""
    problem = error.errors()[0]
    loc = [str(part) for part in problem["loc"]]
    section, key = loc[:-1], loc[-1]
    if problem["type"] == "extra_forbidden":
        known = _known_keys(section)
        what = f"has no {'setting' if section else 'section'} {key!r}" + (f"; known: {', '.join(known)}" if known else "")
    else:
        message = problem["msg"].removeprefix("Value error, ").removeprefix(f"{key}: ")
        shown = repr(problem.get("input"))
        what = f"{key}: {message}" + (f" (got {shown})" if "input" in problem and shown not in message else "")
    variable = f"{ENV_PREFIX}{ENV_NESTING.join(loc)}".upper()
    table = f"[{'.'.join(section)}] " if section else ""
    if variable in {name.upper() for name in os.environ} or not _found(in_file, loc):
        where = f"environment variable {variable}: "
        what = table + what if problem["type"] == "extra_forbidden" else what.removeprefix(f"{key}: ")
    else:
        where = f"{path}: {table}"
    more = len(error.errors()) - 1
    return where + what + (f" (and {more} more)" if more else "")


def _found(data: Any, loc: list[str]) -> bool:
    for part in loc:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def _known_keys(section: list[str]) -> list[str]:
    """The keys a section of the file may hold ([] where any name goes, as for the tables under [models])."""
    model: type[BaseModel] = SettingsFile
    parts = iter(section)
    for part in parts:
        if model is SettingsFile and part == "models":
            if next(parts, None) is None:
                return []
            model = ModelSettings
            continue
        info = model.model_fields.get(part)
        if info is None or not (isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)):
            return []
        model = info.annotation
    return list(model.model_fields)
