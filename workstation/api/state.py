"""What the API's routes share, once per server process: settings, the store, the models, the lanes,
the job runner and the GPU recorder (the API's counterpart of workstation/ui/state.py).

An extraction goes: documents -> a lane of (model, device) -> a shared pass through engine.run on a model
borrowed from the shelf (the documents checked there, once, before the model is taken; optimizations and
the dtype rule set as for the CLI) -> one Run per request in the store, so History shows it. Jobs are the
UI's batch jobs: the same tables and the same JobRunner, borrowing this shelf's models per slice.
"""
from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from contracts.domain import Document, InputError, Result
from contracts.report import RunReport
from storage.repository import Store, open_store
from storage.views import JobStatus
from workstation import engine, plugins
from workstation.api import label_studio
from workstation.api.lanes import LaneRequest, Lanes
from workstation.api.recorder import Recorder
from workstation.jobs import JobRunner, job_config
from workstation.monitor import GpuRecorder, NvmlMonitor
from workstation.run_config import Overrides, RunConfig, resolve
from workstation.settings import Settings
from workstation.shelf import ModelShelf

log = logging.getLogger(__name__)
DEVICE_WORDS = ("auto", "cpu", "cuda")
OPTION_LIMIT = 4096          # no numeric model option above this: a typo must not hold a GPU for hours


@dataclass
class Extraction:
    """One request's share of a pass: its results in input order, and its run's id in the history once
    the recorder has written it (None when not recorded)."""

    recorded: Future
    report: RunReport
    shared_with: int                    # requests in the pass (1: it ran alone)


