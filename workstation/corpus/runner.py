"""`launcher.py corpus`: one extraction job over many input files, on a local Ray runtime or a cluster.

    read_binary_files(shards) -> map_batches(parse_shards)               the CLI's parser, per file
        -> map_batches(ExtractionWorker, actor pool, GPUs per worker)   the CLI's engine, model loaded once
        -> write_parquet(OUT_DIR/_staging, partition_cols=["shard"])    streamed as results come
    then each fully staged shard becomes OUT_DIR/part-KEY.(parquet|jsonl) and the manifest says so.

Resuming, exactly once: see workstation/corpus/layout.py. Progress: a Tally actor the parsers and workers
report to; the driver shows it as a bar with documents/s per worker and copies the counts to the store's
jobs table (the Batch page), where a cancel stops the run as Ctrl-C does.
"""
from __future__ import annotations

import _thread
import logging
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import ray.data

from workstation import engine, plugins
from workstation.corpus.layout import FORMATS, OutputDir, Shard, finalise_shard, manifest_entry, now, plan_shards
from workstation.corpus.work import ExtractionWorker, parse_shards
from workstation.domain import InputError, WeightsError
from workstation.settings import ROOT

log = logging.getLogger(__name__)
# Compared on a rerun: results made under another of these must not be mixed into one output.
IDENTITY = ("model", "weights_hash", "optimizations", "dtype", "configured_dtype", "schema", "options", "format")
# Shipped to a cluster with the code (runtime_env working_dir): never the venv, data or weights.
TALLY_PREFIX = "iew-corpus-tally-"
NOT_SHIPPED = [".venv", ".git", "data", "**/__pycache__", "docs/screenshots", "*.safetensors", "*.bin"]


@dataclass
class CorpusJob:
    model: str
    weights: Path
    input: str                               # a file or a glob
    output: Path
    address: str | None = None               # None: a local Ray runtime; "auto" or "ray://host:port": a cluster
    workers: int | None = None               # default: one per GPU (per --gpus-per-worker), else one on the CPUs
    gpus_per_worker: float | None = None     # default: 1 where there are GPUs, else 0
    batch_size: int = 16
    optimizations: list[str] = field(default_factory=list)
    dtype: str | None = None
    configured_dtype: str = "fp32"
    format: str = "parquet"
    schema: Any = None                       # the default for lines without one (--schema)
    options: dict = field(default_factory=dict)
    store: Path | None = None                # the history database; None: do not record
    rows_per_call: int | None = None         # documents per worker call (default: 4 x batch size, at least 32)
    progress: bool = True


def run(job: CorpusJob) -> dict:
    """Run (or resume) the job; returns the final manifest. KeyboardInterrupt leaves a resumable directory."""
    check(job)
    out = OutputDir(job.output)
    with out.locked():
        shards = plan_shards(job.input, out.root)
        manifest = reconcile(out, job, shards)
        pending = [s for s in shards if manifest["shards"][s.key]["status"] != "done"]
        done_lines, complete = {}, []
        for s in pending:                          # a rerun: finish what a stop left fully staged
            lines, total = out.done_lines(s.key)
            if total is not None and len(lines) == total:
                complete.append((s, finalise_shard(str(out.root), _ref(s), job.format)))
            elif lines:
                done_lines[s.key] = sorted(lines)
        finish(out, manifest, complete)
        pending = [s for s in pending if manifest["shards"][s.key]["status"] != "done"]
        out.write_manifest(manifest)
        if pending:
            execute(job, out, manifest, pending, done_lines)
        manifest["status"] = "done"
        count(manifest)
        out.write_manifest(manifest)
        return manifest


