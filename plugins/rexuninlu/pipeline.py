"""Documents -> windows -> batched forward -> decoded tuples, for many documents at once.

Each document runs the reference's prompt loop (spec §2–3) as a generator: it yields the windows
it needs scored and receives their links back. Windows of all documents are pooled, bucketed by
length and batched; padding follows spec §2.7 so a batched window scores exactly as alone.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Generator, Iterator, Sequence

import torch

from plugins.rexuninlu.decoding import (Links, Window, best_of_hint, decode_classes, decode_spans,
                                        final_selection, multi_of_hint, path_info)
from plugins.rexuninlu.modeling import RexModel
from plugins.rexuninlu.prompting import (CLASSIFY, MULTICLASSIFY, Prompter, legal_paths, task_kind)
from workstation.batching import length_buckets, run_with_backoff
from workstation.domain import Document, Result, Span

# Windows one document hands over per step: bounds memory for very long texts.
WINDOWS_PER_STEP = 64

DocumentRun = Generator[list[Window], list[Links], list[list[dict]]]


def document_run(p: Prompter, text: str, schema: dict) -> DocumentRun:
    """The reference's prediction_step for one document, model calls turned into yields."""
    if not text.strip():
        return []
    legal, kind = legal_paths(schema), task_kind(text)
    preds: list[list[dict]] = []
    yield from prompt_loop(p, text, schema, preds, legal, kind, blank=False)
    if not preds and kind != "no_cls":
        yield from prompt_loop(p, text, schema, preds, legal, kind, blank=True)
    preds = final_selection(preds, kind)
    for info in preds:
        for element in info:
            element.pop("confidence", None)
    return preds


def prompt_loop(p: Prompter, text: str, schema: dict, preds: list, legal: set, kind: str, blank: bool):
    level_map: dict = {(): schema}
    cls_token = CLASSIFY if kind == "cls" else MULTICLASSIFY
    cls_id = p.classify_id if kind == "cls" else p.multi_id
    while level_map:                                          # one iteration per schema depth
        next_map: dict = {}
        candidates = []
        for hint in p.hints(level_map):
            enc = p.encode(hint.text, text, kind)
            found: dict = defaultdict(list)
            windows: list[Window] = []
            n_windows = len(enc["input_ids"])
            for j in range(n_windows):
                ids, tt, offs = enc["input_ids"][j], enc["token_type_ids"][j], enc["offset_mapping"][j]
                if kind != "no_cls" and j > 0:
                    # Reference quirk kept: each later classification window gets the cls token
                    # inserted before its text (dropping its last text token), and `text` itself is
                    # mutated for the rest of the loop, the recursion included.
                    s = ids.index(p.sep_id) + 1
                    st, w = offs[s][0], len(cls_token)
                    ids = ids[:s] + [cls_id] + ids[s:-2] + [ids[-1]]
                    text = text[:st] + cls_token + text[st:]
                    offs = (offs[:s] + [(st + (j - 1) * w, st + j * w)]
                            + [(a + j * w, b + j * w) for a, b in offs[s:-2]] + [offs[-1]])
                pos, grp, typ = p.layout(ids)
                windows.append(Window(ids, pos, grp, typ, offs, tt.count(0), hint, text,
                                      need_probs=kind != "no_cls"))
                if len(windows) == WINDOWS_PER_STEP or j == n_windows - 1:
                    links = yield windows
                    for window, link in zip(windows, links):
                        if kind == "no_cls":
                            preds += decode_spans(window, link, level_map, legal, next_map)
                        else:
                            decode_classes(window, link, cls_token, level_map, legal, next_map, found, blank)
                    windows = []
            if kind == "cls":
                best = best_of_hint(found)
                if best:
                    candidates.append(best)
            elif kind == "multi_cls":
                preds += multi_of_hint(found, cls_token)
        if kind == "cls" and candidates:
            key, confidences = sorted(candidates, key=lambda kc: sum(kc[1]), reverse=True)[0]
            preds.append(path_info(key, confidences, cls_token))
        level_map = next_map


