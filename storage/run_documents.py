"""A run's documents a page at a time (History's document table) and documents found by search, with a
snippet of where the words were found; mixed into `storage.repository.Store`.

The numbers of each document — spans per type, the lowest confidence, cut or not — are computed by SQLite
from the stored output (json_each over tuples, then over their spans), for one page of the filtered
documents: a run of 100,000 documents is never loaded into the page. A span that appears in several
tuples (a relation's subject) is counted once, as the UI draws it once.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, case, column, func, literal, select, table, true

from contracts.domain import Document, Result
from storage.records import stored_document, stored_result
from storage.tables import DocumentRecord, ResultRecord, RunRecord
from storage.views import NotFound

SNIPPET_CHARS = 60                       # characters of context either side of a match


@dataclass(frozen=True)
class DocumentFilter:
    """Which documents of a run the table lists. Every part is optional; together they all must hold."""

    types: tuple[str, ...] = ()              # at least one span of one of these types
    confidence: tuple[float, float] | None = None   # the lowest confidence of its spans in [low, high]
    text: str | None = None                  # every whitespace-separated word in its text, schema or spans
    cut_only: bool = False                   # only documents the model read partly


@dataclass(frozen=True)
class DocumentRow:
    position: int
    doc_id: str
    characters: int
    spans: dict[str, int]                    # type -> spans of that type (each span once)
    cut: bool | None                         # read only partly; None: the model reports no coverage
    min_confidence: float | None             # None: no span carries a confidence (SeqGPT, or no spans)


@dataclass(frozen=True)
class DocumentPage:
    rows: list[DocumentRow]
    total: int                               # documents that pass the filter, over every page
    types: dict[str, int]                    # type -> spans over every document that passes (the chart)


@dataclass(frozen=True)
class DocumentHit:
    """A document found by search: where it is, and a piece of its text with the words marked."""

    run_id: int
    position: int
    doc_id: str
    model: str
    finished_at: datetime | None
    snippet: list[tuple[str, bool]]          # (text, is a match) pieces; plain text, for the UI to escape
    in_text: bool                            # False: the words are in its schema, labels or spans only


class RunDocuments:
    """Mixed into Store: needs `_read()`."""

    def document_page(self, run_id: int, where: DocumentFilter = DocumentFilter(), limit: int = 50,
                      offset: int = 0, with_types: bool = True) -> DocumentPage:
        """One page of the run's documents that pass `where`, in run order, with the counts the table shows.
        `with_types=False` leaves `types` empty: counting every passing document's spans is the costly part
        (seconds on a run of 100,000 documents), which a caller may cache or skip."""
        passing = _passing(run_id, where)
        page = passing.order_by(DocumentRecord.position).limit(limit).offset(offset).subquery()
        everyone = passing.subquery()
        with self._read() as s:
            rows = s.execute(select(page)).all()
            total = s.scalar(select(func.count()).select_from(everyone)) or 0
            numbers = _numbers(s, [r.id for r in rows])
            types = _type_counts(s, select(everyone.c.id)) if with_types else {}
        return DocumentPage(_rows(rows, numbers), total, types)

    def document_positions(self, run_id: int, where: DocumentFilter = DocumentFilter()) -> list[int]:
        """The positions of every document that passes `where`, in run order. A filter on types or confidence
        reads every span of the run once (seconds on a run of 100,000 documents): a caller that pages through
        the result keeps this list and asks `document_rows` for one page at a time."""
        passing = _passing(run_id, where).subquery()
        with self._read() as s:
            return list(s.scalars(select(passing.c.position).order_by(passing.c.position)))

    def document_rows(self, run_id: int, positions: Sequence[int]) -> list[DocumentRow]:
        """The table's rows of the documents at these positions (one page), in run order."""
        query = _passing(run_id, DocumentFilter()).where(DocumentRecord.position.in_(list(positions)))
        with self._read() as s:
            rows = s.execute(query.order_by(DocumentRecord.position)).all()
            return _rows(rows, _numbers(s, [r.id for r in rows]))

    def span_counts(self, run_id: int, where: DocumentFilter = DocumentFilter()) -> dict[str, int]:
        """type -> spans over the documents that pass `where`, the most frequent first (the table's chart)."""
        passing = _passing(run_id, where).subquery()
        with self._read() as s:
            return _type_counts(s, select(passing.c.id))

    def span_types(self, run_id: int) -> list[str]:
        """Every type the run extracted, for the table's type filter."""
        return list(self.span_counts(run_id))

    def run_document(self, run_id: int, position: int) -> tuple[Document, Result]:
        """One document of a run and its result, by position."""
        query = select(DocumentRecord).where(DocumentRecord.run_id == run_id, DocumentRecord.position == position)
        with self._read() as s:
            record = s.scalar(query)
            if record is None:
                raise NotFound(f"run {run_id} has no document at position {position} (deleted?)")
            return stored_document(record), stored_result(record)

    def search_documents(self, text: str, limit: int = 20, offset: int = 0, model: str | None = None,
                         task: str | None = None, since: datetime | None = None,
                         until: datetime | None = None) -> list[DocumentHit]:
        """Documents of finished runs in which every word of `text` occurs (text, schema, labels or an
        extracted span), the newest runs first, each with a snippet of its text around the first match.
        model, task, since, until: of the run, as History's run filters."""
        words = text.split()
        if not words:
            return []
        query = (select(DocumentRecord.run_id, DocumentRecord.position, DocumentRecord.doc_id, DocumentRecord.text,
                        RunRecord.model, RunRecord.finished_at)
                 .join(RunRecord, RunRecord.id == DocumentRecord.run_id)
                 .where(*_found(words, model, task, since, until))
                 .order_by(RunRecord.finished_at.desc(), RunRecord.id.desc(), DocumentRecord.position)
                 .limit(limit).offset(offset))
        with self._read() as s:
            hits = s.execute(query).all()
        return [DocumentHit(h.run_id, h.position, h.doc_id, h.model, h.finished_at, *snippet(h.text, words))
                for h in hits]

    def count_documents(self, text: str, model: str | None = None, task: str | None = None,
                        since: datetime | None = None, until: datetime | None = None) -> int:
        words = text.split()
        if not words:
            return 0
        query = (select(func.count(DocumentRecord.id)).join(RunRecord, RunRecord.id == DocumentRecord.run_id)
                 .where(*_found(words, model, task, since, until)))
        with self._read() as s:
            return s.scalar(query) or 0


