"""A tuple holding an empty span (RexUniNLU's reference emits [start, 0]) never leaves the engine."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

from contracts.domain import Document, Result, Span
from contracts.model import Knobs, LoadedModel, ModelFamily
from workstation import engine
from workstation.run_config import RunConfig


class QuirkyFamily(ModelFamily):
    name, title, tasks = "quirky", "emits empty spans", {}

    def validate(self, document: Document) -> None:
        pass

    def load(self, weights: Path, device: str = "cpu", dtype: str = "fp32") -> LoadedModel:
        return QuirkyModel()

    def write_demo_weights(self, out_dir: Path, size: str = "full") -> Path:
        return out_dir


class QuirkyModel(LoadedModel):
    """Every document: one good span, one [3, 0] empty span, and a relation whose tail is empty."""

    def __init__(self):
        self.family, self.weights, self.device, self.is_demo, self.knobs = QuirkyFamily(), Path("."), "cpu", True, Knobs()

    def extract(self, documents: Sequence[Document], batch_size: int = 8, on_progress=None,
                **options) -> Iterator[Result]:
        for doc in documents:
            good = Span("人物", doc.text[0:2], (0, 2))
            yield Result(doc.id, [[good], [Span("地点", "", (3, 0))],
                                  [good, Span("出生地(地点)", "", (5, 5))]])

    def set_dtype(self, dtype: str) -> None:
        pass


def test_empty_span_tells_located_empty_spans_from_labels():
    assert Span("x", "", (3, 0)).empty
    assert Span("x", "", (2, 2)).empty
    assert Span("x", "", (0, 2)).empty                     # an offset but no text
    assert not Span("x", "ab", (0, 2)).empty
    assert not Span("正向情感", "", None).empty              # a classification label has no offset


def test_tuples_with_an_empty_span_are_dropped_whole():
    result = Result("1", [[Span("a", "xy", (0, 2))], [Span("a", "xy", (0, 2)), Span("b", "", (4, 0))]])
    assert result.without_empty_spans().tuples == [[Span("a", "xy", (0, 2))]]


def test_engine_run_and_extract_drop_tuples_with_empty_spans():
    docs = [Document("1", "张三生于北京。"), Document("2", "李四在上海。")]
    report = engine.run(QuirkyModel(), docs, RunConfig(batch_size=2))
    assert [r.to_json()["output"] for r in report.results] == [
        [[{"type": "人物", "span": "张三", "offset": [0, 2]}]], [[{"type": "人物", "span": "李四", "offset": [0, 2]}]]]
    for result in engine.extract(QuirkyModel(), docs, 2):
        assert not any(s.empty for t in result.tuples for s in t)


def test_engine_refuses_blank_text_before_any_model_work():
    import pytest

    from contracts.domain import InputError
    with pytest.raises(InputError, match="line 2: document 'b' has no text"):
        engine.run(QuirkyModel(), [Document("a", "好"), Document("b", " \n\t", line=2)], RunConfig(batch_size=2))