class WindowScorer:
    """Scores windows in length-bucketed batches on the model's device."""

    def __init__(self, network: RexModel, pad_id: int, type_id: int, device: str):
        self.network, self.pad_id, self.type_id, self.device = network, pad_id, type_id, torch.device(device)
        self.tokens = 0
        self.on_backoff: Callable[[int], None] | None = None

    def score(self, windows: Sequence[Window], batch_size: int) -> list[Links]:
        out: list[Links | None] = [None] * len(windows)
        for bucket in length_buckets([len(w.ids) for w in windows], batch_size):
            links = run_with_backoff([windows[i] for i in bucket], self.forward, self.on_backoff)
            for i, link in zip(bucket, links):
                out[i] = link
        return out  # type: ignore[return-value]

    def collate(self, windows: Sequence[Window]):
        n = max(len(w.ids) for w in windows)
        L = -(-n // 8) * 8                                 # multiples of 8: fewer distinct shapes

        def pad(rows, value):
            return torch.tensor([r + [value] * (L - len(r)) for r in rows], dtype=torch.long)
        ids = pad([w.ids for w in windows], self.pad_id)
        pos = pad([w.positions for w in windows], 0)
        grp = pad([w.groups for w in windows], -1)
        typ = pad([w.types for w in windows], 0)
        valid = pad([[1] * len(w.ids) for w in windows], 0).bool()
        return [t.to(self.device, non_blocking=True) for t in (ids, pos, grp, typ, valid)]

    @staticmethod
    def isolation_mask(grp, typ, valid):
        """[B,L,L] bool from the closed form; pad keys masked, pad queries see every real key."""
        glob = grp < 0
        same = (grp[:, :, None] == grp[:, None, :]) & (
            (typ[:, :, None] == typ[:, None, :]) | (typ[:, :, None] == 0) | (typ[:, None, :] == 0))
        return (glob[:, :, None] | glob[:, None, :] | same) & valid[:, None, :]

    def readable_links(self, logits, ids, valid, windows):
        """Positive entries decoding can use, row-major like torch.where: [K,3] (window, row, col).

        Lossless filter: a text span (r <= c) counts only if r links to some [TYPE] and some [TYPE]
        links to c; links count only between a [TYPE] token and the text. Everything else the
        decoder would skip, so dropping it on the device saves the transfer and the Python loop.
        """
        positive = logits > 0
        nh = torch.tensor([w.n_hint for w in windows], device=ids.device)[:, None]
        idx = torch.arange(ids.shape[1], device=ids.device)[None]
        text = (idx >= nh) & valid                                     # [B,L]
        type_tok = (ids == self.type_id) & (idx < nh)                  # [B,L]
        head_link = positive & text[:, :, None] & type_tok[:, None, :]   # row text -> col [TYPE]
        tail_link = positive & type_tok[:, :, None] & text[:, None, :]   # row [TYPE] -> col text
        heads, tails = head_link.any(-1), tail_link.any(-2)            # [B,L]
        upper = torch.ones_like(positive[0]).triu()                     # row <= col
        span = positive & upper & (heads & text)[:, :, None] & (tails & text)[:, None, :]
        return (span | head_link | tail_link).nonzero()

    @torch.inference_mode()
    def forward(self, windows: Sequence[Window]) -> list[Links]:
        ids, pos, grp, typ, valid = self.collate(windows)
        logits = self.network(ids, pos, self.isolation_mask(grp, typ, valid), valid)
        self.tokens += sum(len(w.ids) for w in windows)
        hits = self.readable_links(logits, ids, valid, windows).tolist()
        per_window: list[list[list[int]]] = [[] for _ in windows]
        for b, r, c in hits:
            per_window[b].append((r, c))
        out = []
        for b, w in enumerate(windows):
            n = len(w.ids)
            probs = torch.sigmoid(logits[b, :n, :n]).cpu() if w.need_probs else None
            rc = per_window[b]
            out.append(Links([r for r, _ in rc], [c for _, c in rc], probs))
        return out


def run_documents(p: Prompter, scorer: WindowScorer, documents: Sequence[Document], batch_size: int,
                  on_progress: Callable[[int], None] | None = None) -> Iterator[Result]:
    """Drive every document's prompt loop together; yield Results in input order."""
    runs: dict[int, DocumentRun] = {}
    waiting: dict[int, list[Window]] = {}
    done: dict[int, list] = {}

    def advance(i: int, sent):
        try:
            waiting[i] = runs[i].send(sent)
        except StopIteration as stop:
            done[i] = stop.value
            runs.pop(i)
            waiting.pop(i, None)

    for i, doc in enumerate(documents):
        runs[i] = document_run(p, doc.text, doc.schema)
        advance(i, None)
    next_out = 0
    while True:
        while next_out in done:
            yield to_result(documents[next_out], done.pop(next_out))
            next_out += 1
            if on_progress:
                on_progress(next_out)
        if not waiting:
            break
        order = list(waiting)
        flat = [w for i in order for w in waiting[i]]
        links = scorer.score(flat, batch_size)
        k = 0
        for i in order:
            n = len(waiting[i])
            advance(i, links[k:k + n])
            k += n


def to_result(doc: Document, preds: list[list[dict]]) -> Result:
    return Result(doc.id, [[Span(e["type"], e["span"], tuple(e["offset"])) for e in info] for info in preds])
