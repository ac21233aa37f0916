"""The rule every model's results keep: one result per document, in input order. The engine checks it on every
run, and `contracts.testing.run_model` on a plugin's own tests, with the same messages."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from contracts.domain import Document, Result
from contracts.words import plural


def in_input_order(documents: Sequence[Document], results: Iterable[Result]) -> Iterator[tuple[Document, Result]]:
    """Each result with its document; RuntimeError when a model gives more, fewer, or out of order."""
    given = 0
    for result in results:
        if given >= len(documents):
            raise RuntimeError(f"the model returned more results than the {plural(len(documents), 'document')} it was given")
        document = documents[given]
        if str(result.document_id) != str(document.id):
            raise RuntimeError(f"the model returned a result for {result.document_id!r} where document "
                               f"{document.id!r} was due: results must come in input order")
        given += 1
        yield document, result
    if given != len(documents):
        raise RuntimeError(f"the model returned {plural(given, 'result')} for {plural(len(documents), 'document')}")
