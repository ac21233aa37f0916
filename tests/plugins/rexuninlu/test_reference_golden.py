"""Equality with the original RexUniNLU code, guarded by the suite itself.

golden/reference_outputs.json holds what the reference code (its rex/ package, run outside this repository)
extracted from the tiny test checkpoint for each case: presets, long texts cut into windows, two-level schemas,
classification, English with runs of spaces. docs/faithfulness.md says how it was made. The model plugin must give
the same tuples, in the same order; only the confidences, which the reference does not return, are left aside.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.domain import Document

GOLDEN = json.loads((Path(__file__).parent / "golden" / "reference_outputs.json").read_text("utf-8"))
CASES = GOLDEN["cases"]


def as_golden(output: list[list[dict]], text: str) -> list[list[list]]:
    """Our tuples in the golden file's form, each span checked against the text it claims to cut."""
    for t in output:
        for e in t:
            assert e["span"] == text[e["offset"][0]:e["offset"][1]], e
    return [[[e["type"], *e["offset"]] for e in t] for t in output]


@pytest.fixture(scope="module")
def our_outputs(rex_model):
    docs = [Document(c["name"], c["text"], c["schema"]) for c in CASES]
    return {c["name"]: r.to_json()["output"] for c, r in zip(CASES, rex_model.extract(docs, batch_size=4))}


def test_the_golden_file_covers_windows_levels_and_classification():
    by_name = {c["name"]: c for c in CASES}
    assert sum(len(c["tuples"]) for c in CASES) > 500
    assert any(len(t) == 2 for t in by_name["relation_450"]["tuples"])             # a second schema level
    assert len(by_name["long_ner"]["text"]) > 512                                    # several windows
    assert by_name["long_classify"]["tuples"] and by_name["spaces"]["tuples"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_rexuninlu_gives_the_reference_codes_tuples(our_outputs, case):
    assert as_golden(our_outputs[case["name"]], case["text"]) == case["tuples"]
