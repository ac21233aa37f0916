"""Gold results -> SeqGPT training prompts -> causal-LM loss on the answer tokens only.

Each example is one prompt chunk exactly as inference builds it (prompting.prompts_for: the
reference template, extraction labels split 7 -> 4+3, left-truncated to the last 1,024 tokens),
followed by the answer the model should generate for that chunk and EOS:

  * extraction: one line per label of the chunk, in chunk order, `label: span1，span2` — spans in
    text order joined by `，` — and `label: None` for a label without a span. This is what
    parsing.parse_extraction reads and what the model's own outputs look like (`LOC: MELBOURNE`,
    `时间: None`; docs/models/seqgpt.md §1.5). The reference repository publishes no training code, so the span
    separator `，` is our choice among those seen (docs/models/seqgpt.md §6);
  * classification: the chosen labels in label-set order joined by `，`, or `None` if none is;
  * EOS (`</s>`) ends every answer: the model must learn to stop, and generation stops on it.

The answer has no offsets: parsing ties the k-th mention of a span to its k-th occurrence in the
text, so gold that marks only a later occurrence is learned as text and scored at the earlier one.

Loss: cross-entropy of each answer token (EOS included) given everything before it; prompt and pad
positions carry label -100 and are not scored, and logits are computed for the scored positions
only (a full [B, L, V] would be the largest tensor of a step). Each example's loss is the mean over
its answer tokens and a batch's loss is the mean over examples, so a batch costs what its examples
cost alone, whatever they are padded to.

Padding is on the left, as at inference: a training row is laid out exactly like the prefill of a
generation — same ALiBi positions (counted over real tokens), same masks — and its answer sits at
the end of the row, where generation writes it.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from contracts.domain import Document, InputError
from contracts.model import DEMO_MARKER, Training
from contracts.names import Kernel
from plugins.seqgpt.parsing import Mention, parse_extraction
from plugins.seqgpt.pipeline import encode
from plugins.seqgpt.prompting import (
    DEFAULT_LABEL_BATCH,
    LABEL_SEPARATOR,
    normalise_labels,
    prompts_for,
    task_of,
    validate,
)

IGNORE = -100                       # the label of positions that are not scored
NO_SPAN = "None"                    # what an extraction answer says for a label without a span
METADATA_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json")


# ---------------------------------------------------------------- gold data

def validate_gold(document: Document, output: Any) -> list:
    """Gold in our Result output shape: tuples of one {type, span, offset}. Extraction: type is a
    label, span a string the answer format can carry, offset null or [start, end) with
    text[start:end] == span. Classification: {"type": label, "span": label, "offset": null}."""
    validate(document)
    line, task = document.line, task_of(document)
    labels = normalise_labels(document.labels, line)
    if not isinstance(output, list):
        raise InputError("\"output\" must be a list of tuples, each [{\"type\", \"span\", \"offset\"}]", line)
    seen: dict[tuple, int] = {}
    for n, info in enumerate(output):
        if not isinstance(info, list) or len(info) != 1:
            raise InputError(f"output[{n}] must be a list holding one {{type, span, offset}} "
                             "(a SeqGPT tuple is a single span)", line)
        e = info[0]
        if not isinstance(e, dict) or not {"type", "span", "offset"} <= set(e):
            raise InputError(f"output[{n}] has an element without type/span/offset: {e!r}", line)
        label, span, offset = e["type"], e["span"], e["offset"]
        if label not in labels:
            raise InputError(f"output[{n}] type {label!r} is not one of the labels {labels}", line)
        if task == "cls":
            if span != label or offset is not None:
                raise InputError(f"output[{n}]: a classification answer is {{\"type\": label, \"span\": label, "
                                 f"\"offset\": null}}, got span {span!r} and offset {offset!r}", line)
        else:
            _check_span(n, label, span, offset, document.text, line)
        key = (label, span, tuple(offset) if offset is not None else None)
        if key in seen:
            raise InputError(f"output[{n}] repeats output[{seen[key]}]", line)
        seen[key] = n
    return output


def _check_span(n: int, label: str, span: Any, offset: Any, text: str, line: int | None) -> None:
    if not isinstance(span, str) or not span.strip():
        raise InputError(f"output[{n}] span {span!r} must be a non-empty string", line)
    # A span the model could only write in a way the parser reads differently cannot be taught.
    if "\n" in span or parse_extraction(f"{label}: {span}", [label])[0] != [Mention(label, span)]:
        raise InputError(f"output[{n}] span {span!r} cannot be written in SeqGPT's answer format: the parser "
                         "would not read it back whole (a comma, a line break, a run of spaces, surrounding "
                         "whitespace, or a word meaning 'no span' such as None)", line)
    if offset is None:
        return
    if (not isinstance(offset, list) or len(offset) != 2 or not all(type(x) is int for x in offset)
            or not 0 <= offset[0] < offset[1] <= len(text)):
        raise InputError(f"output[{n}] offset {offset!r} is not null or [start, end) inside the text", line)
    if text[offset[0]:offset[1]] != span:
        raise InputError(f"output[{n}] span {span!r} is not text[{offset[0]}:{offset[1]}] = "
                         f"{text[offset[0]:offset[1]]!r}", line)


def answer_text(task: str, labels: Sequence[str], gold: list) -> str:
    """What the model should generate for a prompt chunk asking for `labels` (module docstring)."""
    spans = [t[0] for t in gold]
    if task == "cls":
        chosen = {e["type"] for e in spans}
        return LABEL_SEPARATOR.join(label for label in labels if label in chosen) or NO_SPAN
    lines = []
    for label in labels:
        mine = [e for e in spans if e["type"] == label]
        # Text order; spans without an offset keep their gold order, after the grounded ones.
        mine.sort(key=lambda e: (e["offset"] is None, e["offset"] or (0, 0)))
        lines.append(f"{label}: {LABEL_SEPARATOR.join(e['span'] for e in mine) or NO_SPAN}")
    return "\n".join(lines)


# ---------------------------------------------------------------- examples and batches

@dataclass(frozen=True)
class Example:
    """One prompt chunk and the answer tokens (EOS last) the model should generate after it."""

    prompt: tuple[int, ...]
    answer: tuple[int, ...]
    answer_text: str


def examples(tokenizer, eos_id: int, document: Document, gold: list,
             label_batch: int = DEFAULT_LABEL_BATCH) -> list[Example]:
    prompts = prompts_for(document, "zh", label_batch)
    encoded, _ = encode(tokenizer, prompts)            # left-truncated exactly as inference does
    task = task_of(document)
    out = []
    for prompt, enc in zip(prompts, encoded):
        text = answer_text(task, prompt.labels, gold)
        answer = tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) + (eos_id,)
        out.append(Example(enc.ids, answer, text))
    return out


@dataclass
class Batch:
    """Left-padded prompt + answer rows: input_ids, attention_mask, labels [B, L]; labels hold the
    answer tokens at their own positions and IGNORE everywhere else."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor


