"""Documents -> prompt chunks -> a continuously refilled decoder -> Results, in input order.

Three threads, so the device never waits on host work it does not need:
- planning: documents in windows; prompt strings built and tokenised with one batch call of the
  fast tokenizer per window, one window ahead of the decoder;
- decoding (the caller's thread): a window's chunks, longest first, through the slot pool of
  continuous.py, which refills a slot as soon as its prompt is done;
- parsing: a document's finished tokens -> text -> spans grounded in the text -> Result.
Each chunk's tokens do not depend on its neighbours in the pool (see generation.py on padding and
continuous.py), so a document comes out as if it ran alone. Results are yielded in input order,
each as soon as its document and every earlier one are done.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from contracts.domain import Document, Result, Span
from contracts.names import Kernel
from contracts.stages import IDLE, StageClock
from plugins.seqgpt.continuous import Finished, stream_generate
from plugins.seqgpt.generation import EncodedPrompt, GenerationSettings
from plugins.seqgpt.graphs import DecodeGraphs
from plugins.seqgpt.modeling import Bloom
from plugins.seqgpt.parsing import ground, parse_classification, parse_extraction
from plugins.seqgpt.prompting import MAX_PROMPT_TOKENS, Prompt, normalise_labels, prompts_for, task_of


@dataclass
class DocumentRun:
    document: Document
    task: str
    labels: list[str]
    prompts: list[Prompt]
    encoded: list[EncodedPrompt]
    warnings: list[str] = field(default_factory=list)
    raw: list[str | None] = field(default_factory=list)
    finished: list[Finished | None] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return all(f is not None for f in self.finished)


def encode(tokenizer, prompts: list[Prompt], ids: list[list[int]] | None = None
           ) -> tuple[list[EncodedPrompt], list[str]]:
    """Token ids per chunk, left-truncated to the last MAX_PROMPT_TOKENS as the reference's tokenizer
    call does, and the PAD flag of the reference batch (this document's chunks, left-padded).
    ids: the chunks' token ids when a batch call already made them."""
    if ids is None:
        ids = tokenizer([p.text for p in prompts])["input_ids"] if prompts else []
    rows, warnings = [], []
    for i, row in enumerate(ids):
        if len(row) > MAX_PROMPT_TOKENS:
            warnings.append(f"prompt {i + 1} of {len(prompts)} is {len(row)} tokens; SeqGPT reads the last "
                            f"{MAX_PROMPT_TOKENS}, so the start of the text ({len(row) - MAX_PROMPT_TOKENS} "
                            "tokens) was cut")
            row = row[-MAX_PROMPT_TOKENS:]
        rows.append(tuple(row))
    longest = max((len(r) for r in rows), default=0)
    return [EncodedPrompt(r, penalize_pad=len(r) < longest) for r in rows], warnings


def plan(documents: Sequence[Document], tokenizer, markers: str, label_batch: int) -> list[DocumentRun]:
    """Prompt chunks of a window of documents, tokenised by one batch call."""
    prompts = [prompts_for(d, markers, label_batch) for d in documents]
    texts = [p.text for chunks in prompts for p in chunks]
    ids = tokenizer(texts)["input_ids"] if texts else []
    runs, at = [], 0
    for document, chunks in zip(documents, prompts):
        encoded, warnings = encode(tokenizer, chunks, ids[at:at + len(chunks)])
        at += len(chunks)
        if not chunks:
            warnings.append("empty text: nothing to extract, the model was not run")
        runs.append(DocumentRun(document, task_of(document), normalise_labels(document.labels, document.line),
                                chunks, encoded, warnings, [None] * len(chunks), [None] * len(chunks)))
    return runs


def result(run: DocumentRun) -> Result:
    warnings = list(run.warnings)
    tuples: list[list[Span]] = []
    if run.task == "cls":
        for raw in run.raw:
            chosen, notes = parse_classification(raw, run.labels)
            warnings += notes
            tuples += [[Span(label, label, None)] for label in chosen]
    else:
        mentions = []
        for raw in run.raw:
            found, notes = parse_extraction(raw, run.labels)
            mentions += found
            warnings += notes
        spans, notes = ground(run.document.text, mentions)
        warnings += notes
        tuples = [[span] for span in spans]
    return Result(run.document.id, tuples, list(run.raw), warnings)


class Pipeline:
    def __init__(self, network: Bloom, tokenizer, clock: Callable[[], StageClock] = lambda: IDLE):
        self.network, self.tokenizer, self.clock = network, tokenizer, clock
        self.tokens_fed = 0
        self._tokenizer_lock = threading.Lock()    # a fast tokenizer is not safe across threads

    def run(self, documents: Sequence[Document], batch_size: int, settings: GenerationSettings,
            attention: str = Kernel.EAGER, markers: str = "zh", label_batch: int = 6,
            on_progress: Callable[[int], None] | None = None,
            graphs: DecodeGraphs | None = None) -> Iterator[Result]:
        """batch_size: prompts decoded at once (each num_beams rows)."""
        clock = self.clock()
        items = max(1, batch_size)
        window = max(64, 4 * items)                  # documents planned per batch call
        planner = ThreadPoolExecutor(1, thread_name_prefix="seqgpt-plan")
        parser = ThreadPoolExecutor(1, thread_name_prefix="seqgpt-parse")
        live: dict[int, DocumentRun] = {}            # documents with chunks still generating
        results: dict[int, Future] = {}

        def planned(start: int) -> Future:
            return planner.submit(self._plan, documents[start:start + window], markers, label_batch, clock)

        def chunks() -> Iterator[tuple[tuple[int, int], EncodedPrompt]]:
            ahead = planned(0) if documents else None
            for start in range(0, len(documents), window):
                runs = ahead.result()
                ahead = planned(start + window) if start + window < len(documents) else None
                order = []
                for index, run in enumerate(runs, start):
                    if run.prompts:
                        live[index] = run
                        clock.count(planned=len(run.prompts))
                        order += [(index, c) for c in range(len(run.prompts))]
                    else:
                        results[index] = parser.submit(self._finish, run, clock)
                # Longest first: a pool is sized by the first prompts it sees, and neighbours in the
                # pool have similar windows.
                order.sort(key=lambda key: -len(live[key[0]].encoded[key[1]].ids))
                for index, c in order:
                    yield (index, c), live[index].encoded[c]

        def fed(n: int) -> None:
            self.tokens_fed += n

        ready = 0

        def finished_results(wait: bool) -> Iterator[Result]:
            nonlocal ready
            while ready in results and (wait or results[ready].done()):
                yield results.pop(ready).result()
                ready += 1
                if on_progress:
                    on_progress(ready)

        try:
            for (index, c), finished in stream_generate(self.network, chunks(), items, settings, attention, graphs,
                                                        clock.device, clock.backoff, fed):
                run = live[index]
                run.finished[c] = finished
                clock.count(done=1)
                if run.done:
                    results[index] = parser.submit(self._finish, live.pop(index), clock)
                yield from finished_results(wait=False)
            yield from finished_results(wait=True)
        finally:
            planner.shutdown(wait=True, cancel_futures=True)
            parser.shutdown(wait=True, cancel_futures=True)

    def _plan(self, documents: Sequence[Document], markers: str, label_batch: int, clock: StageClock
              ) -> list[DocumentRun]:
        with clock.stage("prepare"), self._tokenizer_lock:
            return plan(documents, self.tokenizer, markers, label_batch)

    def _finish(self, run: DocumentRun, clock: StageClock) -> Result:
        tokens = [f.tokens() for f in run.finished]        # waits for the copy off the device, if any
        clock.count(tokens=sum(map(len, tokens)))
        with clock.stage("decode"):
            with self._tokenizer_lock:
                run.raw = self.tokenizer.batch_decode(tokens, skip_special_tokens=True) if tokens else []
            return result(run)
