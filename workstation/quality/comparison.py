"""Two runs compared tuple by tuple (History's compare): per document, the tuples only run A made, only run B
made, and both made. Agreement (agreement.py) scores mentions by type; this keeps every tuple whole, so a
changed setting that changed any output shows as a row.

Documents are matched by position, id and text: a document whose text differs between the runs under the same
id is two documents, and `RunComparison.texts_differ` names it, because the runs' times then do not compare
like for like. The store only reads the runs (`Store.get_run`); the comparing is done here."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from contracts.domain import Result, Span
from contracts.runs import RunDetail, RunSummary

if TYPE_CHECKING:
    from storage.repository import Store

# A tuple's identity when comparing runs: (type, span, offset) of each element, in order.
SpanKey = tuple[tuple[str, str, tuple[int, int] | None], ...]


def span_key(spans: Sequence[Span]) -> SpanKey:
    return tuple((s.type, s.span, tuple(s.offset) if s.offset is not None else None) for s in spans)


@dataclass
class DocumentComparison:
    position: int
    doc_id: str
    text: str
    only_a: list[SpanKey]
    only_b: list[SpanKey]
    both: list[SpanKey]
    in_a: bool = True                # False: this document is only in run b (runs over different inputs)
    in_b: bool = True


@dataclass
class RunComparison:
    a: RunSummary                    # each run's time, memory and settings, for the side-by-side
    b: RunSummary
    documents: list[DocumentComparison]
    texts_differ: list[str] = field(default_factory=list)   # ids whose text is not the same in a and b

    @property
    def same_inputs(self) -> bool:
        """Both runs read the same texts under the same ids: their times and outputs compare like for like."""
        return not self.texts_differ and all(d.in_a and d.in_b for d in self.documents)

    @property
    def only_a(self) -> int:
        return sum(len(d.only_a) for d in self.documents)

    @property
    def only_b(self) -> int:
        return sum(len(d.only_b) for d in self.documents)

    @property
    def both(self) -> int:
        return sum(len(d.both) for d in self.documents)

    @property
    def identical(self) -> bool:
        return self.only_a == 0 and self.only_b == 0 and self.same_inputs


def compare_runs(store: Store, a: int, b: int) -> RunComparison:
    """Runs `a` and `b` of the history compared (storage.views.NotFound if either is not there)."""
    return compare(store.get_run(a), store.get_run(b))


def compare(run_a: RunDetail, run_b: RunDetail) -> RunComparison:
    """Per document (matched by position, id and text): tuples only in a, only in b, in both."""
    docs_a = {(i, d.id, d.text): (d, r) for i, (d, r) in enumerate(run_a.items)}
    docs_b = {(i, d.id, d.text): (d, r) for i, (d, r) in enumerate(run_b.items)}
    ids_a = {(i, doc_id) for i, doc_id, _ in docs_a}
    texts_differ = [doc_id for i, doc_id, _ in sorted(docs_b.keys() - docs_a.keys()) if (i, doc_id) in ids_a]
    rows = []
    for key in sorted(docs_a.keys() | docs_b.keys()):
        document = (docs_a.get(key) or docs_b[key])[0]
        keys_a = _tuple_keys(docs_a[key][1]) if key in docs_a else []
        keys_b = _tuple_keys(docs_b[key][1]) if key in docs_b else []
        set_a, set_b = set(keys_a), set(keys_b)
        rows.append(DocumentComparison(
            key[0], key[1], document.text, [k for k in keys_a if k not in set_b],
            [k for k in keys_b if k not in set_a], [k for k in keys_a if k in set_b], key in docs_a, key in docs_b))
    return RunComparison(run_a.summary, run_b.summary, rows, texts_differ)


def _tuple_keys(result: Result) -> list[SpanKey]:
    return list(dict.fromkeys(span_key(t) for t in result.tuples))        # ordered, without repeats
