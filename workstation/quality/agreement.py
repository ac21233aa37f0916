"""How far two runs agree: one model's mentions measured against another's, per type.

Run A is the reference and run B is scored against it, so B's precision is the share of B's mentions
that A also made, and B's recall is the share of A's mentions that B also made. Nothing here knows
which model is right; swapping A and B swaps precision and recall.

A mention is one element of a result's tuples, once per document: a span is (type, [start, end)), a
classification label is its type alone. Models write labels in one of two ways: without an offset
(SeqGPT), or, for a text that starts with one of the family's declared classification markers
(`ModelFamily.classification_markers`: RexUniNLU's `[CLASSIFY]` and `[MULTICLASSIFY]`), as the marker's
span. Both are read as a label here, and documents are paired by id and by their text without its
marker, so the same text run as `[CLASSIFY]…` through RexUniNLU and as a `cls` task through SeqGPT is one
document. Each run's markers are passed in (`markers_of` asks its model's family): nothing here names a model.

Two ways of matching, both one-to-one:
  exact    same type and the same offsets (labels: the same type);
  overlap  the exact matches, then same-type spans whose offsets overlap, the largest overlaps first.
What is left over is a disagreement: a boundary (same type, overlapping spans), a type (same offsets
or both labels, another type), or a mention only one run made. A SeqGPT span not found in the text has no offsets
and never matches.

The label set is what the documents asked for (a label list, or every key of a schema), both runs' together.
A generative model may still write a label outside it (SeqGPT keeps it under the name it wrote): such a
mention is no type of the task, so it is no type row and no disagreement to decide; it is kept apart
(`outside`) and counted only under all types, where it lowers its run's precision as any wrong mention does.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from contracts.domain import Document, Result
from workstation import plugins

Markers = tuple[str, ...]


def markers_of(model: str) -> Markers:
    """The classification markers `model`'s family declares; none for a model that is no longer installed."""
    family = plugins.model_families().get(model)
    return tuple(family.classification_markers) if family is not None else ()


@dataclass(frozen=True)
class Mention:
    type: str
    text: str
    start: int | None = None            # None: a classification label, or a generated span not in the text
    end: int | None = None
    label: bool = False
    confidence: float | None = None

    @property
    def located(self) -> bool:
        return self.start is not None

    def identity(self) -> tuple:
        if self.label:
            return (self.type, None)
        return (self.type, self.start, self.end, None if self.located else self.text)

    def describe(self) -> str:
        where = f" [{self.start}, {self.end})" if self.located else (" (label)" if self.label else " (not in the text)")
        return f"{self.type}: {self.text}{where}"


def cls_marker(text: str, markers: Markers = ()) -> str:
    """The marker the text starts with ("" if none); the longest, should one marker begin another."""
    return max((m for m in markers if m and text.startswith(m)), key=len, default="")


def plain_text(text: str, markers: Markers = ()) -> str:
    """The text without a leading classification marker."""
    return text[len(cls_marker(text, markers)):]


def mentions(text: str, result: Result, type_map: Mapping[str, str] | None = None,
             markers: Markers = ()) -> list[Mention]:
    """Each element of the result once, in order of first appearance; offsets into `plain_text(text, markers)`.
    type_map renames types (B's label names to A's schema types) before comparing."""
    marker = cls_marker(text, markers)
    shift = len(marker)
    found: dict[tuple, Mention] = {}
    for tup in result.tuples:
        for s in tup:
            kind = (type_map or {}).get(s.type, s.type)
            if marker and s.offset is not None and tuple(s.offset) == (0, shift):
                m = Mention(kind, s.type, label=True, confidence=s.confidence)
            elif s.offset is not None:
                m = Mention(kind, s.span, s.offset[0] - shift, s.offset[1] - shift, confidence=s.confidence)
            else:
                m = Mention(kind, s.span, label=s.grounded is None, confidence=s.confidence)
            found.setdefault(m.identity(), m)
    return list(found.values())


@dataclass(frozen=True)
class Disagreement:
    kind: str                           # "boundary" | "type" | "only A" | "only B"
    a: Mention | None
    b: Mention | None

    @property
    def start(self) -> int:
        """Where it is in the text, for ordering (labels first)."""
        starts = [m.start for m in (self.a, self.b) if m is not None and m.start is not None]
        return min(starts) if starts else -1


