"""The output directory's bookkeeping without Ray: what a stop can leave behind, and how a rerun reads it."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contracts.domain import InputError
from workstation.corpus.layout import EMPTY, RESULT_SCHEMA, OutputDir, finalise_shard, plan_shards


def stage(out: OutputDir, key: str, name: str, lines: list[int], total: int) -> None:
    folder = out.shard_staging(key)
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"shard": key, "line": n, "total": total, "id": f"d{n}", "output": json.dumps({"id": f"d{n}"}),
             "warnings": [], "error": None} for n in lines]
    pq.write_table(pa.Table.from_pylist(rows, schema=RESULT_SCHEMA).drop(["shard"]), folder / name)


def test_torn_files_are_dropped_and_rows_staged_twice_count_once(tmp_path):
    out = OutputDir(tmp_path)
    stage(out, "k", "a.parquet", [1, 2, 3], total=5)
    stage(out, "k", "b.parquet", [3, 4], total=5)                     # line 3 again: a retried write
    whole = (out.shard_staging("k") / "a.parquet").read_bytes()
    (out.shard_staging("k") / "c.parquet").write_bytes(whole[: len(whole) // 2])   # a write cut short
    assert out.done_lines("k") == ({1, 2, 3, 4}, 5)
    assert not (out.shard_staging("k") / "c.parquet").exists()

    with pytest.raises(RuntimeError, match="4 distinct documents staged"):
        finalise_shard(str(tmp_path), {"key": "k", "path": "/in/k.jsonl"}, "parquet")
    assert not list(tmp_path.glob("part-*"))                        # nothing half-finished is published

    stage(out, "k", "d.parquet", [5], total=5)
    counts = finalise_shard(str(tmp_path), {"key": "k", "path": "/in/k.jsonl"}, "jsonl")
    assert counts == {"documents": 5, "errors": 0, "part": "part-k.jsonl"}
    rows = [json.loads(line) for line in (tmp_path / "part-k.jsonl").read_text("utf-8").splitlines()]
    assert [(r["line"], r["id"], r["shard"]) for r in rows] == [(n, f"d{n}", "/in/k.jsonl") for n in range(1, 6)]


def test_an_empty_input_file_finishes_as_an_empty_part(tmp_path):
    out = OutputDir(tmp_path)
    stage(out, "e", "a.parquet", [EMPTY], total=1)
    assert finalise_shard(str(tmp_path), {"key": "e", "path": "/in/e.jsonl"}, "parquet")["documents"] == 0
    assert pq.read_table(tmp_path / "part-e.parquet").num_rows == 0


def test_shards_are_the_matching_input_files_outside_the_output(tmp_path):
    (tmp_path / "in").mkdir()
    for name in ("b.jsonl", "a.txt", "c.parquet"):
        (tmp_path / "in" / name).write_text("x\n")
    (tmp_path / "in" / "out").mkdir()
    (tmp_path / "in" / "out" / "part-x.jsonl").write_text("{}\n")
    shards = plan_shards(str(tmp_path / "in" / "**" / "*.*"), tmp_path / "in" / "out")
    assert [s.path.rsplit("/", 1)[1] for s in shards] == ["a.txt", "b.jsonl", "c.parquet"]
    assert len({s.key for s in shards}) == 3
    (tmp_path / "in" / "link.jsonl").symlink_to(tmp_path / "in" / "b.jsonl")
    assert len(plan_shards(str(tmp_path / "in" / "*.jsonl"), tmp_path / "out")) == 1
    (tmp_path / "in" / "notes.docx").write_text("x")
    with pytest.raises(InputError, match="not an input format.*notes.docx"):
        plan_shards(str(tmp_path / "in" / "*"), tmp_path / "out")
    with pytest.raises(InputError, match="matches no file"):
        plan_shards(str(tmp_path / "nothing-*.jsonl"), tmp_path / "out")


def test_a_second_run_on_the_same_output_is_refused_while_the_first_holds_it(tmp_path):
    out = OutputDir(tmp_path / "out")
    with out.locked():
        with pytest.raises(InputError, match="another corpus run"):
            with OutputDir(tmp_path / "out").locked():
                pass
    with out.locked():
        pass
