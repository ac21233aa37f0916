"""Documents -> windows -> batched forward -> decoded tuples, for many documents at once.

Each document runs the reference's prompt loop (docs/models/rexuninlu.md §2–3) as a generator: it yields the windows
it needs scored and receives their links back. Windows of all documents are pooled and handed to
the WindowScorer (scoring.py), which batches them.
"""
from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generator, Iterator, Sequence

from contracts.domain import Document, Result, Span
from contracts.stages import IDLE, StageClock
from plugins.rexuninlu.decoding import (
    Links,
    Window,
    best_of_hint,
    decode_classes,
    decode_spans,
    final_selection,
    label_spans,
    multi_of_hint,
    path_info,
)
from plugins.rexuninlu.prompting import CLASSIFY, MULTICLASSIFY, Prompter, legal_paths, task_kind

if TYPE_CHECKING:       # host workers run this module's document loop without torch (workers.py)
    from plugins.rexuninlu.scoring import Scoring, WindowScorer

# Windows one document hands over per step: bounds memory for very long texts.
WINDOWS_PER_STEP = 64
# Batches of the next group queued on the device before a group is decoded: enough to keep it busy
# meanwhile, few enough to bound what waits in its memory (each holds its [B, L, L] links).
AHEAD = 4

DocumentRun = Generator[list[Window], list[Links], list[list[Span]]]


def document_run(p: Prompter, text: str, schema: dict) -> DocumentRun:
    """The reference's prediction_step for one document, model calls turned into yields; returns its tuples."""
    if not text:
        # Only the empty text gives no text window in the reference; whitespace-only texts still
        # run, and can yield empty spans at the final [SEP] (offset [k, 0]) exactly as it does.
        return []
    legal, kind = legal_paths(schema), task_kind(text)
    preds: list = []                 # Spans (extraction), or the reference's dicts (classification)
    yield from prompt_loop(p, text, schema, preds, legal, kind, blank=False)
    if not preds and kind != "no_cls":
        yield from prompt_loop(p, text, schema, preds, legal, kind, blank=True)
    # Extraction decodes straight to Spans; classification keeps the reference's dicts until its selection.
    return preds if kind == "no_cls" else label_spans(final_selection(preds, kind))


def prompt_loop(p: Prompter, text: str, schema: dict, preds: list, legal: set, kind: str, blank: bool):
    level_map: dict = {(): schema}
    cls_token = CLASSIFY if kind == "cls" else MULTICLASSIFY
    cls_id = p.classify_id if kind == "cls" else p.multi_id
    prefix_confidence: dict = {}                              # extracted prefix paths -> confidence
    while level_map:                                          # one iteration per schema depth
        next_map: dict = {}
        candidates = []
        for hint in p.hints(level_map):
            enc = p.encode(hint.text, text, kind)
            found: dict = defaultdict(list)
            windows: list[Window] = []
            n_windows = len(enc.ids)
            for j in range(n_windows):
                ids, offs = enc.ids[j], enc.offsets[j]
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
                pos, grp, typ = p.window_layout(enc, ids)
                windows.append(Window(ids, pos, grp, typ, offs, enc.n_hint, hint, text,
                                      need_probs=kind != "no_cls"))
                if len(windows) == WINDOWS_PER_STEP or j == n_windows - 1:
                    links = yield windows
                    for window, link in zip(windows, links):
                        if kind == "no_cls":
                            preds += decode_spans(window, link, level_map, legal, next_map, prefix_confidence)
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