@dataclass
class DocumentAgreement:
    """One document seen by both runs: what both found, and each disagreement."""

    doc_id: str
    text: str                           # without a classification marker
    agreed: list[Mention]
    disagreements: list[Disagreement]
    a: list[Mention] = field(default_factory=list)
    b: list[Mention] = field(default_factory=list)
    position_a: int = 0                 # where the document is in each run
    position_b: int = 0
    outside_a: list[Mention] = field(default_factory=list)     # mentions whose type is outside the label set
    outside_b: list[Mention] = field(default_factory=list)

    @property
    def score(self) -> float:
        """The share of mentions the runs disagree on: 0 = the same, 1 = nothing in common."""
        total = len(self.agreed) + len(self.disagreements)
        return len(self.disagreements) / total if total else 0.0


@dataclass
class Counts:
    a: int = 0                          # mentions of run A (the reference)
    b: int = 0                          # mentions of run B
    exact: int = 0                      # pairs matched exactly
    overlap: int = 0                    # pairs matched by overlap (exact ones included)

    def add(self, other: "Counts") -> None:
        self.a += other.a
        self.b += other.b
        self.exact += other.exact
        self.overlap += other.overlap

    def scores(self) -> dict[str, float | int | None]:
        """B against A: precision over B's mentions, recall over A's; None where there is nothing to divide by."""
        def share(n: int, d: int) -> float | None:
            return n / d if d else None
        return {"A": self.a, "B": self.b,
                "precision (exact)": share(self.exact, self.b), "recall (exact)": share(self.exact, self.a),
                "precision (overlap)": share(self.overlap, self.b), "recall (overlap)": share(self.overlap, self.a)}


@dataclass
class Agreement:
    documents: list[DocumentAgreement]
    per_type: dict[str, Counts]
    only_in_a: list[str] = field(default_factory=list)     # ids of documents that only one run has
    only_in_b: list[str] = field(default_factory=list)
    outside: dict[str, Counts] = field(default_factory=dict)   # per type outside the label set (never matched)

    @property
    def overall(self) -> Counts:
        total = Counts()
        for c in (*self.per_type.values(), *self.outside.values()):
            total.add(c)
        return total

    def ranked(self) -> list[DocumentAgreement]:
        """The review queue's order: most disagreement first (share, then count), then input order."""
        order = sorted(range(len(self.documents)),
                       key=lambda i: (-self.documents[i].score, -len(self.documents[i].disagreements), i))
        return [self.documents[i] for i in order]

    def rows(self) -> list[dict]:
        """One table row per type of the label set and a last one for all types (those outside it included)."""
        rows = [{"type": t, **c.scores()} for t, c in sorted(self.per_type.items())]
        if rows or self.outside:
            rows.append({"type": "(all types)", **self.overall.scores()})
        return rows


def _overlap(x: Mention, y: Mention) -> int:
    return min(x.end, y.end) - max(x.start, y.start)


def compare_document(doc_id: str, text: str, a: list[Mention],
                     b: list[Mention]) -> tuple[DocumentAgreement, dict[str, Counts]]:
    counts: dict[str, Counts] = defaultdict(Counts)
    for m in a:
        counts[m.type].a += 1
    for m in b:
        counts[m.type].b += 1
    left, right = list(a), list(b)
    agreed: list[Mention] = []
    by_identity = {m.identity(): m for m in right if m.located or m.label}
    for m in list(left):                                            # exact
        twin = by_identity.pop(m.identity(), None) if (m.located or m.label) else None
        if twin is not None:
            left.remove(m)
            right.remove(twin)
            agreed.append(m)
            counts[m.type].exact += 1
            counts[m.type].overlap += 1
    disagreements: list[Disagreement] = []
    pairs = sorted((-_overlap(x, y), i, j) for i, x in enumerate(left) for j, y in enumerate(right)
                   if x.located and y.located and x.type == y.type and _overlap(x, y) > 0)
    used_a, used_b = set(), set()
    for _, i, j in pairs:                                           # overlap, largest first
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            counts[left[i].type].overlap += 1
            disagreements.append(Disagreement("boundary", left[i], right[j]))
    left = [m for i, m in enumerate(left) if i not in used_a]
    right = [m for j, m in enumerate(right) if j not in used_b]
    for x in list(left):                                            # the same text under another type
        y = next((y for y in right if x.located and y.located and (y.start, y.end) == (x.start, x.end)), None)
        if y is not None:
            left.remove(x)
            right.remove(y)
            disagreements.append(Disagreement("type", x, y))
    labels_a, labels_b = [x for x in left if x.label], [y for y in right if y.label]
    for x, y in zip(labels_a, labels_b):                            # one label chosen instead of another
        left.remove(x)
        right.remove(y)
        disagreements.append(Disagreement("type", x, y))
    disagreements += [Disagreement("only A", x, None) for x in left]
    disagreements += [Disagreement("only B", None, y) for y in right]
    disagreements.sort(key=lambda d: d.start)
    return DocumentAgreement(doc_id, text, agreed, disagreements, list(a), list(b)), counts


