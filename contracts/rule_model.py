"""A loaded model that needs no weights and no GPU: rules, dictionaries, patterns, a CPU tokenizer.

`RuleModel` answers everything the host asks of a `LoadedModel` that such a model has no use for: it runs on
the CPU whatever device was asked for, computes no floating-point numbers (only fp32 is accepted), offers
no attention kernel and no capability (so every optimization says it does not apply, and the defaults in
settings.toml are skipped for it), and is never demo weights. A subclass writes `find`, the spans of one
document, and may add `check_slice` for checks that need what was loaded:

    class LoadedLexicon(RuleModel):
        def find(self, document, **options):
            return [[Span("词", word, (start, end))] for word, start, end in tokenize(document.text)]

    class Lexicon(ModelFamily):
        needs_weights = False
        def load(self, weights, device="cpu", dtype="fp32"):
            return LoadedLexicon(self, weights)

`extract` gives `find` the family's option defaults overlaid with the run's options (refusing a name the
family does not declare, as the host's surfaces already do), times the matching as the run's "device" stage, and says every result
read the whole text (`coverage`).
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from contracts.domain import Document, InputError, Result, Span
from contracts.model import Knobs, LoadedModel, ModelFamily


class RuleModel(LoadedModel):
    attention_backends = ()                 # no attention: the fused-attention optimization does not apply
    capabilities = frozenset()              # nothing for optimizations to switch

    def __init__(self, family: ModelFamily, weights: Path | str):
        self.family, self.weights, self.device, self.is_demo = family, Path(weights), "cpu", False
        self.knobs = Knobs(attention="none")

    @abstractmethod
    def find(self, document: Document, **options: Any) -> list[list[Span]]:
        """The tuples of one checked document: lists of `Span`s whose offsets are Python string indices."""

    def check_slice(self, documents: Sequence[Document]) -> None:
        """Checks that need the loaded model (names only its weights folder defines), made for every document
        of a slice before its first result; raise InputError with the document's line."""

    def set_dtype(self, dtype: str) -> None:
        if dtype != "fp32":
            raise InputError(f"{self.family.name} computes no floating-point numbers, so dtype {dtype!r} does not "
                             "apply to it; leave the dtype at fp32")
        self.knobs.dtype = dtype

    def extract(self, documents: Sequence[Document], batch_size: int = 8,
                on_progress: Callable[[int], None] | None = None, **options: Any) -> Iterator[Result]:
        unknown = sorted(set(options) - set(self.family.options))
        if unknown:        # the host refuses them before a run; a direct call (a script, a test) is told too
            takes = ", ".join(f"{k}={v!r}" for k, v in self.family.options.items()) or "no options"
            raise InputError(f"{self.family.name} has no option(s) {', '.join(unknown)}; it takes {takes}")
        options = {**self.family.options, **options}
        self.check_slice(documents)
        for done, document in enumerate(documents, start=1):
            with self.clock.device():                 # the matching is this model's "forward pass"
                tuples = self.find(document, **options)
            if on_progress:
                on_progress(done)
            yield Result(document.id, tuples, coverage=[(0, len(document.text))])
