"""Throwaway model plugins and optimizations for the UI tests: deterministic, instant, CPU-only.

`fakeie` reads a schema (as RexUniNLU does): it finds every occurrence of each schema type name in the
text (so hostile type names end up in spans) and classifies with a fixed confidence when the text
starts with [CLASSIFY]. `fakegen` reads a task and labels (as SeqGPT does; its presets hold label lists
only) and writes a raw generation with one grounded and one ungrounded span. A text starting with
[SLOW] takes 50 ms; one starting with [CRAWL] takes 20 s in 50-ms device steps, one prompt per schema type
(a SeqGPT run on the CPU, for progress and Cancel). With the option read_last=N a model reads only the last N characters (as SeqGPT
keeps the end of a long prompt) and reports that coverage, unless long_text is "window".
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from contracts.domain import Document, InputError, Result, Span
from contracts.hookspecs import hookimpl
from contracts.model import DEMO_MARKER, Knobs, LoadedModel, ModelFamily, TaskPreset
from contracts.names import Reads
from contracts.optimization import Optimization

PRESETS = [
    TaskPreset("ner", "Named entities", "Alice met Bob in Paris.", {"Alice": None, "Paris": None}),
    TaskPreset("relation", "Relation extraction", "Alice works at Acme.", {"Alice": {"employer(Acme)": None}}),
]
LABEL_PRESETS = [                           # label lists only: nothing in them is a dict
    TaskPreset("ext", "Generative extraction", "Alice met Bob.", ["person", "place"]),
    TaskPreset("cls", "Classification", "Alice met Bob.", ("meeting", "parting")),
]


class FakeFamily(ModelFamily):
    name = "fakeie"
    title = "Fake IE (tests)"
    tasks = {p.name: p for p in PRESETS}
    options = {"max_hits": 100, "read_last": 0, "long_text": "truncate"}
    option_choices = {"long_text": ("truncate", "window")}
    option_titles = {"max_hits": ("Most hits", "Extractions kept per document")}
    classification_markers = ("[CLASSIFY]",)
    whole_text_option = ("long_text", "window")

    def __init__(self) -> None:
        self.loads: list[tuple[str, str, str]] = []

    def validate(self, document: Document) -> None:
        if not document.text.strip():
            raise InputError("the text is empty", document.line)
        if document.schema is None and not document.labels:
            raise InputError("no schema and no labels", document.line)
        if document.schema is not None and not isinstance(document.schema, dict):
            raise InputError("the schema must be a JSON object", document.line)

    def validate_gold(self, document: Document, output) -> list:
        """Like RexUniNLU's: every span is text[start:end], every tuple a path down the schema (or a label)."""
        self.validate(document)
        for n, tup in enumerate(output):
            node = document.schema if document.schema is not None else dict.fromkeys(document.labels or [])
            for e in tup:
                off = e.get("offset")
                if off is not None and document.text[off[0]:off[1]] != e["span"]:
                    raise InputError(f"output[{n}] span {e['span']!r} is not text[{off[0]}:{off[1]}]", document.line)
                if not isinstance(node, dict) or e["type"] not in node:
                    raise InputError(f"output[{n}] type {e['type']!r} is not in the schema at that level",
                                     document.line)
                node = node[e["type"]]
        return output

    def load(self, weights: Path, device: str = "cpu", dtype: str = "fp32") -> "FakeModel":
        if not Path(weights).is_dir():
            from contracts.domain import WeightsError
            raise WeightsError(f"no checkpoint at {weights}")
        self.loads.append((str(weights), device, dtype))
        return FakeModel(self, Path(weights), device, dtype)

    def write_demo_weights(self, out_dir: Path, size: str = "full") -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / DEMO_MARKER).write_text("random")
        return out_dir


class FakeLabelsFamily(FakeFamily):
    """A model that declares it reads a task and labels (`Reads.LABELS`), as SeqGPT does."""

    name = "fakegen"
    title = "Fake generator (tests)"
    tasks = {p.name: p for p in LABEL_PRESETS}
    reads = Reads.LABELS
    classification_markers = ()          # it classifies by its task, as SeqGPT does

    def validate(self, document: Document) -> None:
        if not document.text.strip():
            raise InputError("the text is empty", document.line)
        if document.task not in self.tasks:
            raise InputError(f"unknown task {document.task!r}", document.line)
        if not isinstance(document.labels, list) or not document.labels:
            raise InputError("\"labels\" must be a non-empty list", document.line)


