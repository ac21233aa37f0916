"""What Ray runs, called directly: parsing shards and the extraction worker (no Ray runtime needed)."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from contracts.domain import Document
from workstation.corpus.work import ExtractionWorker, parse_shards

NER = {"人物": None, "地理位置": None, "组织机构": None}


def files(*named: tuple[str, bytes]) -> dict:
    return {"bytes": np.array([b for _, b in named], dtype=object), "path": np.array([p for p, _ in named])}


def test_parsing_keeps_line_numbers_reports_bad_lines_and_skips_lines_already_done(tmp_path):
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.csv")
    jsonl = "\n".join([json.dumps({"id": "x", "text": "张三"}), "{bad", "", json.dumps({"text": "李四"}),
                       json.dumps({"text": 5})]) + "\n"
    reported = []
    table = parse_shards(files((a, jsonl.encode()), (b, b"title\nno text column\n")), {a: "A", b: "B"}, {"schema": NER},
                         done={"A": [1]}, report=lambda *args: reported.append(args))
    rows = table.to_pylist()
    assert [(r["shard"], r["line"], r["id"], r["total"]) for r in rows] == [
        ("A", 2, None, 4), ("A", 4, "4", 4), ("A", 5, None, 4), ("B", 0, None, 1)]
    assert "line 2: malformed JSON" in rows[0]["error"] and "no 'text' column" in rows[3]["error"]
    assert rows[2]["error"] == 'line 5: "text" must be a string, got int'
    assert json.loads(rows[1]["schema"]) == NER and rows[1]["error"] is None
    assert reported == [("parsed", "A", 4), ("parsed", "B", 1)]


class Exploding(ExtractionWorker):
    """A worker whose model fails on one document: only that document may become an error row."""

    def _run(self, documents: list[Document]) -> list:
        if any(d.id == "boom" for d in documents):
            raise RuntimeError("the model failed on this text")
        return super()._run(documents)


def test_the_worker_turns_each_failing_document_into_its_own_error_row(rex_tiny):
    job = {"model": "rexuninlu", "weights": str(rex_tiny), "device": "cpu", "optimizations": [], "dtype": None,
           "configured_dtype": "fp32", "batch_size": 2, "options": {}}
    reported = []
    worker = Exploding(job, report=lambda *args: reported.append(args))
    rows = [{"shard": "A", "line": n, "total": 4, "id": i, "text": t, "schema": json.dumps(s), "task": None,
             "labels": None, "error": None}
            for n, (i, t, s) in enumerate([("ok", "[CLASSIFY]很好看", {"正向": None, "负向": None}),
                                           ("boom", "张三", NER), ("bad", "x", {}), ("ok2", "李四", NER)], 1)]
    out = worker(pa.Table.from_pylist(rows)).to_pylist()
    assert [r["id"] for r in out] == ["ok", "boom", "bad", "ok2"]
    assert out[1]["error"] == "RuntimeError: the model failed on this text"
    assert "schema is empty" in out[2]["error"]
    expected = [r.to_json() for r in worker.model.extract(
        [Document("ok", "[CLASSIFY]很好看", {"正向": None, "负向": None}, line=1), Document("ok2", "李四", NER, line=4)])]
    assert [json.loads(out[i]["output"]) for i in (0, 3)] == expected and out[0]["error"] is None
    assert reported[0][3:5] == (4, 2)


def test_parquet_input_reads_like_jsonl_and_a_bad_row_is_named(tmp_path):
    import pyarrow.parquet as pq

    from workstation.inputs import read_documents
    pq.write_table(pa.Table.from_pylist([{"id": "a", "text": "张三", "schema": json.dumps(NER)},
                                         {"id": None, "text": "李四", "schema": "{bad"}]), tmp_path / "in.parquet")
    docs, errors = read_documents(tmp_path / "in.parquet", skip_invalid=True)
    assert [(d.id, d.schema, d.line) for d in docs] == [("a", NER, 1)]
    assert [str(e) for e in errors] == ["line 2: column 'schema': malformed JSON (Expecting property name enclosed "
                                        "in double quotes at column 2)"]


def test_a_seqgpt_worker_writes_the_lines_extract_writes(tmp_path):
    """Labels and the generation options travel through the rows; the output is the CLI's line, `raw` included."""
    from plugins.seqgpt.family import SeqGPT
    from workstation.cli import main as cli_main
    weights = SeqGPT().write_demo_weights(tmp_path / "seqgpt-tiny", "tiny")
    lines = [{"id": "a", "text": "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "task": "ext", "labels": ["人物", "地理位置"]},
             {"id": "b", "text": "I want my checking balance.", "task": "cls", "labels": ["CheckBalance", "Transfer"]}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), "utf-8")
    assert cli_main(["extract", "--model", "seqgpt", "--weights", str(weights), "--input", str(tmp_path / "in.jsonl"),
                     "--output", str(tmp_path / "cli.jsonl"), "--device", "cpu", "--max-new-tokens", "4",
                     "--no-record"]) == 0
    rows = parse_shards(files((str(tmp_path / "in.jsonl"), (tmp_path / "in.jsonl").read_bytes())),
                        {str(tmp_path / "in.jsonl"): "A"}, None, done={})
    job = {"model": "seqgpt", "weights": str(weights), "device": "cpu", "optimizations": [], "dtype": None,
           "configured_dtype": "fp32", "batch_size": 2, "options": {"max_new_tokens": 4}}
    out = ExtractionWorker(job)(rows).to_pylist()
    assert [r["output"] for r in out] == (tmp_path / "cli.jsonl").read_text("utf-8").splitlines()
    assert all("raw" in json.loads(r["output"]) for r in out)



