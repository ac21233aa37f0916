"""Documents -> SeqGPT prompt strings (docs/models/seqgpt.md §1.1–§1.3), and the input checks that go with them.

The reference (Alibaba-NLP/SeqGPT inference.py) builds, per prompt,

    "输入: {text}\\n{分类|抽取}: {label，label，...}\\n输出: [GEN]"

from a comma-separated label string whose ASCII commas it turns into `，`. Extraction labels are
split into near-equal chunks of at most 6 (numpy.array_split: 7 -> 4+3), one prompt per chunk.
We take labels as a list; each list item is one piece of that label string, so a label holding a
comma is several labels, exactly as the reference would read it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from contracts.domain import Document, InputError

GEN_TOKEN = "[GEN]"
LABEL_SEPARATOR = "，"               # U+FF0C, what the reference joins labels with
DEFAULT_LABEL_BATCH = 6              # inference.py's default_extract_label_batch
MAX_PROMPT_TOKENS = 1024             # the reference tokenizes with max_length=1024, truncating on the left

# Task names a Document may carry -> the reference task. "nli" is classification of a sentence
# pair (two sentences in `text`, separated by a TAB), as in the reference demo.
TASKS = {"cls": "cls", "ext": "ext", "nli": "cls"}


@dataclass(frozen=True)
class Markers:
    input: str
    cls: str
    ext: str
    output: str


# Only the Chinese markers are what the checkpoint was trained with ("changing the instruction can
# harm the performance", README). English is an opt-in rendering of the paper figure, not reference.
MARKERS = {
    "zh": Markers(input="输入", cls="分类", ext="抽取", output="输出"),
    "en": Markers(input="Input", cls="Classify", ext="Extract", output="Output"),
}


@dataclass(frozen=True)
class Prompt:
    """One prompt chunk of a document: the string fed to the tokenizer and the labels it asks for."""

    text: str
    labels: tuple[str, ...]


def normalise_labels(labels, line: int | None = None) -> list[str]:
    """The label list as the reference reads it; raises InputError naming the problem and the line.

    A bare string is refused, as the API's schema refuses it: "人物,地点" would silently be one label to one
    reader and two to another.
    """
    if labels is None:
        raise InputError("\"labels\" is missing (or null): give a non-empty list of strings, e.g. [\"人物\", \"地点\"]",
                         line)
    if isinstance(labels, str):
        raise InputError(f"\"labels\" must be a list of strings, not the string {json.dumps(labels, ensure_ascii=False)}"
                         f": write {json.dumps([labels], ensure_ascii=False)}", line)
    if not isinstance(labels, (list, tuple)) or not labels:
        raise InputError("\"labels\" must be a non-empty list of strings", line)
    out: list[str] = []
    for label in labels:
        if not isinstance(label, str):
            kind = "null" if label is None else {dict: "a JSON object", list: "a list", bool: "true/false"}.get(
                type(label), "a number")
            shown = json.dumps(label, ensure_ascii=False, default=str)
            raise InputError(f"every label must be a string, but one is {kind}: {shown}", line)
        if "\n" in label or "\r" in label:
            raise InputError(f"label {label!r} contains a line break; the model's output is one line per label",
                             line)
        if ":" in label or "：" in label:
            raise InputError(f"label {label!r} contains a colon; the model's output separates label and span "
                             "with a colon, so such a label cannot be read back", line)
        for piece in label.strip().replace(",", LABEL_SEPARATOR).split(LABEL_SEPARATOR):
            piece = piece.strip()
            if not piece:
                raise InputError(f"label {label!r} is empty or has an empty part between commas", line)
            if piece in out:
                raise InputError(f"label {piece!r} is given twice", line)
            out.append(piece)
    return out


def task_of(document: Document) -> str:
    """'cls' or 'ext' for a document, or InputError."""
    if document.task is None:
        raise InputError("\"task\" is missing; SeqGPT takes \"cls\" (classify), \"ext\" (extract) "
                         "or \"nli\" (classify a sentence pair)", document.line)
    if document.task not in TASKS:
        raise InputError(f"unknown task {document.task!r}; SeqGPT takes \"cls\" (classify), \"ext\" (extract) "
                         "or \"nli\" (classify a sentence pair)", document.line)
    return TASKS[document.task]


def validate(document: Document) -> None:
    """Every check that needs no tokenizer, so bad input is caught before any model work."""
    if not isinstance(document.text, str):
        raise InputError(f"\"text\" must be a string, got {type(document.text).__name__}", document.line)
    task_of(document)
    normalise_labels(document.labels, document.line)
    if document.task == "nli" and document.text.strip() and "\t" not in document.text.strip():
        raise InputError("task \"nli\" needs two sentences in \"text\" separated by a TAB", document.line)


def chunk_labels(labels: list[str], size: int = DEFAULT_LABEL_BATCH) -> list[list[str]]:
    """numpy.array_split(labels, ceil(n/size)): near-equal chunks, the longer ones first (7 -> 4+3)."""
    if size < 1:
        raise InputError(f"the extraction label batch must be at least 1, got {size}")
    k = math.ceil(len(labels) / size)
    base, extra = divmod(len(labels), k)
    chunks, start = [], 0
    for i in range(k):
        end = start + base + (1 if i < extra else 0)
        chunks.append(labels[start:end])
        start = end
    return chunks


def prompt_text(text: str, task: str, labels: list[str], markers: Markers = MARKERS["zh"]) -> str:
    task_marker = markers.cls if task == "cls" else markers.ext
    return (f"{markers.input}: {text.strip()}\n{task_marker}: {LABEL_SEPARATOR.join(labels)}\n"
            f"{markers.output}: {GEN_TOKEN}")


def prompts_for(document: Document, markers: str = "zh", label_batch: int = DEFAULT_LABEL_BATCH) -> list[Prompt]:
    """The document's prompt chunks in reference order; none for an empty text (nothing to extract)."""
    if markers not in MARKERS:
        raise InputError(f"unknown prompt markers {markers!r}; use 'zh' (reference) or 'en'")
    task = task_of(document)
    labels = normalise_labels(document.labels, document.line)
    if not document.text.strip():
        return []
    chunks = [labels] if task == "cls" else chunk_labels(labels, label_batch)
    return [Prompt(prompt_text(document.text, task, chunk, MARKERS[markers]), tuple(chunk)) for chunk in chunks]

