"""Gold datasets: named sets of corrected examples per model, and the gold JSONL the fine-tuner reads.

A gold example is its own row with its own copy of the text and output, linked to the run and stored
document it was corrected from (if any): saving a correction never changes the run history, and
deleting a run only unlinks its examples. Saving the same stored document into a dataset again
replaces that example (a second correction of one document is an update, not a duplicate).

Whether an output is fit to train on is the model family's call (`ModelFamily.validate_gold`); the
store only keeps the shape in order. Mixed into `storage.repository.Store` like `JobQueue`.

`export_dataset` writes exactly what `launcher.py finetune --train/--eval` reads: one line per example,
`{"id", "text", "schema", "output"}` (RexUniNLU) or `{"id", "text", "task", "labels", "output"}` (SeqGPT),
optionally split into train/dev by a seeded ratio.
"""
from __future__ import annotations

import json
import os
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select

from contracts.domain import Document, InputError
from storage.records import dataset_view, gold_example_view
from storage.tables import DatasetRecord, DocumentRecord, GoldExampleRecord, RunRecord, utcnow
from storage.views import Dataset, GoldExample, NotFound

NAME_LIMIT = 200


def dataset_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise InputError("give the dataset a name")
    if len(name) > NAME_LIMIT:
        raise InputError(f"a dataset name has at most {NAME_LIMIT} characters")
    return name


def gold_output(output: Any) -> list[list[dict[str, Any]]]:
    """Tuples reduced to what a gold line holds: type, span and [start, end] (or None for a label)."""
    if not isinstance(output, list):
        raise InputError("a gold output is a list of tuples")
    tuples = []
    for n, tup in enumerate(output):
        if not isinstance(tup, list) or not tup:
            raise InputError(f"tuple {n + 1} must be a non-empty list of {{type, span, offset}}")
        elements = []
        for e in tup:
            if not isinstance(e, dict) or not isinstance(e.get("type"), str) or not isinstance(e.get("span"), str):
                raise InputError(f"tuple {n + 1} has an element without a type and a span: {e!r}")
            offset = e.get("offset")
            elements.append({"type": e["type"], "span": e["span"],
                             "offset": [int(offset[0]), int(offset[1])] if offset is not None else None})
        tuples.append(elements)
    return tuples


