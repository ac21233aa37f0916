"""A corpus job's output directory: its input shards, staged results, finished parts and the manifest.

    OUT_DIR/_manifest.json              the job: configuration, shards (pending | done), counts, timings
    OUT_DIR/_staging/shard=KEY/*.parquet results as Ray writes them, any number of files per shard
    OUT_DIR/part-KEY.parquet|.jsonl     one finished part per input shard, rows in input order

Exactly once, whatever stops a run: a staged row carries its shard and line, so a rerun knows which
documents are done without trusting any one file. A torn staged file (a write cut short) does not read
and is deleted; its documents run again. A row staged twice (a retried write) is kept once. A shard
becomes a part only when every one of its lines is staged: the part is written to a temporary name and
renamed, then the manifest says so, then the staging goes. Each step can be repeated, so a stop between
any two of them loses nothing and duplicates nothing. Only the driver writes the manifest, and a lock
file keeps a second run off the same directory.
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from contracts.domain import InputError
from workstation.inputs import SUFFIXES

MANIFEST = "_manifest.json"
STAGING = "_staging"
FORMATS = ("parquet", "jsonl")
EMPTY = -1          # the line of the one row an empty input file stages: it completes the shard, no part row
# Between the reading stage and the workers: one row per input entry (a document or a line that failed).
DOCUMENT_SCHEMA = pa.schema([("shard", pa.string()), ("line", pa.int64()), ("total", pa.int64()),
                             ("id", pa.string()), ("text", pa.string()), ("schema", pa.string()),
                             ("task", pa.string()), ("labels", pa.string()), ("error", pa.string())])
# What the workers stage: `total` is the shard's entry count, so completeness needs no other record.
RESULT_SCHEMA = pa.schema([("shard", pa.string()), ("line", pa.int64()), ("total", pa.int64()),
                           ("id", pa.string()), ("output", pa.string()), ("warnings", pa.list_(pa.string())),
                           ("error", pa.string())])
# A finished part: `shard` is the input file's path, `output` the exact line `launcher.py extract` writes.
PART_SCHEMA = pa.schema([("shard", pa.string()), ("line", pa.int64()), ("id", pa.string()),
                         ("output", pa.string()), ("warnings", pa.list_(pa.string())), ("error", pa.string())])


@dataclass(frozen=True)
class Shard:
    """One input file. `key` names its staging folder and part; size and mtime tell a changed file."""

    path: str
    key: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> "Shard":
        path = path.resolve()
        stat = path.stat()
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.name)[:60]
        digest = hashlib.sha1(str(path).encode("utf-8")).hexdigest()[:10]
        return cls(str(path), f"{stem}-{digest}", stat.st_size, stat.st_mtime_ns)

    def same_file(self, entry: dict) -> bool:
        return entry.get("path") == self.path and entry.get("size") == self.size \
            and entry.get("mtime_ns") == self.mtime_ns


def plan_shards(pattern: str, output: Path) -> list[Shard]:
    """The input files a glob (or one path) names, sorted; files inside the output directory are not input."""
    paths = sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
    out = output.resolve()
    files = [Path(p) for p in paths if Path(p).is_file() and out not in Path(p).resolve().parents]
    if not files:
        raise InputError(f"--input {pattern!r} matches no file")
    unknown = [str(p) for p in files if p.suffix.lower() not in SUFFIXES]
    if unknown:
        raise InputError(f"not an input format: {', '.join(unknown[:5])}{' …' if len(unknown) > 5 else ''} "
                         f"(inputs are {', '.join(SUFFIXES)}; narrow the --input glob)")
    shards = {}
    for p in files:                                  # two paths to one file (a symlink) are one shard
        shard = Shard.of(p)
        shards.setdefault(shard.key, shard)
    return list(shards.values())


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class OutputDir:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.staging = self.root / STAGING
        self.manifest_path = self.root / MANIFEST

    # ---- the manifest ------------------------------------------------------------------------------------

    def read_manifest(self) -> dict | None:
        if not self.manifest_path.exists():
            return None
        try:
            return json.loads(self.manifest_path.read_text("utf-8"))
        except json.JSONDecodeError as e:
            raise InputError(f"{self.manifest_path} is not valid JSON ({e.msg}); it was not written by this "
                             "program, or was edited: move it away to start this output directory afresh") from None

    def write_manifest(self, manifest: dict) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, ensure_ascii=False, indent=1), "utf-8")
        os.replace(tmp, self.manifest_path)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One run per output directory at a time (an advisory lock, released when the process ends)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            lock = open(self.root / ".lock", "w")
        except OSError as e:                        # a read-only folder, a file on the way, a full disk
            raise InputError(f"--output {self.root} cannot be written: {e.strerror or e}") from None
        with lock as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InputError(f"another corpus run is writing to {self.root}; wait for it or stop it") from None
            yield

    # ---- staged results ----------------------------------------------------------------------------------

    def shard_staging(self, key: str) -> Path:
        return self.staging / f"shard={key}"

    def staged(self, key: str, columns: list[str] | None = None, drop_torn: bool = True) -> pa.Table | None:
        """Everything staged for a shard, duplicates included; torn files are deleted on the way (unless a
        writer may still be at work: `drop_torn=False`)."""
        folder = self.shard_staging(key)
        tables = []
        for f in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
            try:
                tables.append(pq.read_table(f, columns=columns, schema=_without_shard(RESULT_SCHEMA, columns)))
            except (OSError, pa.ArrowInvalid):
                if drop_torn:
                    f.unlink(missing_ok=True)               # cut short by a stop: its documents run again
        return pa.concat_tables(tables) if tables else None

    def done_lines(self, key: str) -> tuple[set[int], int | None]:
        """(lines of the shard already staged, the shard's entry count if any row says it)."""
        table = self.staged(key, ["line", "total"])
        if table is None or table.num_rows == 0:
            return set(), None
        return set(table.column("line").to_pylist()), int(table.column("total")[0].as_py())

    def staged_lines(self, key: str) -> set[int]:
        """The lines staged for a shard so far, read without deleting anything."""
        table = self.staged(key, ["line"], drop_torn=False)
        return set() if table is None else set(table.column("line").to_pylist())

    def drop_staging(self, key: str) -> None:
        shutil.rmtree(self.shard_staging(key), ignore_errors=True)

    # ---- parts ---------------------------------------------------------------------------------------------

    def part_name(self, key: str, fmt: str) -> str:
        return f"part-{key}.{fmt}"

    def drop_part(self, key: str) -> None:
        for fmt in FORMATS:
            (self.root / self.part_name(key, fmt)).unlink(missing_ok=True)


def _without_shard(schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
    names = columns or [n for n in schema.names if n != "shard"]
    return pa.schema([schema.field(n) for n in names])


def finalise_shard(root: str, shard: dict, fmt: str) -> dict:
    """Turn a fully staged shard into its part (atomically). Returns the manifest entry's counts, or raises
    if the staging does not hold every line exactly (a bug, never silently written). Runs as a Ray task."""
    out = OutputDir(Path(root))
    table = out.staged(shard["key"])
    if table is None:
        raise RuntimeError(f"shard {shard['path']}: nothing is staged")
    totals = set(table.column("total").to_pylist())
    rows = {}
    for row in table.to_pylist():                       # a row staged twice is kept once
        rows.setdefault(row["line"], row)
    if len(totals) != 1 or len(rows) != totals.pop():
        raise RuntimeError(f"shard {shard['path']}: {len(rows)} distinct documents staged, expected {totals}")
    ordered = [{"shard": shard["path"], **{k: rows[n][k] for k in ("line", "id", "output", "warnings", "error")}}
               for n in sorted(rows) if n != EMPTY]
    name = out.part_name(shard["key"], fmt)
    tmp = out.root / f".{name}.tmp"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(ordered, schema=PART_SCHEMA), tmp)
    else:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in ordered:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, out.root / name)
    return {"documents": len(ordered), "errors": sum(1 for r in ordered if r["error"] is not None), "part": name}


def manifest_entry(shard: Shard, status: str = "pending", **extra: Any) -> dict:
    return {**asdict(shard), "status": status, **extra}
