"""The gazetteer's export format: the spans of runs as a zip of TYPE.txt dictionaries it can read back."""
from __future__ import annotations

import zipfile

from contracts import Document, Result, RunReport, Span


def test_spans_become_dictionaries_the_gazetteer_reads_back(store, tmp_path):
    from iew_gazetteer.exporter import write_dictionaries
    from iew_gazetteer.family import Gazetteer
    text = "星火一号 in 雄安 #tag"
    tuples = [[Span("产品", "星火一号", (0, 4))], [Span("产品", "星火一号", (0, 4))], [Span("a/b", "雄安", (8, 10))],
              [Span("情感", "正向", None)],                  # a label: no place in a dictionary
              [Span("tag", "#tag", (11, 15))],              # would read as a comment line
              [Span("产品", "雄安", (0, 2))]]                # offsets that are not its text: the tuple goes
    report = RunReport("rexuninlu", "w", False, "cpu", "fp32", "sdpa", {}, 1, {}, "2024-03-05T00:00:00+00:00",
                       documents=1, results=[Result("1", tuples)])
    run_id = store.record_run(report, [Document("1", text)], "cli")
    exported = write_dictionaries([store.get_run(run_id)], tmp_path / "dictionaries.zip")
    assert (exported.documents, exported.spans, exported.skipped, exported.invalid) == (1, 3, 2, 1)
    folder = tmp_path / "dictionaries"
    with zipfile.ZipFile(tmp_path / "dictionaries.zip") as archive:
        assert sorted(archive.namelist()) == ["a_b.txt", "产品.txt"]
        archive.extractall(folder)
    model = Gazetteer().load(folder)
    result = next(model.extract([Document("2", "雄安的星火一号", {"产品": None, "a_b": None})]))
    assert [(s.type, s.span) for t in result.tuples for s in t] == [("a_b", "雄安"), ("产品", "星火一号")]