class GoldDatasets:
    # ---- datasets -------------------------------------------------------------------------------------

    def create_dataset(self, name: str, model: str, note: str | None = None) -> int:
        with self._write() as s:
            return _create(s, dataset_name(name), model, note).id

    def list_datasets(self, model: str | None = None) -> list[Dataset]:
        """Newest first, with their example counts."""
        counts = (select(GoldExampleRecord.dataset_id, func.count(GoldExampleRecord.id).label("n"))
                  .group_by(GoldExampleRecord.dataset_id).subquery())
        query = (select(DatasetRecord, func.coalesce(counts.c.n, 0))
                 .outerjoin(counts, counts.c.dataset_id == DatasetRecord.id)
                 .order_by(DatasetRecord.updated_at.desc(), DatasetRecord.id.desc()))
        if model:
            query = query.where(DatasetRecord.model == model)
        with self._read() as s:
            return [dataset_view(d, n) for d, n in s.execute(query)]

    def get_dataset(self, dataset_id: int) -> Dataset:
        with self._read() as s:
            d = _dataset(s, dataset_id)
            return dataset_view(d, _count(s, d.id))

    def delete_dataset(self, dataset_id: int) -> bool:
        """The dataset and its examples (runs they came from stay; training runs keep their record)."""
        with self._write() as s:
            return s.execute(delete(DatasetRecord).where(DatasetRecord.id == dataset_id)).rowcount > 0

    # ---- gold examples --------------------------------------------------------------------------------

    def save_gold_example(self, dataset: int | str, model: str, document: Document, output: Any, *,
                          run_id: int | None = None, position: int | None = None,
                          source: str = "history") -> tuple[int, bool]:
        """Keep a corrected output as a gold example in `dataset` (an id, or a name to find or create, in the
        same transaction). Linked to the stored document at (run_id, position) when given; saving that
        document into the dataset again replaces its example. Returns (example id, created)."""
        tuples = gold_output(output)
        now = utcnow()
        with self._write() as s:
            d = _resolve(s, dataset, model)
            document_id = None
            if run_id is not None:
                run = s.get(RunRecord, run_id)
                if run is None:
                    raise NotFound(f"run {run_id} is not in the history (deleted?)")
                if run.model != d.model:
                    raise InputError(f"dataset {d.name!r} holds {d.model} examples; run {run_id} is {run.model}")
                if position is not None:
                    document_id = s.scalar(select(DocumentRecord.id).where(DocumentRecord.run_id == run_id,
                                                                           DocumentRecord.position == position))
            existing = None
            if document_id is not None:
                existing = s.scalar(select(GoldExampleRecord).where(GoldExampleRecord.dataset_id == d.id,
                                                                    GoldExampleRecord.document_id == document_id))
            example = existing or GoldExampleRecord(dataset_id=d.id, created_at=now, run_id=run_id,
                                                    document_id=document_id, source=source)
            example.doc_id, example.text, example.output = str(document.id), document.text, tuples
            example.schema, example.task, example.labels = document.schema, document.task, document.labels
            example.updated_at = d.updated_at = now
            if existing is None:
                s.add(example)
            s.flush()
            return example.id, existing is None

    def add_gold_examples(self, dataset: int | str, model: str, examples: Sequence[tuple[Document, Any]],
                          source: str) -> tuple[int, int]:
        """Add many examples (an import) in one transaction: all of them, or — on any error — none, and no
        new dataset either. Returns (dataset id, examples added)."""
        rows = [(doc, gold_output(output)) for doc, output in examples]
        now = utcnow()
        with self._write() as s:
            d = _resolve(s, dataset, model)
            s.add_all(GoldExampleRecord(dataset_id=d.id, doc_id=str(doc.id), text=doc.text, schema=doc.schema,
                                        task=doc.task, labels=doc.labels, output=tuples, source=source,
                                        created_at=now, updated_at=now) for doc, tuples in rows)
            d.updated_at = now
            s.flush()
            return d.id, len(rows)

    def gold_examples(self, dataset_id: int, limit: int | None = None, offset: int = 0) -> list[GoldExample]:
        """In the order they were added."""
        query = (select(GoldExampleRecord).where(GoldExampleRecord.dataset_id == dataset_id)
                 .order_by(GoldExampleRecord.id).limit(limit).offset(offset))
        with self._read() as s:
            _dataset(s, dataset_id)
            return [gold_example_view(g) for g in s.scalars(query)]

    def gold_example(self, example_id: int) -> GoldExample:
        with self._read() as s:
            g = s.get(GoldExampleRecord, example_id)
            if g is None:
                raise NotFound(f"gold example {example_id} is not in the database (deleted?)")
            return gold_example_view(g)

    def gold_examples_of_document(self, run_id: int, position: int) -> list[tuple[Dataset, GoldExample]]:
        """The gold examples saved from the stored document at (run, position), with their datasets."""
        document_id = select(DocumentRecord.id).where(DocumentRecord.run_id == run_id,
                                                      DocumentRecord.position == position).scalar_subquery()
        query = (select(GoldExampleRecord).where(GoldExampleRecord.document_id == document_id)
                 .order_by(GoldExampleRecord.id))
        with self._read() as s:
            found = list(s.scalars(query))
            return [(dataset_view(g.dataset, _count(s, g.dataset_id)), gold_example_view(g)) for g in found]

    def delete_gold_example(self, example_id: int) -> bool:
        with self._write() as s:
            return s.execute(delete(GoldExampleRecord).where(GoldExampleRecord.id == example_id)).rowcount > 0


