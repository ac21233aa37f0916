"""The review queue: two models on the same documents, and a person's decisions turned into a gold output.

A schema-driven model (RexUniNLU) reads a type list as a flat schema, its first declared classification
marker (`[CLASSIFY]`) before the text for classification; a label-driven one (SeqGPT) reads it as its label
list with the task `ext` or `cls`.
Each document keeps its id in both runs, so `workstation.quality.agreement` pairs them.

Deciding a disagreement means choosing A's version, B's version or neither; the gold output is what
both models agreed on plus every chosen version, written in the convention of the model whose dataset
it goes to (`agreement.gold_output`).
"""
from __future__ import annotations

from collections.abc import Sequence

from contracts.domain import Document, InputError
from contracts.model import ModelFamily
from contracts.names import Reads
from workstation.quality.agreement import Disagreement, DocumentAgreement, Markers, Mention, cls_marker, gold_output

KINDS = {"ner": "Entities (NER)", "cls": "Classification"}
NEITHER = "neither"
MAX_DOCUMENTS = 500


def label_driven(family: ModelFamily) -> bool:
    """The family reads a task and a label list (SeqGPT), not a schema (RexUniNLU): it says so itself."""
    return family.reads == Reads.LABELS


def task_name(family: ModelFamily, kind: str) -> str:
    """The task recorded on the run: SeqGPT's `ext` / `cls`, RexUniNLU's `ner` / `cls`."""
    return ("ext" if kind == "ner" else "cls") if label_driven(family) else kind


def split_types(typed: str) -> list[str]:
    """Types from a comma- or line-separated list, each once, in order."""
    parts = [p.strip() for chunk in typed.replace("，", ",").splitlines() for p in chunk.split(",")]
    return list(dict.fromkeys(p for p in parts if p))


def documents_for(family: ModelFamily, kind: str, types: Sequence[str], texts: Sequence[str]) -> list[Document]:
    """One document per non-empty text, ids 1, 2, … in order, as this family reads the types."""
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r}; use {' or '.join(KINDS)}")
    types = [str(t).strip() for t in types if str(t).strip()]
    if not types:
        raise InputError("give at least one type (comma-separated)")
    if len(set(types)) != len(types):
        raise InputError("a type is listed twice")
    markers = family.classification_markers
    if kind == "cls" and not label_driven(family) and not markers:
        raise InputError(f"{family.name} declares no classification marker, so it cannot take a classification "
                         "task here; choose entities, or a model that classifies")
    texts = [t.strip() for t in texts if t.strip()]
    if not texts:
        raise InputError("give at least one text (one per line)")
    if len(texts) > MAX_DOCUMENTS:
        raise InputError(f"at most {MAX_DOCUMENTS} texts at a time here; run larger sets as batch jobs and pick "
                         "the two runs below")
    docs = []
    for n, text in enumerate(texts, start=1):
        if label_driven(family):
            doc = Document(str(n), text, task=task_name(family, kind), labels=list(types), line=n)
        else:
            marked = markers[0] + text if kind == "cls" and not cls_marker(text, markers) else text
            doc = Document(str(n), marked, schema=dict.fromkeys(types), line=n)
        family.validate(doc)
        docs.append(doc)
    return docs


def options(d: Disagreement) -> list[str]:
    """What a person may choose for a disagreement: a version that can be gold ("A", "B"), or neither.
    A generated span not found in the text has no offsets and cannot be gold."""
    usable = [side for side, m in (("A", d.a), ("B", d.b)) if m is not None and (m.located or m.label)]
    return usable + [NEITHER]


def keep_all(doc: DocumentAgreement, side: str) -> list[str]:
    """The decisions that make one model's output the gold: its version of every disagreement where it has
    one that can be gold, neither where it has none (the other model's mention only, or a generated span
    not found in the text)."""
    if side not in ("A", "B"):
        raise ValueError(f"side {side!r}: use A or B")
    return [side if side in options(d) else NEITHER for d in doc.disagreements]


def decided(doc: DocumentAgreement, choices: Sequence[str | None]) -> tuple[list[Mention], int]:
    """(what both agreed on plus each chosen version, how many disagreements are still undecided)."""
    if len(choices) != len(doc.disagreements):
        raise ValueError(f"{len(choices)} choices for {len(doc.disagreements)} disagreements")
    chosen, open_ = list(doc.agreed), 0
    for d, choice in zip(doc.disagreements, choices):
        if choice is None:
            open_ += 1
        elif choice == "A" and d.a is not None:
            chosen.append(d.a)
        elif choice == "B" and d.b is not None:
            chosen.append(d.b)
        elif choice != NEITHER:
            raise ValueError(f"choice {choice!r} does not fit a {d.kind} disagreement")
    return chosen, open_


def gold_for(doc: DocumentAgreement, choices: Sequence[str | None], document: Document,
             markers: Markers = ()) -> list[list[dict]]:
    """The gold output of the decisions so far, for `document` (the run whose dataset it goes to; `markers`: its
    model's classification markers)."""
    chosen, _ = decided(doc, choices)
    return gold_output(sorted(chosen, key=lambda m: (m.start if m.start is not None else -1, m.type)), document,
                       markers)