def run_documents(p: Prompter, scorer: WindowScorer, documents: Sequence[Document], batch_size: int,
                  on_progress: Callable[[int], None] | None = None, clock: StageClock = IDLE,
                  more: Callable[[], bool] | None = None) -> Iterator[Result]:
    """Yield every document's Result in input order.

    Documents go in groups, and the device is kept fed across them: while the device scores one
    group, a prefetch thread prepares the next (tokenising its texts in one call, building its first
    windows); and before a group's links are decoded, the next group's first windows are queued on the
    device (up to AHEAD batches), so the device works while the host decodes and writes.

    more(): asked before each group after the first; once it says no, no group is started and the run ends
    after the ones it has, leaving the rest of `documents` (the caller counts the Results) to someone else.
    """
    groups = document_groups(documents, batch_size)
    finished, stopped = 0, False
    with ThreadPoolExecutor(1, thread_name_prefix="rexuninlu-prefetch") as pool:
        upcoming = [pool.submit(start_group, p, group, clock) for group in groups[:1]]

        def take(k: int) -> Group | None:
            """Group k as prepared by the prefetch thread, which then starts on group k + 1; None past the
            last group, or once more() said no."""
            nonlocal stopped
            stopped = stopped or k >= len(groups) or (k > 0 and more is not None and not more())
            if stopped:
                if upcoming:                          # group k, prepared for nobody: its tokens go
                    upcoming.pop().result()
                    p.forget([doc.text for doc in groups[k]])
                return None
            g = upcoming.pop().result()
            if k + 1 < len(groups):
                upcoming.append(pool.submit(start_group, p, groups[k + 1], clock))
            return g

        prepared = take(0)
        for k, group in enumerate(groups):
            if prepared is None:
                return
            queued: list[Group] = []

            def queue_next(k=k, queued=queued) -> None:
                if (g := take(k + 1)) is not None:
                    queued.append(g)
                    g.submit(scorer, batch_size, AHEAD)

            for result in finish_group(p, scorer, group, prepared, batch_size, clock, queue_next):
                finished += 1
                yield result
                if on_progress:
                    on_progress(finished)
            # A group whose documents finished without the device never got to decoding: take the next now.
            prepared = queued[0] if queued else take(k + 1)


def document_groups(documents: Sequence[Document], batch_size: int) -> list[Sequence[Document]]:
    """Consecutive groups in input order. The first holds one batch's worth, so the device starts after
    little preparation; each next one doubles, up to 4 batches (64 documents at least), so while a
    group is scored the prefetch thread has time to prepare the next."""
    full = max(4 * batch_size, 64)
    size, at, groups = max(1, min(batch_size, full)), 0, []
    while at < len(documents):
        groups.append(documents[at:at + size])
        at, size = at + size, min(2 * size, full)
    return groups


@dataclass
class Group:
    runs: dict[int, DocumentRun]
    waiting: dict[int, list[Window]]        # document -> the windows it waits to have scored
    done: dict[int, list]                   # document -> its final tuples
    scoring: Scoring | None = None          # the waiting windows, submitted to the device

    def advance(self, i: int, sent) -> None:
        try:
            self.waiting[i] = self.runs[i].send(sent)
        except StopIteration as stop:
            self.done[i] = stop.value
            self.runs.pop(i)
            self.waiting.pop(i, None)

    def windows(self) -> list[Window]:
        return [w for i in self.waiting for w in self.waiting[i]]

    def take(self, links: Sequence[Links]) -> None:
        """Step every waiting document with the links of its windows (in windows()' order)."""
        k = 0
        for i in list(self.waiting):
            n = len(self.waiting[i])
            self.advance(i, links[k:k + n])
            k += n

    def submit(self, scorer: WindowScorer, batch_size: int, ahead: int = 0) -> None:
        self.scoring = scorer.submit(self.windows(), batch_size, ahead)


def start_group(p: Prompter, documents: Sequence[Document], clock: StageClock) -> Group:
    """Host preparation: tokenise the texts together and run each document up to its first windows."""
    with clock.stage("prepare"):
        p.prefetch([doc.text for doc in documents])
        group = Group({}, {}, {})
        for i, doc in enumerate(documents):
            group.runs[i] = document_run(p, doc.text, doc.schema)
            group.advance(i, None)
        return group


def _nothing() -> None:
    pass


def finish_group(p: Prompter, scorer: WindowScorer, documents: Sequence[Document], g: Group, batch_size: int,
                 clock: StageClock, before_decoding: Callable[[], None] = _nothing) -> Iterator[Result]:
    """Score the waiting windows of every document together, round by round (one round per schema
    level), and yield Results in order as documents finish. `before_decoding` runs once, when the
    first round's links are back (run_documents queues the next group there). Stepping a document's
    loop with its links counts as decoding (it also builds the next level's windows; the clock cannot
    split that)."""
    next_out = 0
    while True:
        while next_out in g.done:
            yield to_result(documents[next_out], g.done.pop(next_out))
            next_out += 1
        if not g.waiting:
            p.forget([doc.text for doc in documents])
            return
        if g.scoring is None:
            g.submit(scorer, batch_size)
        links = g.scoring.result()
        g.scoring = None
        before_decoding()
        before_decoding = _nothing
        with clock.stage("decode"):
            g.take(links)


def to_result(doc: Document, tuples: list[list[Span]]) -> Result:
    # Windows cover every token of the text (prompting.encode), so RexUniNLU reads all of it.
    return Result(doc.id, tuples, coverage=[(0, len(doc.text))] if doc.text else [])