def _dataset(s, dataset_id: int) -> DatasetRecord:
    d = s.get(DatasetRecord, dataset_id)
    if d is None:
        raise NotFound(f"dataset {dataset_id} is not in the database (deleted?)")
    return d


def _find(s, model: str, name: str) -> DatasetRecord | None:
    return s.scalar(select(DatasetRecord).where(DatasetRecord.model == model, DatasetRecord.name == name))


def _create(s, name: str, model: str, note: str | None = None) -> DatasetRecord:
    if _find(s, model, name) is not None:
        raise InputError(f"a {model} dataset named {name!r} already exists; pick it or choose another name")
    now = utcnow()
    d = DatasetRecord(name=name, model=model, created_at=now, updated_at=now, note=note)
    s.add(d)
    s.flush()
    return d


def _resolve(s, dataset: int | str, model: str) -> DatasetRecord:
    """An existing dataset by id (of this model), or by name: found, else created."""
    if isinstance(dataset, int):
        d = _dataset(s, dataset)
        if d.model != model:
            raise InputError(f"dataset {d.name!r} holds {d.model} examples, not {model}")
        return d
    name = dataset_name(dataset)
    return _find(s, model, name) or _create(s, name, model)


def _count(s, dataset_id: int) -> int:
    return s.scalar(select(func.count(GoldExampleRecord.id)).where(GoldExampleRecord.dataset_id == dataset_id)) or 0


# ---- gold JSONL for the fine-tuner -----------------------------------------------------------------------

@dataclass
class GoldExport:
    train: Path
    train_examples: int
    dev: Path | None = None
    dev_examples: int = 0

    def message(self) -> str:
        text = f"{self.train_examples} training examples"
        if self.dev is not None:
            text += f", {self.dev_examples} held out for evaluation"
        return text


def split_examples(examples: Sequence[GoldExample], dev_ratio: float,
                   seed: int = 0) -> tuple[list[GoldExample], list[GoldExample]]:
    """(train, dev): a seeded shuffle, the first round(n * ratio) examples held out (at least one when the
    ratio is above 0, never all). The same seed and ratio always give the same split; both keep input order."""
    if not 0 <= dev_ratio < 1:
        raise InputError(f"the dev share must be in [0, 1), got {dev_ratio}")
    n = len(examples)
    if dev_ratio == 0 or n == 0:
        return list(examples), []
    if n < 2:
        raise InputError("a dataset of one example cannot be split into train and dev")
    held = min(max(round(n * dev_ratio), 1), n - 1)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    dev = set(order[:held])
    return [e for i, e in enumerate(examples) if i not in dev], [e for i, e in enumerate(examples) if i in dev]


def gold_jsonl(examples: Sequence[GoldExample]) -> str:
    return "".join(json.dumps(e.gold_line(), ensure_ascii=False) + "\n" for e in examples)


def write_gold_jsonl(examples: Sequence[GoldExample], path: str | Path) -> Path:
    """The file appears complete or not at all (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(gold_jsonl(examples))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def export_dataset(store, dataset_id: int, train_path: str | Path, dev_path: str | Path | None = None,
                   dev_ratio: float = 0.0, seed: int = 0) -> GoldExport:
    """Write a dataset as gold JSONL; with a dev ratio, the held-out share goes to `dev_path`."""
    examples = store.gold_examples(dataset_id)
    if not examples:
        raise InputError(f"dataset {store.get_dataset(dataset_id).name!r} has no examples yet")
    train, dev = split_examples(examples, dev_ratio, seed)
    if dev and dev_path is None:
        raise InputError("a dev split needs a path for the dev file")
    report = GoldExport(write_gold_jsonl(train, train_path), len(train))
    if dev:
        report.dev, report.dev_examples = write_gold_jsonl(dev, dev_path), len(dev)
    return report
