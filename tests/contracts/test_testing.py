"""contracts.testing, the helpers a plugin's tests use: each check it makes fails on the result that breaks it
(the order and count check is the engine's own, contracts.results.in_input_order)."""
from __future__ import annotations

import pytest

from contracts import Document, InputError, ModelFamily, Result, RuleModel, Span
from contracts.testing import read_back, recorded_run, run_model


class Echo(ModelFamily):
    """Gives back whatever tuples a test put on the family, so each rule can be broken on purpose."""

    name, title, tasks, needs_weights, options = "echo", "Echo", {}, False, {}

    def __init__(self, results=None):
        self.results = results

    def validate(self, document):
        if document.schema is None:
            raise InputError("no schema", document.line)

    def load(self, weights, device="cpu", dtype="fp32"):
        return LoadedEcho(self, weights)


class LoadedEcho(RuleModel):
    def find(self, document, **options):
        return [[Span("t", document.text[:1], (0, 1))]]

    def extract(self, documents, batch_size=8, on_progress=None, **options):
        if self.family.results is None:
            yield from super().extract(documents, batch_size, on_progress, **options)
        else:
            yield from self.family.results


DOCS = [Document("a", "xy", {"t": None}), Document("b", "zw", {"t": None})]


def test_a_model_that_keeps_the_rules_gives_its_results():
    results = run_model(Echo(), DOCS)
    assert [[s.to_json() for t in r.tuples for s in t] for r in results] == [
        [{"type": "t", "span": "x", "offset": [0, 1]}], [{"type": "t", "span": "z", "offset": [0, 1]}]]


def test_a_document_the_family_refuses_raises_its_input_error():
    with pytest.raises(InputError, match="line 4: no schema"):
        run_model(Echo(), [Document("a", "xy", line=4)])


@pytest.mark.parametrize("results, message", [
    ([Result("a", [])], "the model returned 1 result for 2 documents"),
    ([Result("b", []), Result("a", [])], "a result for 'b' where document 'a' was due: results must come in input"),
])
def test_results_out_of_order_or_too_few_raise_what_a_run_of_the_host_raises(results, message):
    with pytest.raises(RuntimeError, match=message):
        run_model(Echo(results), DOCS)


@pytest.mark.parametrize("results, message", [
    ([Result("a", [[Span("t", "y", (0, 1))]]), Result("b", [])], r"'y' at \(0, 1\) is not that span of the text \('x'\)"),
    ([Result("a", [[Span("t", "xy", (0, 3))]]), Result("b", [])], "is not that span of the text"),
    ([Result("a", [], coverage=[(0, 5)]), Result("b", [])], "coverage .* must be sorted ranges inside the text"),
])
def test_a_result_that_breaks_a_rule_the_host_relies_on_is_named(results, message):
    with pytest.raises(AssertionError, match=message):
        run_model(Echo(results), DOCS)


def test_tuples_holding_an_empty_span_are_dropped_as_the_host_drops_them():
    results = run_model(Echo([Result("a", [[Span("t", "", (1, 1))], [Span("t", "x", (0, 1))]]), Result("b", [])]), DOCS)
    assert [[s.span for s in t] for t in results[0].tuples] == [["x"]]


def test_a_model_that_needs_weights_is_told_to_give_them():
    family = Echo()
    family.needs_weights = True
    with pytest.raises(AssertionError, match="echo needs weights: give run_model weights=FOLDER"):
        run_model(family, DOCS)


def test_a_recorded_run_carries_its_items_and_any_summary_field():
    items = [(DOCS[0], Result("a", [[Span("t", "x", (0, 1))]]))]
    run = recorded_run(items, run_id=5, model="echo", label="gold", device="cuda:0")
    assert (run.id, run.summary.model, run.summary.label, run.summary.device, run.summary.documents) == (
        5, "echo", "gold", "cuda:0", 1)
    assert run.items == items and read_back(items[0][1]).to_json() == items[0][1].to_json()