def check(job: CorpusJob) -> None:
    """Mistakes a person can fix, found before any worker starts."""
    if job.format not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)}")
    if job.batch_size < 1 or (job.workers is not None and job.workers < 1):
        raise InputError("--batch-size and --workers must be at least 1")
    if job.gpus_per_worker is not None and job.gpus_per_worker < 0:
        raise InputError("--gpus-per-worker cannot be negative")
    engine.family(job.model)
    unknown = [n for n in job.optimizations if n not in plugins.optimizations()]
    if unknown:
        raise InputError(f"unknown optimization(s) {', '.join(unknown)}; "
                         f"available: {', '.join(plugins.optimizations())}")
    if not Path(job.weights).is_dir():
        raise WeightsError(f"weights directory {job.weights} does not exist")


def identity(job: CorpusJob) -> dict:
    from storage.records import weights_checksum
    return {"model": job.model, "weights": str(Path(job.weights).resolve()),
            "weights_hash": weights_checksum(Path(job.weights).resolve()),
            "demo": engine.family(job.model).is_demo(Path(job.weights)),
            "optimizations": sorted(job.optimizations), "dtype": job.dtype, "configured_dtype": job.configured_dtype,
            "schema": job.schema, "options": dict(sorted(job.options.items())), "format": job.format,
            "batch_size": job.batch_size}


def reconcile(out: OutputDir, job: CorpusJob, shards: list[Shard]) -> dict:
    """The manifest for this run: a new one, or the previous run's with changed input files reset."""
    config = identity(job)
    manifest = out.read_manifest()
    if manifest is None:
        manifest = {"format_version": 1, "input": job.input, "job": config, "shards": {},
                    "timings": {"runs": []}, "store_job": None}
    else:
        before = manifest.get("job", {})
        changed = [k for k in IDENTITY if before.get(k) != config.get(k)]
        if changed:
            raise InputError(f"{out.root} holds results made with another {', '.join(changed)}; "
                             "use a new --output, or delete that directory to start again")
        manifest["job"] = config                # batch size and the like may change between runs
    for shard in shards:
        entry = manifest["shards"].get(shard.key)
        part_missing = entry is not None and entry["status"] == "done" and \
            not (out.root / entry.get("part", "")).is_file()
        if entry is not None and (not shard.same_file(entry) or part_missing):
            why = "changed since it was run" if not shard.same_file(entry) else "has lost its output part"
            print(f"note: {shard.path} {why}; it runs again", file=sys.stderr)
            out.drop_part(shard.key)
            out.drop_staging(shard.key)
            entry = None
        if entry is None:
            manifest["shards"][shard.key] = manifest_entry(shard)
    manifest["status"] = "running"
    count(manifest)
    return manifest


def finish(out: OutputDir, manifest: dict, finished: list[tuple[Shard, dict]]) -> None:
    """Parts in place: record them (one manifest write for many: it grows with the shards), then drop their
    staging. A stop between the two only repeats work."""
    if not finished:
        return
    for shard, counts in finished:
        manifest["shards"][shard.key].update(status="done", finished_at=now(), **counts)
    count(manifest)
    out.write_manifest(manifest)
    for shard, _ in finished:
        out.drop_staging(shard.key)


def count(manifest: dict) -> None:
    entries = manifest["shards"].values()
    done = [e for e in entries if e["status"] == "done"]
    manifest["counts"] = {"shards": len(manifest["shards"]), "shards_done": len(done),
                          "documents": sum(e["documents"] for e in done), "errors": sum(e["errors"] for e in done)}


def _ref(shard: Shard) -> dict:
    return {"key": shard.key, "path": shard.path}


# ---- running the pending shards on Ray ---------------------------------------------------------------------

@ray.remote(num_cpus=0)
class Tally:
    """Counts from the parsing tasks (entries per shard) and the workers (documents, errors, busy seconds)."""

    def __init__(self):
        self.totals: dict[str, int] = {}
        self.workers: dict[str, dict] = {}

    def record(self, kind: str, *args) -> None:
        if kind == "parsed":
            key, total = args
            self.totals[key] = total
            return
        name, device, documents, errors, seconds = args
        w = self.workers.setdefault(name, {"device": device, "documents": 0, "errors": 0, "busy_seconds": 0.0})
        w["documents"] += documents
        w["errors"] += errors
        w["busy_seconds"] += seconds

    def snapshot(self) -> dict:
        return {"totals": dict(self.totals), "workers": {k: dict(v) for k, v in self.workers.items()}}