class FakeModel(LoadedModel):
    def __init__(self, family: FakeFamily, weights: Path, device: str, dtype: str) -> None:
        self.family, self.weights, self.device = family, weights, device
        self.is_demo = (weights / DEMO_MARKER).exists()
        self.knobs = Knobs(dtype=dtype)
        self.tokens = 0
        self.in_use = threading.Lock()          # a run that finds this held means two runs overlapped
        self.overlaps = 0
        self.released = False

    def set_dtype(self, dtype: str) -> None:
        self.knobs.dtype = dtype

    def tokens_processed(self) -> int:
        return self.tokens

    def extract(self, documents: Sequence[Document], batch_size: int = 8,
                on_progress: Callable[[int], None] | None = None, **options) -> Iterator[Result]:
        if not self.in_use.acquire(blocking=False):
            self.overlaps += 1
            self.in_use.acquire()
        try:
            for doc in documents:
                self.tokens += len(doc.text)
                result = self._one(doc)
                result.tuples = result.tuples[:int(options.get("max_hits", 100))]
                read_last = int(options.get("read_last", 0))
                if read_last:
                    whole = options.get("long_text") == "window"
                    result.coverage = [(0 if whole else max(0, len(doc.text) - read_last), len(doc.text))]
                yield result
        finally:
            self.in_use.release()

    def _one(self, doc: Document) -> Result:
        if doc.text.startswith("[SLOW]"):
            time.sleep(0.05)            # long enough for a test to cancel a job in flight
        if doc.text.startswith("[CRAWL]"):
            prompts = list(doc.schema or doc.labels or [])
            self.clock.count(planned=len(prompts))
            for step in range(400):
                with self.clock.device():           # where a cancel takes effect
                    time.sleep(0.05)
                if (step + 1) % (400 // max(1, len(prompts))) == 0:
                    self.clock.count(done=1, tokens=7)
        if doc.labels:
            first = doc.text.split()[0] if doc.text.split() else ""
            raw = f"{doc.labels[0]}: {first}\n{doc.labels[-1]}: Atlantis"
            start = doc.text.find(first)
            return Result(doc.id, [[Span(doc.labels[0], first, (start, start + len(first)), grounded=True)],
                                   [Span(doc.labels[-1], "Atlantis", None, grounded=False)]], raw=[raw])
        if doc.text.startswith("[CLASSIFY]"):
            return Result(doc.id, [[Span(t, t, None, confidence=0.75)] for t in list(doc.schema)[:1]])
        tuples = []
        for type_name in doc.schema:
            start = doc.text.find(type_name)
            while start >= 0:
                tuples.append([Span(type_name, type_name, (start, start + len(type_name)))])
                start = doc.text.find(type_name, start + 1)
        return Result(doc.id, tuples)


class FakeOptimization(Optimization):
    name = "fake-fast"
    title = "Fake speed-up"
    description = "Sets a knob the fake model ignores; applies only to fakeie."
    switch = "live"

    def applies_to(self, model: LoadedModel) -> tuple[bool, str]:
        if model.family.name != "fakeie":
            return False, "only the fake model has this knob"
        return True, "the fake model has this knob"

    def enable(self, model: LoadedModel, **params) -> str:
        model.knobs.extra["fast"] = True
        return "fast path"

    def disable(self, model: LoadedModel) -> None:
        model.knobs.extra.pop("fast", None)


class NeverOptimization(Optimization):
    name = "fake-never"
    title = "Never applies"
    description = "A restart-only optimization that applies to nothing."
    switch = "restart"

    def applies_to(self, model: LoadedModel) -> tuple[bool, str]:
        return False, "it needs hardware this machine does not have"

    def enable(self, model: LoadedModel, **params) -> str:
        raise AssertionError("never enabled")

    def disable(self, model: LoadedModel) -> None:
        pass


class FakePlugin:
    __name__ = "undo-fake-ie"

    def __init__(self) -> None:
        self.family = FakeFamily()
        self.labels_family = FakeLabelsFamily()

    @hookimpl
    def register_models(self, register):
        register(self.family)
        register(self.labels_family)

    @hookimpl
    def register_optimizations(self, register):
        register(FakeOptimization())
        register(NeverOptimization())
