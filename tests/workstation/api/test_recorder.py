"""The API's runs: written off the device's path, several per transaction, each in History when answered."""
from __future__ import annotations

import threading

from tests.storage.sample_runs import make_report, ner_run  # noqa: E402
from workstation.api.recorder import Recorder  # noqa: E402


def test_record_runs_writes_several_runs_in_one_transaction_all_listed_and_whole(store):
    docs, results = ner_run()
    ids = store.record_runs([(make_report(results), docs, "api", {"surface": "api"}) for _ in range(3)])
    assert len(set(ids)) == 3
    listed = store.search_runs(source="api")
    assert sorted(r.id for r in listed) == sorted(ids) and all(r.finished_at for r in listed)
    assert [len(store.get_run(i).items) for i in ids] == [len(docs)] * 3
    bad = make_report(results[:1])                      # fewer results than documents: refused, nothing written
    try:
        store.record_runs([(make_report(results), docs, "api", None), (bad, docs, "api", None)])
    except ValueError:
        pass
    else:
        raise AssertionError("a run with missing results was accepted")
    assert store.count_runs(source="api") == 3


def test_runs_that_gather_while_one_is_written_go_in_together(store):
    docs, results = ner_run()
    release, writing = threading.Event(), threading.Event()
    real, groups = store.record_runs, []

    def slow_first(runs):
        groups.append(len(runs))
        if not writing.is_set():
            writing.set()
            release.wait(30)
        return real(runs)
    store.record_runs = slow_first
    recorder = Recorder(store)
    try:
        first = recorder.record(make_report(results), docs, {})
        assert writing.wait(30)
        rest = [recorder.record(make_report(results), docs, {}) for _ in range(3)]
        release.set()
        ids = [f.result(30) for f in [first, *rest]]
    finally:
        recorder.stop()
    assert groups == [1, 3] and None not in ids and len(set(ids)) == 4
    assert store.count_runs(source="api") == 4


def test_a_store_that_fails_leaves_the_run_id_empty_but_answers(store):
    docs, results = ner_run()

    def broken(runs):
        raise RuntimeError("disk full")
    store.record_runs = broken
    recorder = Recorder(store)
    try:
        assert recorder.record(make_report(results), docs, {}).result(30) is None
    finally:
        recorder.stop()


def test_a_group_of_runs_is_written_in_a_few_statements_whatever_its_size(store, tmp_path, monkeypatch):
    # One INSERT per table for the whole group: per-run ORM flushes cost a busy API more than the tiny model's pass.
    from sqlalchemy import event

    from storage import records
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    looked_at = []
    real_checksum = records.weights_checksum
    monkeypatch.setattr(records, "weights_checksum", lambda w: looked_at.append(w) or real_checksum(w))
    docs, results = ner_run()
    statements = []
    event.listen(store.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    ids = store.record_runs([(make_report(results, weights=str(weights)), docs, "api", {"n": n}) for n in range(40)])
    inserts = [s for s in statements if s.lstrip().upper().startswith("INSERT")]
    assert len(inserts) <= 3 and looked_at == [str(weights)]
    assert len(set(ids)) == 40 and ids == sorted(ids)
    stored = [store.get_run(i) for i in ids]
    assert [r.settings["n"] for r in stored] == list(range(40))          # each run with its own snapshot, in order
    assert all([doc.id for doc, _ in r.items] == ["d0", "d1"] for r in stored)
    assert all(r.items[1][1].warnings == results[1].warnings and r.items[0][1].to_json() == results[0].to_json()
               for r in stored)
    assert len(store.search_runs(text="阿里巴巴", source="api", limit=100)) == 40      # the search index's triggers ran


def test_a_run_written_in_a_group_reads_back_as_the_same_run_written_alone(store):
    # record_runs writes plain rows (Core INSERTs); record_run writes ORM objects: one run must read back the same.
    docs, results = ner_run()
    report = make_report(results)
    alone = store.get_run(store.record_run(report, docs, "api", settings_snapshot={"surface": "api"}))
    grouped = store.get_run(store.record_runs([(report, docs, "api", {"surface": "api"})])[0])
    differs = {"id", "finished_at"}
    assert {k: v for k, v in vars(alone.summary).items() if k not in differs} == \
        {k: v for k, v in vars(grouped.summary).items() if k not in differs}
    assert alone.settings == grouped.settings
    assert [(d, r.to_json(), r.coverage) for d, r in alone.items] == [(d, r.to_json(), r.coverage) for d, r in grouped.items]
