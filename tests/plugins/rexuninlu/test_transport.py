"""A host worker's Results cross to the run's process as their JSON, and are written from it without being parsed."""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle

import pytest

from contracts.domain import Document, Result, Span
from contracts.report import RunReport
from plugins.rexuninlu.transport import WrittenResult, header, spool, unspool


def dense_result() -> Result:
    """As a worker holds it: empty spans dropped."""
    return Result("7", [[Span("人物", "张三", (3, 5), 0.9731), Span("x", "y", (0, 1), None, True)],
                        [Span("地点", "北京", (9, 11))]], warnings=["w"], coverage=[(0, 12)])


def arrived(result: Result) -> WrittenResult:
    return WrittenResult.arrived(header(result), result.output_json())


def test_a_written_result_writes_its_bytes_as_they_came_and_reads_back_as_the_result():
    plain, sent = dense_result(), arrived(dense_result())
    assert sent.output_json() is sent._written and sent._tuples is None        # nothing parsed to write it
    assert sent.to_json_line() == plain.to_json_line() and sent.output_json_text() == plain.output_json_text()
    assert sent.tuple_count == 2 and sent.without_empty_spans() is sent and sent._tuples is None
    assert sent.tuples == plain.tuples and sent.tuple_count == 2                 # parsed when read, then plain
    assert sent._written is None and sent.to_json_line() == plain.to_json_line() and sent.to_json() == plain.to_json()


def test_a_written_result_pickles_and_copies_without_being_parsed():
    for again in (pickle.loads(pickle.dumps(arrived(dense_result()))), copy.copy(arrived(dense_result())),
                  copy.deepcopy(arrived(dense_result()))):
        assert again._tuples is None and again.to_json_line() == dense_result().to_json_line()
    read = arrived(dense_result())
    read.tuples                                                                  # noqa: B018 - parsed
    assert pickle.loads(pickle.dumps(read)).to_json_line() == dense_result().to_json_line()


@pytest.mark.parametrize("change", ["tuples", "warnings", "document_id"])
def test_setting_a_field_of_a_written_result_is_never_hidden_by_its_old_bytes(change):
    sent = arrived(dense_result())
    value = {"tuples": [], "warnings": ["other"], "document_id": "8"}[change]
    setattr(sent, change, value)
    expected = dataclasses.replace(dense_result(), **{change: value})
    assert sent.to_json_text() == expected.to_json_text()


def test_the_tuple_cap_and_thresholds_read_a_written_results_tuples():
    from workstation.engine import capped
    from workstation.quality.thresholds import apply_thresholds
    sent = capped(arrived(dense_result()), 1)
    assert [[s.span for s in t] for t in sent.tuples] == [["张三", "y"]]
    assert json.loads(sent.to_json_text())["warnings"][-1].startswith("1 more tuple(s) were dropped")
    assert capped(arrived(dense_result()), 2).to_json_text() == dense_result().to_json_text()
    kept = apply_thresholds(arrived(dense_result()), {"人物": 0.99})
    assert [[s.span for s in t] for t in kept.tuples] == [["北京"]]


def test_history_stores_a_written_results_output_without_parsing_it(store):
    """Recording dense outputs parsed every span back and dumped it again, costing more than the run's decoding:
    the output's JSON text goes into the JSON column as it is, and reads back as the same Result."""
    plain, sent = dense_result(), pickle.loads(pickle.dumps(arrived(dense_result())))
    writer = store.run_writer("cli")
    report = RunReport("rexuninlu", "w", True, "cpu", "fp32", "eager", {}, 8, {}, "2026-12-04T00:00:00")
    writer.start(report)
    writer.add(Document("7", "0123张三5678北京1", {"人物": None}), sent)
    assert sent._tuples is None                                                  # still its bytes: nothing parsed
    report.documents, report.wall_seconds = 1, 1.0
    [(_, stored)] = store.get_run(writer.finish(report)).items
    assert stored.to_json() == plain.to_json()


def worker_results() -> list[Result]:
    spans = [[Span("人物", "张三", (0, 2), confidence=0.9)], [Span("地点", "北京=1+1", (3, 9))]]
    return [Result("a", spans, coverage=[(0, 9)]), Result("b", [], warnings=["cut"]), Result("c", spans[:1], raw=["x"])]


def test_results_cross_through_a_file_and_come_back_whole(tmp_path):
    headers, spooled = spool(worker_results(), str(tmp_path), 7)
    assert isinstance(spooled, tuple) and os.listdir(tmp_path) == [os.path.basename(spooled[0])]
    assert not any(isinstance(part, bytes) for h in headers for part in h)    # the bytes are in the file only
    back = unspool(headers, spooled)
    assert [r.to_json_line() for r in back] == [r.to_json_line() for r in worker_results()]
    assert back[0].tuples[0][0].span == "张三" and back[1].warnings == ["cut"] and os.listdir(tmp_path) == []


@pytest.mark.parametrize("folder", ["gone", ""])
def test_results_cross_whole_where_no_file_can_be_written(tmp_path, folder, monkeypatch):
    """A folder that went away, or none (the pool found no writable temporary folder)."""
    monkeypatch.chdir(tmp_path)                   # where a file named relative to no folder would land
    headers, outputs = spool(worker_results(), str(tmp_path / folder) if folder else "", 7)
    assert isinstance(outputs, list) and os.listdir(tmp_path) == []
    assert [r.to_json_line() for r in unspool(headers, outputs)] == [r.to_json_line() for r in worker_results()]


def test_a_results_file_cut_short_fails_clearly(tmp_path):
    headers, (path, sizes) = spool(worker_results(), str(tmp_path), 1)
    with open(path, "r+b") as f:
        f.truncate(sum(sizes) - 1)
    with pytest.raises(RuntimeError, match="cut short"):
        unspool(headers, (path, sizes))
    assert not os.path.exists(path)