def pair_documents(a: Sequence[tuple[Document, Result]], b: Sequence[tuple[Document, Result]],
                   markers_a: Markers = (), markers_b: Markers = ()):
    """(position_a, position_b) of documents both runs have, matched by id and text (without a
    classification marker), in A's order; then the ids only A has and those only B has."""
    def key(doc: Document, markers: Markers) -> tuple[str, str]:
        return str(doc.id), plain_text(doc.text, markers)
    waiting: dict[tuple, list[int]] = defaultdict(list)
    for j, (doc, _) in enumerate(b):
        waiting[key(doc, markers_b)].append(j)
    pairs, only_a = [], []
    for i, (doc, _) in enumerate(a):
        queue = waiting.get(key(doc, markers_a))
        if queue:
            pairs.append((i, queue.pop(0)))
        else:
            only_a.append(str(doc.id))
    only_b = [k[0] for k, rest in waiting.items() for _ in rest]
    return pairs, only_a, only_b


def label_set(document: Document) -> set[str] | None:
    """The types a document asked for: its labels, or every key of its schema at any depth (relation and
    event arguments included); None when it names none (then no type is outside)."""
    if document.labels is not None:
        return {str(x) for x in document.labels}
    if not isinstance(document.schema, dict):
        return None
    found: set[str] = set()
    levels = [document.schema]
    while levels:
        level = levels.pop()
        for key, below in level.items():
            found.add(str(key))
            if isinstance(below, dict):
                levels.append(below)
    return found


def split_outside(found: list[Mention], allowed: set[str] | None) -> tuple[list[Mention], list[Mention]]:
    """(the mentions whose type is in the label set, those outside it)."""
    if allowed is None:
        return found, []
    return [m for m in found if m.type in allowed], [m for m in found if m.type not in allowed]


def agreement(a: Sequence[tuple[Document, Result]], b: Sequence[tuple[Document, Result]],
              type_map: Mapping[str, str] | None = None, markers_a: Markers = (), markers_b: Markers = ()) -> Agreement:
    """Run B measured against run A over the documents both have (items as in `RunDetail.items`); each run's
    classification markers as its model declares them (`markers_of`)."""
    pairs, only_a, only_b = pair_documents(a, b, markers_a, markers_b)
    per_type: dict[str, Counts] = defaultdict(Counts)
    outside: dict[str, Counts] = defaultdict(Counts)
    documents = []
    for i, j in pairs:
        (doc_a, res_a), (doc_b, res_b) = a[i], b[j]
        set_a, set_b = label_set(doc_a), label_set(doc_b)
        set_b = None if set_b is None else {(type_map or {}).get(t, t) for t in set_b}
        allowed = None if set_a is None and set_b is None else (set_a or set()) | (set_b or set())
        in_a, out_a = split_outside(mentions(doc_a.text, res_a, markers=markers_a), allowed)
        in_b, out_b = split_outside(mentions(doc_b.text, res_b, type_map, markers_b), allowed)
        doc, counts = compare_document(str(doc_a.id), plain_text(doc_a.text, markers_a), in_a, in_b)
        doc.position_a, doc.position_b = i, j
        doc.outside_a, doc.outside_b = out_a, out_b
        documents.append(doc)
        for t, c in counts.items():
            per_type[t].add(c)
        for m in out_a:
            outside[m.type].a += 1
        for m in out_b:
            outside[m.type].b += 1
    return Agreement(documents, dict(per_type), only_a, only_b, dict(outside))


def gold_output(chosen: Iterable[Mention], document: Document, markers: Markers = ()) -> list[list[dict]]:
    """Mentions as a gold output for `document`, in the convention of the model that reads it (`markers`: its
    family's): a label is the marker's span for a text that starts with one, else the label with no offset."""
    marker = cls_marker(document.text, markers)
    out = []
    for m in chosen:
        if m.label:
            out.append([{"type": m.type, "span": marker, "offset": [0, len(marker)]} if marker
                        else {"type": m.type, "span": m.type, "offset": None}])
        elif m.located:
            out.append([{"type": m.type, "span": m.text, "offset": [m.start + len(marker), m.end + len(marker)]}])
    return out
