"""`launcher.py corpus`: one extraction job over many input files, on a local Ray runtime or a cluster.

    read_binary_files(shards) -> map_batches(parse_shards)               the CLI's parser, per file
        -> map_batches(ExtractionWorker, actor pool, GPUs per worker)   the CLI's engine, model loaded once
        -> write_parquet(OUT_DIR/_staging, partition_cols=["shard"])    streamed as results come
    then each fully staged shard becomes OUT_DIR/part-KEY.(parquet|jsonl) and the manifest says so.

Resuming, exactly once: see workstation/corpus/layout.py. Progress: a Tally actor the parsers and workers
report to; the driver shows it as a bar with documents/s per worker and copies the counts to the store's
jobs table (the Batch page), where a cancel stops the run as Ctrl-C does (workstation/corpus/progress.py).
"""
from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import ray.data

from contracts.domain import InputError, WeightsError
from workstation import engine, plugins
from workstation.corpus import runtime
from workstation.corpus.layout import EMPTY, FORMATS, OutputDir, Shard, finalise_shard, manifest_entry, now, plan_shards
from workstation.corpus.progress import TALLY_PREFIX, Progress, Reporter, Tally, Watcher
from workstation.corpus.work import ExtractionWorker, parse_shards
from workstation.inputs import defaults_for
from workstation.run_config import MAX_TUPLES, RunConfig
from workstation.settings import ROOT

log = logging.getLogger(__name__)
# Compared on a rerun: results made under another of these must not be mixed into one output.
IDENTITY = ("model", "weights_hash", "optimizations", "dtype", "configured_dtype", "schema", "options", "format")
# Shipped to a cluster with the code (runtime_env working_dir): never the venv, data or weights.
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
    only_applicable: bool = False            # the optimizations are settings.toml's: on where they apply
    max_tuples: int = MAX_TUPLES             # tuples kept per document (0: no limit)

    @classmethod
    def of(cls, config: RunConfig, input: str, output: Path, **rest) -> CorpusJob:
        """The job of a resolved run configuration (workstation/run_config.py); each worker runs it on its device."""
        return cls(config.model, config.weights, input, output, batch_size=config.batch_size,
                   optimizations=list(config.optimizations or ()), dtype=config.dtype,
                   configured_dtype=config.configured_dtype or "fp32", options=config.option_values,
                   only_applicable=config.only_applicable, max_tuples=config.max_tuples, **rest)


def run(job: CorpusJob) -> dict:
    """Run (or resume) the job; returns the final manifest. KeyboardInterrupt leaves a resumable directory."""
    check(job)
    out = OutputDir(job.output)
    shards = plan_shards(job.input, out.root)        # before the directory is made: a glob of nothing makes none
    started, started_at = time.perf_counter(), now()
    with out.locked():
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
        account_for_killed_runs(manifest, written(manifest, done_lines))
        out.write_manifest(manifest)
        if pending:
            execute(job, out, manifest, pending, done_lines)
        elif complete:     # a rerun that only finalised what a stopped run had staged: a run of its own
            wall = time.perf_counter() - started
            manifest["timings"]["runs"].append({"started_at": started_at, "finished_at": now(), "address": None,
                                                "status": "done", "wall_seconds": round(wall, 3), "documents": 0,
                                                "docs_per_second": None, "parts": len(complete)})
        manifest["status"] = "done"
        count(manifest)
        if complete and not pending:
            Progress.open(job, manifest).completed(manifest)       # (may set manifest["store_job"])
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
    if Path(job.output).exists() and not Path(job.output).is_dir():
        raise InputError(f"--output {job.output} is a file; it must name a directory (a new one, or one this "
                         "command wrote before)")
    defaults_for(engine.family(job.model).reads, job.schema)       # --schema of the kind the model reads
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