def collate(batch: Sequence[Example], pad_id: int, device) -> Batch:
    length = max(len(ex.prompt) + len(ex.answer) for ex in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), length), dtype=torch.long)
    labels = torch.full((len(batch), length), IGNORE, dtype=torch.long)
    for row, ex in enumerate(batch):
        n = len(ex.prompt) + len(ex.answer)
        ids[row, length - n:] = torch.tensor(ex.prompt + ex.answer)
        mask[row, length - n:] = 1
        labels[row, length - len(ex.answer):] = torch.tensor(ex.answer)
    return Batch(ids.to(device), mask.to(device), labels.to(device))


def batch_loss(network, batch: Sequence[Example], pad_id: int, attention: str = Kernel.SDPA,
               autocast_dtype=None) -> torch.Tensor:
    """Mean over examples of the mean answer-token cross-entropy (module docstring)."""
    device = network.word_embeddings.weight.device
    b = collate(batch, pad_id, device)
    scored = b.labels != IGNORE                                    # [B, L]
    predicts = torch.zeros_like(scored)
    predicts[:, :-1] = scored[:, 1:]                               # position t predicts token t + 1
    with torch.autocast(device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
        logits = network(b.input_ids, b.attention_mask, None, attention, keep=predicts)   # [N, V]
    targets = b.labels[:, 1:][scored[:, 1:]]                       # row-major, as the logits
    token_loss = F.cross_entropy(logits.float(), targets, reduction="none")
    counts = scored.sum(dim=1)                                     # answer tokens per row
    weights = (1.0 / counts.float()).repeat_interleave(counts)
    return (token_loss * weights).sum() / len(batch)


# ---------------------------------------------------------------- what the fine-tuning loop sees

class SeqGPTTraining(Training):
    def __init__(self, model, label_batch: int = DEFAULT_LABEL_BATCH):
        self.model, self.network = model, model.network
        self.label_batch = label_batch
        self.attention = Kernel.SDPA

    def examples(self, document: Document, gold: list) -> list[Example]:
        return examples(self.model.tokenizer, self.model.special.eos, document, gold, self.label_batch)

    def loss(self, batch: Sequence[Example], autocast_dtype=None) -> torch.Tensor:
        return batch_loss(self.network, batch, self.model.special.pad, self.attention, autocast_dtype)

    def begin(self) -> str:
        # eager and sdpa have a backward pass and dropout; any other (fused inference) kernel
        # trains through SDPA, which computes the same attention.
        knob = self.model.knobs.attention
        self.attention = knob if knob in (Kernel.EAGER, Kernel.SDPA) else Kernel.SDPA
        self.network.checkpointing = self.model.knobs.checkpointing
        self.network.requires_grad_(True)
        self.network.train()
        return self.attention

    def end(self) -> None:
        self.network.eval()
        self.network.requires_grad_(False)

    def write_official(self, output: Path) -> None:
        """config.json, generation and tokenizer files copied; pytorch_model.bin holds the state dict
        with the official `transformer.` keys (the tied lm_head left out), in fp32 so the tuned
        weights are kept exactly (the official file is fp16; the loader reads both)."""
        weights = self.model.weights
        for name in METADATA_FILES + (DEMO_MARKER,):          # a model tuned from random weights is still a demo
            if (weights / name).is_file():
                shutil.copyfile(weights / name, output / name)
        config = json.loads((output / "config.json").read_text("utf-8"))
        config["torch_dtype"] = "float32"
        (output / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", "utf-8")
        state = {f"transformer.{k}": v.detach().float().cpu().contiguous()
                 for k, v in self.network.state_dict().items()}
        torch.save(state, output / "pytorch_model.bin")
        (output / "model.safetensors").unlink(missing_ok=True)    # the loader would read it first