class Reporter:
    """Picklable: parsers and workers call it; it forwards to the Tally without waiting."""

    def __init__(self, tally):
        self.tally = tally

    def __call__(self, kind: str, *args) -> None:
        self.tally.record.remote(kind, *args)


def connect(address: str | None, **init_args) -> bool:
    """Start a local Ray runtime (every GPU, else the CPUs) or join a cluster. True if we started it."""
    if ray.is_initialized():
        return False
    if address:
        # Cluster nodes get this checkout's code; each needs the project's requirements installed.
        env = {"working_dir": str(ROOT), "excludes": NOT_SHIPPED}
    else:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {"env_vars": {"PYTHONPATH": path}}
    try:
        ray.init(address=address, runtime_env=env, include_dashboard=False, logging_level=logging.WARNING,
                 **init_args)
    except ConnectionError as e:
        raise InputError(f"no Ray cluster could be reached at --address {address} ({e}); start one with "
                         "`ray start --head`, or leave --address out for a local runtime") from None
    return True


def workers_and_gpus(job: CorpusJob) -> tuple[int, float, float]:
    """(workers, GPUs per worker, CPUs per worker) from the cluster's resources and the job's choices."""
    resources = ray.cluster_resources()
    gpus, cpus = resources.get("GPU", 0.0), resources.get("CPU", 1.0)
    per = job.gpus_per_worker if job.gpus_per_worker is not None else (1.0 if gpus else 0.0)
    if per > 0:
        workers = job.workers or max(1, int(gpus // per))
        if workers * per > gpus:
            print(f"note: {workers} workers × {per:g} GPU need more than the {gpus:g} GPU(s) the cluster has now; "
                  "the job waits until an autoscaler adds them", file=sys.stderr)
        return workers, per, 1.0
    workers = job.workers or 1
    # CPU workers share the CPUs, keeping one for reading and writing.
    return workers, 0.0, max(1.0, (cpus - 1) // workers)


def execute(job: CorpusJob, out: OutputDir, manifest: dict, pending: list[Shard],
            done_lines: dict[str, list[int]]) -> None:
    started_here = connect(job.address)
    ray.data.DataContext.get_current().enable_progress_bars = False     # ours counts documents, not blocks
    store = Progress.open(job, manifest)
    out.write_manifest(manifest)
    started, run_entry = time.perf_counter(), {"started_at": now(), "address": job.address or "local",
                                               "ray": ray.__version__}
    # Named, so another driver on the cluster can read a running job's counts (ray.util.list_named_actors).
    tally = Tally.options(name=f"{TALLY_PREFIX}{uuid.uuid4().hex[:12]}").remote()
    watcher = Watcher(tally, manifest, pending, done_lines, store, job.progress)
    try:
        workers, gpus, cpus = workers_and_gpus(job)
        run_entry.update(worker_count=workers, gpus_per_worker=gpus)
        spec = {"model": job.model, "weights": str(Path(job.weights).resolve()), "device": "cuda" if gpus else "cpu",
                "optimizations": list(job.optimizations), "dtype": job.dtype, "configured_dtype": job.configured_dtype,
                "batch_size": job.batch_size, "options": dict(job.options)}
        reporter = Reporter(tally)
        ds = ray.data.read_binary_files([s.path for s in pending], include_paths=True)
        ds = ds.map_batches(parse_shards, batch_size=1, batch_format="numpy", num_cpus=0.5,
                            fn_kwargs={"keys": {s.path: s.key for s in pending}, "default": job.schema,
                                       "done": done_lines, "report": reporter})
        ds = ds.map_batches(ExtractionWorker, batch_size=job.rows_per_call or max(4 * job.batch_size, 32),
                            batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=workers),
                            num_gpus=gpus, num_cpus=cpus,
                            fn_constructor_kwargs={"job": spec, "report": reporter})
        watcher.start()
        ds.write_parquet(str(out.staging), partition_cols=["shard"], ray_remote_args={"num_cpus": 0.5})
        watcher.stop()
        unfinished = _finalise(job, out, manifest, pending)
        if unfinished:
            raise RuntimeError(f"{len(unfinished)} shard(s) are not complete after the run: "
                               f"{', '.join(unfinished[:5])}; run the command again")
        run_entry["status"] = "done"
    except KeyboardInterrupt:
        run_entry["status"] = "cancelled" if watcher.cancelled else "interrupted"
        raise
    except BaseException as e:
        run_entry["status"] = f"failed: {type(e).__name__}: {e}"
        raise
    finally:
        watcher.stop()
        wall = time.perf_counter() - started
        snap = watcher.last
        run_entry.update(finished_at=now(), wall_seconds=round(wall, 3),
                         documents=watcher.processed(), docs_per_second=watcher.processed() / wall if wall else None,
                         workers={name: {**w, "docs_per_second": w["documents"] / w["busy_seconds"]
                                         if w["busy_seconds"] else None} for name, w in snap["workers"].items()})
        manifest["timings"]["runs"].append(run_entry)
        manifest["status"] = run_entry["status"].split(":")[0]
        count(manifest)
        out.write_manifest(manifest)
        store.end(manifest, run_entry, watcher)
        watcher.summary(run_entry)
        try:
            ray.kill(tally)
        except Exception:                             # noqa: BLE001 - the cluster may be gone already
            pass
        if started_here:
            ray.shutdown()


def _finalise(job: CorpusJob, out: OutputDir, manifest: dict, pending: list[Shard]) -> list[str]:
    """Parts for the shards that are now fully staged, written by Ray tasks beside the data. Returns the others."""
    task = ray.remote(finalise_shard).options(num_cpus=0.5)
    shards = {task.remote(str(out.root), _ref(s), job.format): s for s in pending}
    waiting, unfinished, finished, written = list(shards), [], [], time.monotonic()
    while waiting:
        ready, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=2.0)
        for ref in ready:
            try:
                finished.append((shards[ref], ray.get(ref)))
            except ray.exceptions.RayTaskError as e:
                log.warning("%s", e)
                unfinished.append(shards[ref].path)
        if finished and (not waiting or time.monotonic() - written > 2.0):
            finish(out, manifest, finished)
            finished, written = [], time.monotonic()
    return unfinished


class Watcher:
    """Follows the Tally once a second: the terminal's progress bar, the store's counts, a cancel from the UI."""

    def __init__(self, tally, manifest: dict, pending: list[Shard], done_lines: dict, store: "Progress",
                 show: bool):
        self.tally, self.manifest, self.pending, self.store = tally, manifest, pending, store
        self.staged_before = {k: len(v) for k, v in done_lines.items()}
        self.last: dict = {"totals": {}, "workers": {}}
        self.cancelled = False
        self.started = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="corpus-progress", daemon=True)
        self.bar = None
        if show:
            from tqdm import tqdm
            # On a terminal a live bar; into a log file a line every half minute.
            self.bar = tqdm(total=None, unit="doc", desc="documents", file=sys.stderr, dynamic_ncols=True,
                            mininterval=0.5 if sys.stderr.isatty() else 30.0)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join(timeout=10)
            self._poll()
            if self.bar is not None:
                self.bar.close()

    def processed(self) -> int:
        return sum(w["documents"] for w in self.last["workers"].values())

    def totals(self) -> tuple[int, int | None]:
        """(documents done in all, documents in all or None while some shard is not parsed yet)."""
        entries = self.manifest["shards"].values()
        done_shards = sum(e.get("documents", 0) for e in entries if e["status"] == "done")
        known = self.last["totals"]
        todo = [known.get(s.key) for s in self.pending]
        done = done_shards + sum(self.staged_before.values()) + self.processed()
        total = None if None in todo else done_shards + sum(todo)
        return done, total

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self._poll()

    def _poll(self) -> None:
        try:
            self.last = ray.get(self.tally.snapshot.remote(), timeout=10)
        except Exception:                                 # noqa: BLE001 - the next poll tries again
            return
        done, total = self.totals()
        rates = [w["documents"] / w["busy_seconds"] for w in self.last["workers"].values() if w["busy_seconds"]]
        if self.bar is not None:
            self.bar.total = total
            if rates:
                self.bar.set_postfix_str(f"{len(rates)} worker(s), {min(rates):.1f}–{max(rates):.1f} docs/s each",
                                         refresh=False)
            self.bar.update(max(0, (min(done, total) if total is not None else done) - self.bar.n))
        elapsed = time.perf_counter() - self.started
        if self.store.update(total if total is not None else done, done, elapsed,
                             self.processed() / elapsed if elapsed else None) == "cancelled" and not self.cancelled:
            self.cancelled = True
            print("\ncancelled from the Batch page: stopping (run the command again to resume)", file=sys.stderr)
            _thread.interrupt_main()

    def summary(self, run_entry: dict) -> None:
        workers = run_entry.get("workers") or {}
        for name, w in sorted(workers.items()):
            rate = f"{w['docs_per_second']:.1f} docs/s" if w["docs_per_second"] else "-"
            print(f"  worker {name} ({w['device']}): {w['documents']} documents, {rate} while busy",
                  file=sys.stderr)


