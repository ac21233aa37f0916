"""Gold tuples -> training windows with 0/1 link labels -> the reference's circle loss.

The objective is the reference trainer's (rex/data_utils/data_loader.py `tokenize_data` and
`_get_labels`, rex/model/model.py `circle_loss`), built on the same prompts inference uses:

  * levels are taught with gold prefixes (teacher forcing): level k's prefixes are the gold
    tuples cut to k elements, each carrying every type of its sub-schema;
  * for every window of every hint, each gold span (head token h, tail token t) of the pair
    (prefix, type) whose [TYPE] token is T sets three cells of the [L, L] label matrix:
    (h, t) span, (h, T) head link, (T, t) tail link — exactly what decoding reads back;
  * the loss is a multilabel circle loss over all cells: log(1 + Σ_neg e^s) + log(1 + Σ_pos e^-s).

Kept deterministic, and where we differ from the reference:
  * no shuffling of prefixes (as at inference); the reference's "negative sampling" only adds
    sibling types missing from the hint, and with an explicit schema every sibling is already
    there, so it never fires and is not implemented;
  * padding cells are left out of the loss (the reference counts them as negatives, so the loss
    of a window depended on what it was batched with);
  * classification windows after the first carry the inserted cls token as the gold span for that
    window only (the reference overwrote the gold map in place, so later hints' first windows got
    a stale offset pointing into the text);
  * dropout is the config's (hidden_dropout_prob / attention_probs_dropout_prob, 0.1 in the
    official config.json), at DeBERTa-v2's places, active in training only; the reference's
    trainer could raise it to 0.3 by argument, ours follows config.json.

`RexTraining` is what the host's fine-tuning loop (workstation/finetune/trainer.py) sees.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from contracts.domain import Document, InputError
from contracts.model import DEMO_MARKER, Training
from contracts.names import Kernel
from plugins.rexuninlu.decoding import Window
from plugins.rexuninlu.prompting import CLASSIFY, MULTICLASSIFY, Prompter, task_kind
from plugins.rexuninlu.scoring import Packed, WindowScorer, isolation_mask

Gold = list[list[dict]]          # our output format: tuples of {"type", "span", "offset"}


@dataclass
class Example:
    """One training window and the positive cells of its [L, L] label matrix."""

    window: Window
    positives: list[tuple[int, int]]


# ---------------------------------------------------------------- gold data

def validate_gold(output: Any, text: str, schema: dict, line: int | None = None) -> Gold:
    """Every tuple is a path down the schema, every span is text[start:end]."""
    if not isinstance(output, list):
        raise InputError("\"output\" must be a list of tuples (lists of {type, span, offset})", line)
    for n, info in enumerate(output):
        if not isinstance(info, list) or not info:
            raise InputError(f"output[{n}] must be a non-empty list of {{type, span, offset}}", line)
        node: Any = schema
        for e in info:
            if not isinstance(e, dict) or not {"type", "span", "offset"} <= set(e):
                raise InputError(f"output[{n}] has an element without type/span/offset: {e!r}", line)
            off = e["offset"]
            if (not isinstance(off, list) or len(off) != 2 or not all(isinstance(x, int) for x in off)
                    or not 0 <= off[0] < off[1] <= len(text)):
                raise InputError(f"output[{n}] offset {off!r} is not [start, end) inside the text", line)
            if text[off[0]:off[1]] != e["span"]:
                raise InputError(f"output[{n}] span {e['span']!r} is not text[{off[0]}:{off[1]}] = "
                                 f"{text[off[0]:off[1]]!r}", line)
            if not isinstance(node, dict) or e["type"] not in node:
                raise InputError(f"output[{n}] type {e['type']!r} is not in the schema at that level", line)
            node = node[e["type"]]
    return output


def _element(e: dict) -> tuple:
    return (e["type"], e["span"], tuple(e["offset"]))


def _depth(schema: dict) -> int:
    return 1 + max((_depth(sub) for sub in schema.values() if sub), default=0)


def gold_levels(schema: dict, gold: Gold) -> list[dict[tuple, dict[str, list[tuple[int, int]]]]]:
    """Per schema level: prefix tuple -> type -> gold (start, end) spans (the reference's level_hint_map).

    Level 0 has the prefix () with every top type; level k+1 has one prefix per distinct gold
    tuple cut to k+1 elements whose last type has a sub-schema, with every type of that sub-schema.
    """
    levels = []
    level_map: dict[tuple, dict[str, list]] = {(): {t: [] for t in schema}}
    for k in range(_depth(schema)):
        next_map: dict[tuple, dict[str, list]] = {}
        seen = set()
        for info in gold:
            if len(info) <= k or tuple(map(_element, info[:k + 1])) in seen:
                continue
            path = tuple(map(_element, info[:k + 1]))
            seen.add(path)
            level_map.setdefault(path[:-1], {}).setdefault(info[k]["type"], []).append(path[-1][2])
            node = schema
            for e in info[:k + 1]:
                node = node[e["type"]]
            if node:
                next_map.setdefault(path, {t: [] for t in node})
        levels.append(level_map)
        level_map = next_map
        if not level_map:
            break
    return levels


# ---------------------------------------------------------------- windows and labels

def examples(p: Prompter, text: str, schema: dict, gold: Gold) -> list[Example]:
    """Every window inference would score for this document at each level, with its labels."""
    kind = task_kind(text)
    cls_token = CLASSIFY if kind == "cls" else MULTICLASSIFY
    cls_id = p.classify_id if kind == "cls" else p.multi_id
    out = []
    for level_map in gold_levels(schema, gold):
        for hint in p.hints(level_map):
            enc = p.encode(hint.text, text, kind)
            for j, (ids, offs) in enumerate(zip(enc.ids, enc.offsets)):
                spans_of = level_map
                if kind != "no_cls" and j > 0:
                    # As inference: the cls token is inserted before this window's text and the last
                    # text token dropped; the gold class span becomes that inserted token. The text
                    # itself is not mutated (neither does the reference trainer).
                    s = ids.index(p.sep_id) + 1
                    st, w = offs[s][0], len(cls_token)
                    ids = ids[:s] + [cls_id] + ids[s:-2] + [ids[-1]]
                    cls_span = (st + (j - 1) * w, st + j * w)
                    offs = (offs[:s] + [cls_span] + [(a + j * w, b + j * w) for a, b in offs[s:-2]] + [offs[-1]])
                    spans_of = {pt: {t: [cls_span] if g else [] for t, g in types.items()}
                                for pt, types in level_map.items()}
                pos, grp, typ = p.window_layout(enc, ids)
                window = Window(ids, pos, grp, typ, offs, enc.n_hint, hint, text)
                out.append(Example(window, label_cells(window, spans_of, len(text))))
    return out


def label_cells(window: Window, spans_of: dict, text_len: int) -> list[tuple[int, int]]:
    """Positive cells (row, col): span (head, tail), head link (head, T), tail link (T, tail).

    As the reference: a gold span counts in a window when it lies inside the window's text; its
    ends snap inward to the nearest characters covered by a token.
    """
    nh, offs = window.n_hint, window.offsets
    char_token: dict[int, int] = {}
    for i in range(nh, len(offs)):
        for c in range(*offs[i]):
            char_token[c] = i
    hint_token = {offs[i][0]: i for i in range(nh)}
    lo, hi = offs[nh][0], offs[-2][1]
    cells: list[tuple[int, int]] = []
    for (prefix, t), char in window.hint.type_chars.items():
        type_tok = hint_token[char]
        for a, b in spans_of.get(prefix, {}).get(t, []):
            h, e = a, b - 1
            if h < lo or e > hi:
                continue
            while h not in char_token and h <= text_len:
                h += 1
            while e not in char_token and e >= 0:
                e -= 1
            if h > text_len or e < 0 or char_token[h] > char_token[e]:
                continue                      # no token inside the span (whitespace only)
            head, tail = char_token[h], char_token[e]
            cells += [(head, tail), (head, type_tok), (type_tok, tail)]
    return cells


# ---------------------------------------------------------------- batches and loss

def label_matrix(batch: Packed, batch_examples: Sequence[Example]) -> torch.Tensor:
    """[B, L, L] float 0/1, one window per row (training never packs windows)."""
    labels = torch.zeros(batch.ids.shape[0], batch.ids.shape[1], batch.ids.shape[1])
    for ex, (row, start) in zip(batch_examples, batch.starts):
        for r, c in ex.positives:
            labels[row, start + r, start + c] = 1.0
    return labels.to(batch.ids.device)


def circle_loss(logits: torch.Tensor, labels: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """Multilabel circle loss per window, averaged. logits, labels, cells [B, L, L]; cells: which count.

    Negatives want logit < 0 and positives > 0, with 0 as the shared threshold (the appended 0).
    """
    pos = labels.bool() & cells
    neg = ~labels.bool() & cells
    s = (1 - 2 * labels) * logits                           # positives negated
    s_neg = s.masked_fill(~neg, float("-inf")).flatten(1)   # [B, L*L]
    s_pos = s.masked_fill(~pos, float("-inf")).flatten(1)
    zero = torch.zeros_like(s_neg[:, :1])
    return (torch.logsumexp(torch.cat([s_neg, zero], -1), -1)
            + torch.logsumexp(torch.cat([s_pos, zero], -1), -1)).mean()


def batch_loss(scorer: WindowScorer, batch_examples: Sequence[Example], autocast_dtype=None) -> torch.Tensor:
    """Forward one micro-batch in training mode and return its loss.

    With autocast the encoder runs in reduced precision; the span head stays fp32, as at inference,
    because the sign of logits near 0 decides every link.
    """
    network = scorer.network
    p = scorer.pack([[ex.window] for ex in batch_examples])
    device_type = p.ids.device.type
    with torch.autocast(device_type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
        h = network.encode(p.ids, p.positions, isolation_mask(p), p.valid)
    with torch.autocast(device_type, enabled=False):
        logits = network.span_logits(h, p.positions)
    cells = p.valid[:, :, None] & p.valid[:, None, :]
    return circle_loss(logits, label_matrix(p, batch_examples), cells)


# ---------------------------------------------------------------- what the fine-tuning loop sees

OFFICIAL_FILES = ("config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


class RexTraining(Training):
    def __init__(self, model):
        self.model, self.network = model, model.network

    def examples(self, document: Document, gold: Gold) -> list[Example]:
        return examples(self.model.prompter, document.text, document.schema, gold)

    def loss(self, batch: Sequence[Example], autocast_dtype=None) -> torch.Tensor:
        return batch_loss(self.model.scorer, batch, autocast_dtype)

    def begin(self) -> str:
        # The fused Triton kernel has no backward pass; SDPA computes the same attention and has one.
        kernel = self.model.attention_kernel()
        self.network.attention_backend = Kernel.SDPA if kernel == Kernel.TRITON else kernel
        self.network.plm.encoder.checkpointing = self.model.knobs.checkpointing
        self.network.train()
        return self.network.attention_backend

    def end(self) -> None:
        self.network.eval()
        self.model.weights_changed()

    def write_official(self, output: Path) -> None:
        """The layout RexUniNLU().load() reads: metadata copied, pytorch_model.bin = the plm.-prefixed
        state dict in fp32."""
        weights = self.model.weights
        for name in OFFICIAL_FILES + (DEMO_MARKER,):          # a model tuned from random weights is still a demo
            if (weights / name).is_file():
                shutil.copyfile(weights / name, output / name)
        state = {k: v.detach().float().cpu().contiguous() for k, v in self.network.state_dict().items()}
        torch.save(state, output / "pytorch_model.bin")