class CancelledStore:
    """The workstation's store, where the job has been cancelled from the Batch page."""

    def update(self, *counts):
        return "cancelled"


class Tally:
    """Stands for the tally actor: counts each snapshot asked of it."""

    def __init__(self):
        self.asked = 0
        tally = self

        class snapshot:
            @staticmethod
            def remote():
                tally.asked += 1
                return f"snapshot {tally.asked}"
        self.snapshot = snapshot


def answering(monkeypatch, answered: list, counts):
    """ray.wait finds a snapshot ready while answered[0] is true; ray.get gives counts (or raises them)."""
    from workstation.corpus import progress

    def wait(refs, timeout):
        return (refs, []) if answered[0] else ([], refs)

    def get(ref):
        if isinstance(counts, Exception):
            raise counts
        return counts
    monkeypatch.setattr(progress.ray, "wait", wait)
    monkeypatch.setattr(progress.ray, "get", get)


def cancelled_watcher(monkeypatch, counts=None, answered=True):
    """A corpus run's watcher over a cancelled job; returns it and the interrupts it sends the main thread."""
    from workstation.corpus import progress
    interrupts = []
    answering(monkeypatch, [answered], counts or {"totals": {}, "workers": {}})
    monkeypatch.setattr(progress._thread, "interrupt_main", lambda: interrupts.append(progress.time.monotonic()))
    return progress.Watcher(Tally(), {"shards": {}}, [], {}, CancelledStore(), show=False), interrupts


def test_a_cancel_whose_interrupt_is_lost_is_sent_again_until_the_run_stops(monkeypatch):
    # Seen on a loaded 2-core machine: a cancelled run wrote every row. While the run goes on, the watcher
    # repeats the interrupt, and never once the run has stopped.
    from workstation.corpus import progress
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    watcher, interrupts = cancelled_watcher(monkeypatch)
    watcher._poll()
    assert watcher.cancelled and interrupts == [100.0]
    clock[0] += progress.REINTERRUPT_SECONDS / 2
    watcher._poll()
    assert interrupts == [100.0]                           # not before the run had time to stop
    clock[0] += progress.REINTERRUPT_SECONDS
    watcher._poll()
    assert len(interrupts) == 2                           # still running: sent again
    watcher._stop.set()                                   # the run stopped (Watcher.stop)
    clock[0] += 10 * progress.REINTERRUPT_SECONDS
    watcher._poll()
    assert len(interrupts) == 2


@pytest.mark.parametrize("tally", ["slow", "failing"])
def test_a_cancel_is_seen_while_the_tally_does_not_answer(monkeypatch, tally):
    if tally == "slow":
        watcher, interrupts = cancelled_watcher(monkeypatch, answered=False)
    else:
        watcher, interrupts = cancelled_watcher(monkeypatch, counts=RuntimeError("the tally's actor died"))
    watcher._poll()
    assert watcher.cancelled and len(interrupts) == 1


class RunningStore:
    def update(self, *counts):
        return "running"


def test_a_tally_slower_than_a_poll_has_its_answer_used_and_is_asked_once_at_a_time(monkeypatch):
    from workstation.corpus import progress
    answered = [False]
    counts = {"totals": {"k": 5}, "workers": {"w": {"device": "cpu", "documents": 3, "errors": 0, "busy_seconds": 1.0}}}
    answering(monkeypatch, answered, counts)
    tally = Tally()
    watcher = progress.Watcher(tally, {"shards": {}}, [], {}, RunningStore(), show=False)
    watcher._poll()
    watcher._poll()
    assert tally.asked == 1 and watcher.processed() == 0        # no answer yet: asked once, not once a poll
    answered[0] = True
    watcher._poll()
    assert tally.asked == 1 and watcher.processed() == 3        # the late answer is used
    watcher._poll()
    assert tally.asked == 2                                     # answered: the next poll asks again
