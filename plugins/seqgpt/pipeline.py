"""Documents -> prompt chunks -> length-bucketed batches across documents -> generation -> Results.

Chunks of all documents are pooled and batched by length; each chunk's result does not depend on
the batch it lands in (see generation.py on padding), so a document comes out as if it ran alone.
Results are yielded in input order as soon as every chunk of a document is done.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from plugins.seqgpt.generation import EncodedPrompt, GenerationSettings, generate
from plugins.seqgpt.graphs import DecodeGraphs
from plugins.seqgpt.modeling import Bloom
from plugins.seqgpt.parsing import ground, parse_classification, parse_extraction
from plugins.seqgpt.prompting import MAX_PROMPT_TOKENS, Prompt, normalise_labels, prompts_for, task_of
from workstation.batching import length_buckets, run_with_backoff
from workstation.domain import Document, Result, Span


@dataclass
class DocumentRun:
    document: Document
    task: str
    labels: list[str]
    prompts: list[Prompt]
    encoded: list[EncodedPrompt]
    warnings: list[str] = field(default_factory=list)
    raw: list[str | None] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.raw)


def encode(tokenizer, prompts: list[Prompt]) -> tuple[list[EncodedPrompt], list[str]]:
    """Token ids per chunk, left-truncated to the last MAX_PROMPT_TOKENS as the reference's tokenizer
    call does, and the PAD flag of the reference batch (this document's chunks, left-padded)."""
    ids, warnings = [], []
    for i, prompt in enumerate(prompts):
        row = tokenizer(prompt.text)["input_ids"]
        if len(row) > MAX_PROMPT_TOKENS:
            warnings.append(f"prompt {i + 1} of {len(prompts)} is {len(row)} tokens; SeqGPT reads the last "
                            f"{MAX_PROMPT_TOKENS}, so the start of the text ({len(row) - MAX_PROMPT_TOKENS} "
                            "tokens) was cut")
            row = row[-MAX_PROMPT_TOKENS:]
        ids.append(tuple(row))
    longest = max((len(r) for r in ids), default=0)
    return [EncodedPrompt(r, penalize_pad=len(r) < longest) for r in ids], warnings


def plan(document: Document, tokenizer, markers: str, label_batch: int) -> DocumentRun:
    prompts = prompts_for(document, markers, label_batch)
    encoded, warnings = encode(tokenizer, prompts)
    if not prompts:
        warnings.append("empty text: nothing to extract, the model was not run")
    return DocumentRun(document, task_of(document), normalise_labels(document.labels, document.line),
                       prompts, encoded, warnings, [None] * len(prompts))


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
    def __init__(self, network: Bloom, tokenizer):
        self.network, self.tokenizer = network, tokenizer
        self.tokens_fed = 0

    def run(self, documents: Sequence[Document], batch_size: int, settings: GenerationSettings,
            attention: str = "eager", markers: str = "zh", label_batch: int = 6,
            on_progress: Callable[[int], None] | None = None,
            graphs: DecodeGraphs | None = None) -> Iterator[Result]:
        runs = [plan(d, self.tokenizer, markers, label_batch) for d in documents]
        chunks = [(r, c) for r in runs for c in range(len(r.prompts))]

        def forward(part: Sequence[tuple[DocumentRun, int]]) -> list[str]:
            generation = generate(self.network, [run.encoded[c] for run, c in part], settings, attention,
                                  graphs=graphs)
            self.tokens_fed += generation.tokens_fed
            return [self.tokenizer.decode(t, skip_special_tokens=True) for t in generation.tokens]

        ready = 0
        batches = length_buckets([len(run.encoded[c].ids) for run, c in chunks], max(1, batch_size))
        while True:
            while ready < len(runs) and runs[ready].done:
                yield result(runs[ready])
                ready += 1
                if on_progress:
                    on_progress(ready)
            batch = next(batches, None)
            if batch is None:
                break
            part = [chunks[i] for i in batch]
            for (run, c), raw in zip(part, run_with_backoff(part, forward)):
                run.raw[c] = raw