class ApiState:
    def __init__(self, settings: Settings, store: Store | None = None, monitor_factory: Callable = NvmlMonitor,
                 shelf: ModelShelf | None = None, record: bool = True):
        self.settings = settings
        # Checked before anything is opened: a setting naming no usable model stops `serve` with its name.
        self.label_studio_model = label_studio.backend_model(settings.api.label_studio_model, plugins.model_families())
        self.store = store or open_store(settings.path(settings.database))
        self.shelf = shelf or ModelShelf()
        self.record = record
        api = settings.api
        self.lanes = Lanes(self._execute, api.queue_size, api.batch_wait_ms / 1000, api.max_batch_documents)
        self.recorder = Recorder(self.store)
        self.jobs = JobRunner(self.store, borrow=self.borrow_for_job)
        self._monitor_factory = monitor_factory
        self.gpus: GpuRecorder | None = None
        self.label_studio_projects: dict[str, Any] = {}      # LS project id -> its parsed label config

    def start(self) -> None:
        try:
            self.gpus = GpuRecorder(self._monitor_factory(), self.settings.monitor_interval_s).start()
        except Exception as e:                  # noqa: BLE001 - no monitor is not a reason to refuse requests
            log.warning("GPU monitor unavailable: %s", e)
        self.jobs.resume_unfinished()           # jobs cut off by a shutdown (of the API or the UI) go on

    def stop(self) -> None:
        self.lanes.stop()
        self.recorder.stop()
        if self.gpus is not None:
            self.gpus.stop()

    # ---- what the routes ask ---------------------------------------------------------------------------

    def families(self) -> dict:
        served = self.settings.api.models
        return {n: f for n, f in plugins.model_families().items() if not served or n in served}

    def family(self, name: str):
        families = self.families()
        if name not in families:
            raise InputError(f"unknown model {name!r}; served: {', '.join(families) or 'none'}")
        return families[name]

    def device(self, model: str, asked: str | None) -> str:
        """The device a request runs on: asked for, else settings.toml's; checked before anything queues."""
        device = asked or self.settings.model(model).device
        word, _, index = device.partition(":")
        if word not in DEVICE_WORDS or (index and (word != "cuda" or not index.isdigit())):
            raise InputError(f"device {device!r} is not one of auto, cpu, cuda, cuda:N")
        try:
            device = engine.resolve_device(device)
        except RuntimeError as e:
            raise InputError(str(e)) from None
        if index and int(index) >= torch.cuda.device_count():
            raise InputError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
        return device

    def config(self, model: str, device: str | None, dtype: str | None, optimizations: Sequence[str] | None,
               options: dict[str, Any] | None, batch_size: int | None) -> RunConfig:
        """A request's run configuration: what it asked for over settings.toml's (run_config.resolve), checked
        (InputError names the field). Without named optimizations, settings.toml's run where they apply."""
        fam = self.family(model)
        options = dict(options or {})
        check_options(fam, options)
        return resolve(self.settings, fam, Overrides(device=self.device(model, device), dtype=dtype,
                                                     batch_size=batch_size, optimizations=optimizations,
                                                     options=options))

    def documents(self, model: str, items: Sequence[dict[str, Any]], check: bool = False) -> list[Document]:
        """Request documents -> Documents; `line` is each one's 1-based position. An extraction's documents
        are checked by engine.run in its pass (a bad one fails its own request alone: lanes.py); a job's are
        checked here with `check`, so a bad document is refused before anything is queued."""
        fam = self.family(model)
        documents = []
        for n, item in enumerate(items, start=1):
            doc = Document(str(item.get("id") if item.get("id") is not None else n), item["text"],
                           item.get("schema"), item.get("task"), item.get("labels"), line=n)
            if check:
                fam.check(doc)
            documents.append(doc)
        return documents

    def submit(self, config: RunConfig, documents: list[Document]) -> LaneRequest:
        request = LaneRequest(config, documents)
        self.lanes.submit(request)
        return request

    # ---- the lanes' worker: one pass for several requests ----------------------------------------------

    def _execute(self, config: RunConfig, requests: Sequence[LaneRequest]) -> list[Extraction]:
        documents = [d for r in requests for d in r.documents]
        key = self.shelf_key(config)
        report = engine.run(lambda: self.shelf.borrow(key), documents, config, family=self.family(config.model))
        return self._split(config, requests, report)

    @staticmethod
    def optimizations_for(model, config: RunConfig) -> list[str]:
        """Those asked for by name (each must apply), or settings.toml's defaults where they apply to this model."""
        names = config.optimizations or ()
        return engine.applicable(model, names) if config.only_applicable else list(names)

    def shelf_key(self, config: RunConfig):
        # Weights load in fp32 and every (dtype, optimizations) set gets its own load, so a pass never runs
        # on weights cast down and back up by an earlier request: outputs match a fresh CLI run.
        wanted = frozenset(config.optimizations or ()) | {f"dtype={config.load_dtype}"}
        return ModelShelf.key(config.model, config.weights, config.device, "fp32", wanted)

    def borrow_for_job(self, job: JobStatus, device: str):
        """A job's slice runs on the model of this shelf that an extraction with the job's settings uses."""
        return self.shelf.borrow(self.shelf_key(job_config(job, self.settings).replace(device=device)))

    def _split(self, config: RunConfig, requests: Sequence[LaneRequest], report: RunReport) -> list[Extraction]:
        out, start = [], 0
        chars = sum(len(d.text) for r in requests for d in r.documents) or 1
        for r in requests:
            results: list[Result] = report.results[start:start + len(r.documents)]
            start += len(r.documents)
            share = sum(len(d.text) for d in r.documents) / chars
            # The pass's time and memory are every request's; its tokens are shared out by text length.
            own = replace(report, documents=len(r.documents), results=results,
                          tokens=round(report.tokens * share) if len(requests) > 1 else report.tokens)
            if self.record:
                snapshot = {"surface": "api", "summary": own.summary(),
                            "shared_pass": {"requests": len(requests), "documents": report.documents}}
                recorded = self.recorder.record(own, r.documents, snapshot)
            else:
                recorded = Future()
                recorded.set_result(None)
            out.append(Extraction(recorded, own, len(requests)))
        return out

    # ---- jobs ----------------------------------------------------------------------------------------

    def create_job(self, config: RunConfig, documents: list[Document], source_name: str) -> int:
        names = list(config.optimizations or ())
        if config.only_applicable and names:     # a job runs what it lists: only the defaults that apply
            with self.shelf.borrow(self.shelf_key(config)) as model:
                names = self.optimizations_for(model, config)
        job_id = self.store.create_job(
            documents, config.model, str(config.weights), config.batch_size, names,
            config.option_values, source_name, device=config.device, dtype=config.load_dtype,
            settings_snapshot={"surface": "api", **config.replace(optimizations=names).snapshot()})
        self.jobs.submit(job_id)
        return job_id

    def loaded(self) -> dict[str, list[str]]:
        """model -> devices it is loaded on in this process."""
        out: dict[str, list[str]] = {}
        for key in self.shelf.loaded():
            out.setdefault(key[0], []).append(key[2])
        return out


def check_options(fam, options: dict[str, Any]) -> None:
    """Options a model takes, of the type of their default, numbers within [0, OPTION_LIMIT]."""
    allowed = dict(fam.options)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) or "no options"
        raise InputError(f"{fam.name} does not take option(s) {', '.join(unknown)}; it takes {takes}")
    for name, value in options.items():
        default = allowed[name]
        if value is None:
            continue
        if isinstance(default, bool) or isinstance(value, bool):
            ok = isinstance(value, bool) and isinstance(default, bool)
        elif isinstance(default, (int, float)):
            ok = isinstance(value, (int, float))
            low = 1 if isinstance(default, int) else 0
            if ok and not (low <= value <= OPTION_LIMIT and (isinstance(default, int) or value > 0)):
                raise InputError(f"option {name!r} must be {'an integer ' if isinstance(default, int) else ''}"
                                 f"{'from 1' if low else 'above 0'} up to {OPTION_LIMIT}, got {value}")
            if ok and isinstance(default, int) and not float(value).is_integer():
                raise InputError(f"option {name!r} must be an integer, got {value}")
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise InputError(f"option {name!r} must be of type {type(default).__name__}, got {type(value).__name__}")