def snippet(text: str, words: list[str], width: int = SNIPPET_CHARS) -> tuple[list[tuple[str, bool]], bool]:
    """The text around the first occurrence of any word (case-insensitive, as the search index matches), every
    occurrence inside that window marked. A document matched only by its schema, labels or spans gets its
    opening characters and False."""
    pattern = re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)), re.IGNORECASE)
    first = pattern.search(text)
    if first is None:
        return [(_clip(text, 0, 2 * width), False)], False
    start, end = max(first.start() - width, 0), min(first.end() + width, len(text))
    pieces: list[tuple[str, bool]] = [("…", False)] if start > 0 else []
    at = start
    for m in pattern.finditer(text, start, end):
        if m.start() > at:
            pieces.append((text[at:m.start()], False))
        pieces.append((m.group(), True))
        at = m.end()
    pieces.append((text[at:end] + ("…" if end < len(text) else ""), False))
    return [p for p in pieces if p[0]], True


def _rows(rows, numbers: dict[int, tuple[dict[str, int], float | None]]) -> list[DocumentRow]:
    listed = []
    for r in rows:
        spans, lowest = numbers.get(r.id, ({}, None))
        listed.append(DocumentRow(r.position, r.doc_id, r.characters, spans, None if r.unread is None else r.unread > 0,
                                  lowest))
    return listed


def _clip(text: str, start: int, end: int) -> str:
    return text[start:end] + ("…" if end < len(text) else "")


_search = table("document_search", column("rowid"), column("body"))


def like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def documents_matching(term: str):
    """The ids of documents whose text, schema, labels or spans hold `term`, from the search index. The trigram
    index answers a quoted phrase of 3+ characters; shorter terms (common in Chinese) fall back to LIKE over
    the index table, which is a scan but still right."""
    if len(term) >= 3:
        condition = _search.c.body.op("MATCH")('"' + term.replace('"', '""') + '"')
    else:
        condition = _search.c.body.like(like_pattern(term), escape="\\")
    return select(_search.c.rowid).where(condition)