class Progress:
    """The job's counts in the workstation's store (the Batch page). Unreachable store: a warning, no more."""

    def __init__(self, store=None, job_id: int | None = None, owner: str = ""):
        self.store, self.job_id, self.owner = store, job_id, owner
        self._last = 0.0

    @classmethod
    def open(cls, job: CorpusJob, manifest: dict) -> "Progress":
        if job.store is None:
            return cls()
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        try:
            from storage.repository import open_store
            store = open_store(job.store)
            job_id = store.begin_corpus_job(
                manifest.get("store_job"), f"corpus: {job.input}", str(Path(job.output).resolve()), job.model,
                str(job.weights), owner=owner, device=job.address or "local", dtype=job.dtype or job.configured_dtype,
                batch_size=job.batch_size, optimizations=job.optimizations, options=job.options)
        except Exception as e:                        # noqa: BLE001 - the corpus job does not need the store
            print(f"warning: the job's progress will not be in the history database ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return cls()
        manifest["store_job"] = job_id
        return cls(store, job_id, owner)

    def update(self, total: int, done: int, seconds: float, rate: float | None) -> str | None:
        if self.store is None or time.perf_counter() - self._last < 1.0:
            return None
        self._last = time.perf_counter()
        try:
            return self.store.corpus_progress(self.job_id, self.owner, total=total, done=done, wall_seconds=seconds,
                                              docs_per_second=rate)
        except Exception:                             # noqa: BLE001 - a busy database must not stop the job
            log.warning("corpus job %s: progress not recorded", self.job_id, exc_info=True)
            return None

    def end(self, manifest: dict, run_entry: dict, watcher: Watcher) -> None:
        if self.store is None:
            return
        status = run_entry["status"]
        if status == "done":                          # every part written: the manifest has the exact count
            done = total = manifest["counts"]["documents"]
        else:
            done, total = watcher.totals()
        self._last = 0.0
        self.update(total if total is not None else done, done, run_entry["wall_seconds"], run_entry["docs_per_second"])
        outcome = "done" if status == "done" else "cancelled" if status in ("cancelled", "interrupted") else "failed"
        error = None if outcome == "done" else (
            f"{status}: run the same corpus command again to resume; finished shards are kept")
        try:
            self.store.end_corpus_job(self.job_id, self.owner, outcome, error)
        except Exception:                             # noqa: BLE001
            log.warning("corpus job %s: end not recorded", self.job_id, exc_info=True)
        finally:
            self.store.close()
