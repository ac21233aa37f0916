"""The gazetteer's export format: the spans of runs as a zip of TYPE.txt dictionaries it can read back."""
from __future__ import annotations

import zipfile

from contracts import Document, Result, Span
from contracts.testing import recorded_run, run_model


def test_spans_become_dictionaries_the_gazetteer_reads_back(tmp_path):
    from iew_gazetteer.exporter import write_dictionaries
    from iew_gazetteer.family import Gazetteer
    text = "星火一号 in 雄安 #tag"
    tuples = [[Span("产品", "星火一号", (0, 4))], [Span("产品", "星火一号", (0, 4))], [Span("a/b", "雄安", (8, 10))],
              [Span("情感", "正向", None)],                  # a label: no place in a dictionary
              [Span("tag", "#tag", (11, 15))],              # would read as a comment line
              [Span("产品", "雄安", (0, 2))]]                # offsets that are not its text: the tuple goes
    run = recorded_run([(Document("1", text), Result("1", tuples))], model="rexuninlu")
    exported = write_dictionaries([run], tmp_path / "dictionaries.zip")
    assert (exported.documents, exported.spans, exported.skipped, exported.invalid) == (1, 3, 2, 1)
    folder = tmp_path / "dictionaries"
    with zipfile.ZipFile(tmp_path / "dictionaries.zip") as archive:
        assert sorted(archive.namelist()) == ["a_b.txt", "产品.txt"]
        archive.extractall(folder)
    [result] = run_model(Gazetteer(), [Document("2", "雄安的星火一号", {"产品": None, "a_b": None})], folder)
    assert [(s.type, s.span) for t in result.tuples for s in t] == [("a_b", "雄安"), ("产品", "星火一号")]