def _found(words: list[str], model: str | None = None, task: str | None = None, since: datetime | None = None,
           until: datetime | None = None) -> list:
    conditions = [RunRecord.finished_at.is_not(None), *(DocumentRecord.id.in_(documents_matching(w)) for w in words)]
    for attribute, value in ((RunRecord.model, model), (RunRecord.task, task)):
        if value:
            conditions.append(attribute == value)
    if since is not None:
        conditions.append(RunRecord.created_at >= since)
    if until is not None:
        conditions.append(RunRecord.created_at <= until)
    return conditions


def _spans():
    """(tuples, spans) as table-valued json_each over a result's output: one row per span of each tuple."""
    tuples = func.json_each(ResultRecord.output).table_valued("value", name="tuples")
    spans = func.json_each(tuples.c.value).table_valued("value", name="spans")
    return tuples, spans


def _passing(run_id: int, where: DocumentFilter):
    """The run's documents that pass the filter, one row each. Only a filter on types or confidence needs the
    spans (grouped per document); without one the query stays on the documents' index."""
    query = (select(DocumentRecord.id, DocumentRecord.position, DocumentRecord.doc_id,
                    func.length(DocumentRecord.text).label("characters"), ResultRecord.unread_chars.label("unread"))
             .select_from(DocumentRecord)
             .join(ResultRecord, ResultRecord.document_id == DocumentRecord.id, isouter=True)
             .where(DocumentRecord.run_id == run_id))
    for word in (where.text or "").split():
        query = query.where(DocumentRecord.id.in_(documents_matching(word)))
    if where.cut_only:
        query = query.where(ResultRecord.unread_chars > 0)
    if not where.types and where.confidence is None:
        return query
    tuples, spans = _spans()
    query = query.join(tuples, true()).join(spans, true()).group_by(DocumentRecord.id)
    if where.types:
        type_ = func.json_extract(spans.c.value, "$.type")
        query = query.having(func.sum(case((type_.in_(where.types), 1), else_=0)) > 0)
    if where.confidence is not None:
        low, high = where.confidence
        lowest = func.min(func.json_extract(spans.c.value, "$.confidence"))
        query = query.having(and_(lowest >= literal(float(low)), lowest <= literal(float(high))))
    return query


def _distinct_spans(document_ids):
    """(document id, type, span key, confidence) once per span of the given documents."""
    tuples, spans = _spans()
    key = (func.json_extract(spans.c.value, "$.span").op("||")(literal("\x1f"))
           .op("||")(func.coalesce(func.json_extract(spans.c.value, "$.offset"), literal(""))))
    return (select(ResultRecord.document_id.label("document"), func.json_extract(spans.c.value, "$.type").label("type"),
                   key.label("key"), func.json_extract(spans.c.value, "$.confidence").label("confidence"))
            .select_from(ResultRecord).join(tuples, true()).join(spans, true())
            .where(ResultRecord.document_id.in_(document_ids)).distinct().subquery())


def _numbers(session, document_ids: list[int]) -> dict[int, tuple[dict[str, int], float | None]]:
    """document id -> (type -> spans, the lowest confidence), for one page of documents."""
    if not document_ids:
        return {}
    spans = _distinct_spans(document_ids)
    counts: dict[int, dict[str, int]] = {}
    lowest: dict[int, float | None] = {}
    query = (select(spans.c.document, spans.c.type, func.count(), func.min(spans.c.confidence))
             .group_by(spans.c.document, spans.c.type).order_by(spans.c.document, spans.c.type))
    for document, type_, n, confidence in session.execute(query):
        counts.setdefault(document, {})[type_] = n
        if confidence is not None:
            known = lowest.get(document)
            lowest[document] = confidence if known is None else min(known, confidence)
    return {d: (counts[d], lowest.get(d)) for d in counts}


def _type_counts(session, document_ids) -> dict[str, int]:
    """type -> spans over the given documents (a select of document ids), the most frequent first."""
    spans = _distinct_spans(document_ids)
    query = select(spans.c.type, func.count()).group_by(spans.c.type).order_by(func.count().desc(), spans.c.type)
    return {type_: n for type_, n in session.execute(query)}