def connect(address: str | None, **init_args) -> bool:
    """Start a local Ray runtime (every GPU, else the CPUs) or join a cluster. True if we started it: then
    `disconnect()` ends it, and it ends with this process however the process ends (corpus/runtime.py)."""
    if ray.is_initialized():
        return False
    if address:
        # Cluster nodes get this checkout's code; each needs the project's requirements installed.
        env = {"working_dir": str(ROOT), "excludes": NOT_SHIPPED}
    else:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {"env_vars": {"PYTHONPATH": path}}

    def init():         # "local": a runtime of our own, never another driver's that happens to be running
        ray.init(address=address or "local", runtime_env=env, include_dashboard=False, logging_level=logging.WARNING,
                 **init_args)
    try:
        init() if address else runtime.start(init)
    except ConnectionError as e:
        raise InputError(f"no Ray cluster could be reached at --address {address} ({e}); start one with "
                         "`ray start --head`, or leave --address out for a local runtime") from None
    return True


def disconnect() -> None:
    runtime.stop()


READING_CPUS = 1.0        # reading, parsing and writing take 0.5 each: workers never take these
MIN_CPU_SHARE = 0.25      # below this, more workers are more model copies on the same cores, no faster


def workers_and_gpus(job: CorpusJob, local: bool = False) -> tuple[int, float, float]:
    """(workers, GPUs per worker, CPUs per worker) from the cluster's resources and the job's choices.

    Workers hold their CPUs for the whole run, so they share what reading and writing leave: a worker
    that reserved every CPU kept the file-reading task from ever starting (0 documents, then Ray Data's
    no-progress limit). A count the machine cannot hold is refused here, before any worker starts."""
    resources = ray.cluster_resources()
    gpus, cpus = resources.get("GPU", 0.0), resources.get("CPU", 1.0)
    per = job.gpus_per_worker if job.gpus_per_worker is not None else (1.0 if gpus else 0.0)
    if per > 0:
        workers = job.workers or max(1, int(gpus // per))
        if workers * per > gpus:
            if local:
                raise InputError(f"--workers {workers} × --gpus-per-worker {per:g} need {workers * per:g} GPU(s); "
                                 f"this machine has {gpus:g}")
            print(f"note: {workers} workers × {per:g} GPU need more than the {gpus:g} GPU(s) the cluster has now; "
                  "the job waits until an autoscaler adds them", file=sys.stderr)
    else:
        workers = job.workers or 1
    room = cpus - READING_CPUS if cpus >= 2 * READING_CPUS else cpus / 2
    share = room / workers
    if share < MIN_CPU_SHARE:
        most = max(1, int(room / MIN_CPU_SHARE))
        raise InputError(f"--workers {workers} is more than {cpus:g} CPU(s) can hold: each worker would get "
                         f"{share:.2f} CPU after {cpus - room:g} kept for reading and writing; use at most {most}")
    if per > 0:                 # a GPU worker prepares and decodes on one CPU, when there are enough
        return workers, per, min(1.0, _fraction(share))
    # CPU workers share the rest: whole CPUs where there are enough, else a fraction of one.
    return workers, 0.0, float(int(share)) if share >= 1 else _fraction(share)


def _fraction(share: float) -> float:
    """Rounded down to Ray's resource precision (1/10,000), so the shares never add up to more than there is."""
    return int(share * 10_000) / 10_000


def execute(job: CorpusJob, out: OutputDir, manifest: dict, pending: list[Shard],
            done_lines: dict[str, list[int]]) -> None:
    started_here = connect(job.address)
    try:
        workers, gpus, cpus = workers_and_gpus(job, local=not job.address)
    except BaseException as e:
        if started_here:
            disconnect()
        # Nothing ran: the manifest must not go on saying "running".
        manifest["status"] = "refused" if isinstance(e, InputError) else "failed"
        out.write_manifest(manifest)
        raise
    ray.data.DataContext.get_current().enable_progress_bars = False     # ours counts documents, not blocks
    store = Progress.open(job, manifest)
    before = written(manifest, done_lines)
    started, run_entry = time.perf_counter(), {"started_at": now(), "address": job.address or "local",
                                               "ray": ray.__version__, "status": "running",
                                               "worker_count": workers, "gpus_per_worker": gpus}
    # In the manifest from the start: a run killed outright leaves it "running", and the next run accounts
    # for it (account_for_killed_runs).
    manifest["timings"]["runs"].append(run_entry)
    out.write_manifest(manifest)
    # Named, so another driver on the cluster can read a running job's counts (ray.util.list_named_actors).
    tally = Tally.options(name=f"{TALLY_PREFIX}{uuid.uuid4().hex[:12]}").remote()
    watcher = Watcher(tally, manifest, pending, done_lines, store, job.progress)
    try:
        spec = {"model": job.model, "weights": str(Path(job.weights).resolve()), "device": "cuda" if gpus else "cpu",
                "optimizations": list(job.optimizations), "dtype": job.dtype, "configured_dtype": job.configured_dtype,
                "batch_size": job.batch_size, "options": dict(job.options),
                "only_applicable": job.only_applicable, "max_tuples": job.max_tuples}
        reporter = Reporter(tally)
        # Half a CPU, as parsing and writing take: Ray Data's default of a whole one did not fit what the workers
        # leave on a one-CPU machine (READING_CPUS).
        ds = ray.data.read_binary_files([s.path for s in pending], include_paths=True,
                                        ray_remote_args={"num_cpus": 0.5})
        ds = ds.map_batches(parse_shards, batch_size=1, batch_format="numpy", num_cpus=0.5,
                            fn_kwargs={"keys": {s.path: s.key for s in pending}, "default": defaults_for(engine.family(job.model).reads, job.schema),
                                       "done": done_lines, "report": reporter})
        ds = ds.map_batches(ExtractionWorker, batch_size=job.rows_per_call or max(4 * job.batch_size, 32),
                            batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=workers),
                            num_gpus=gpus, num_cpus=cpus,
                            fn_constructor_kwargs={"job": spec, "report": reporter})
        watcher.start()
        ds.write_parquet(str(out.staging), partition_cols=["shard"], ray_remote_args={"num_cpus": 0.5})
        watcher.stop()
        if watcher.cancelled:           # a cancel whose interrupt never reached this thread still stops the job
            raise KeyboardInterrupt
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
        try:
            ray.kill(tally)
        except Exception:                             # noqa: BLE001 - the cluster may be gone already
            pass
        if started_here:            # before counting: no write of this run lands after the count
            disconnect()
        wall = time.perf_counter() - started
        snap = watcher.last
        # The documents this run added to the output, each once: the tally's counts are per batch, and a batch
        # retried after a worker died counts twice there (8,128 for 8,000 rows).
        unfinished = [s.key for s in pending if manifest["shards"][s.key]["status"] != "done"]
        documents = written(manifest, {key: out.staged_lines(key) for key in unfinished}) - before
        run_entry.update(finished_at=now(), wall_seconds=round(wall, 3),
                         documents=documents, docs_per_second=documents / wall if wall else None,
                         workers={name: {**w, "docs_per_second": w["documents"] / w["busy_seconds"]
                                         if w["busy_seconds"] else None} for name, w in snap["workers"].items()})
        manifest["status"] = run_entry["status"].split(":")[0]
        count(manifest)
        out.write_manifest(manifest)
        store.end(manifest, run_entry, watcher)
        watcher.summary(run_entry)


def written(manifest: dict, staged: dict[str, Any]) -> int:
    """Documents in the output: those of finished parts, and the distinct lines staged for the others."""
    parts = sum(e["documents"] for e in manifest["shards"].values() if e["status"] == "done")
    return parts + sum(len(set(lines) - {EMPTY}) for key, lines in staged.items()
                       if manifest["shards"][key]["status"] != "done")


def account_for_killed_runs(manifest: dict, present: int) -> None:
    """A run still "running" in the manifest was killed before it could record itself (this run holds the
    directory's lock): its documents are those in the output that no other run counted."""
    runs = manifest["timings"]["runs"]
    killed = [r for r in runs if r.get("status") == "running"]
    if not killed:
        return
    counted = sum(r.get("documents") or 0 for r in runs if r.get("status") != "running")
    for r in killed:
        r.update(status="killed", documents=0, docs_per_second=None)
    killed[-1]["documents"] = max(0, present - counted)


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
