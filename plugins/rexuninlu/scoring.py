"""Windows -> batched forward -> the links decoding needs (the batcher of docs/architecture.md §3).

Rows: each row of a batch holds one window (padded), or — with `knobs.unpad` — several short
windows packed end to end, kept apart by the mask and the ConvLayer (lossless). With
`knobs.cuda_graphs` each (rows, length) shape is captured once as a CUDA graph and replayed.
Padding follows docs/models/rexuninlu.md §2.7 so a window scores the same in any batch.
"""
from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import chain
from typing import Callable, Sequence

import numpy as np
import torch

from contracts.model import Knobs
from contracts.names import Kernel
from contracts.stages import IDLE, StageClock
from contracts.torch import triton_ahead
from contracts.torch.memory import is_out_of_memory
from plugins.rexuninlu.decoding import Links, TypedHits, Window
from plugins.rexuninlu.modeling import RexModel
from plugins.rexuninlu.prompting import MAX_LEN

# CUDA-graph shape buckets: tokens in steps of GRAPH_QUANTUM, rows a power of two and at least GRAPH_LEAST_ROWS
# (where the batch size allows): 4 lengths x 4 row counts at batch 64, few enough to capture all before a run.
GRAPH_QUANTUM, GRAPH_LEAST_ROWS = 128, 8
log = logging.getLogger(__name__)


def arrange(lengths: Sequence[int], batch_size: int, pack: bool) -> list[list[list[int]]]:
    """Batches of rows of window indices. Longest first; packing adds the shortest while they fit."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    lo, hi = 0, len(order) - 1
    while lo <= hi:
        row, room = [order[lo]], MAX_LEN - lengths[order[lo]]
        lo += 1
        while pack and lo <= hi and lengths[order[hi]] <= room:
            row.append(order[hi])
            room -= lengths[order[hi]]
            hi -= 1
        rows.append(row)
    return [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]


@dataclass
class Packed:
    """Device tensors of one batch, [B, L] each; `starts[w]` = (row, first token) of window w."""

    ids: torch.Tensor
    positions: torch.Tensor
    groups: torch.Tensor       # unique per (window, prefix group); -1 global, -2 padding
    types: torch.Tensor
    segments: torch.Tensor     # window slot within the batch; -1 padding
    is_text: torch.Tensor
    is_type: torch.Tensor
    starts: list[tuple[int, int]]

    @property
    def valid(self):
        return self.segments >= 0


@dataclass
class Selection:
    """[B, L, L] masks of what decoding reads, made on the device (WindowScorer.selected_links)."""

    spans: torch.Tensor          # candidate text spans of extraction windows
    head_link: torch.Tensor      # text -> [TYPE]
    tail_link: torch.Tensor      # [TYPE] -> text
    other: torch.Tensor          # readable links of classification windows
    logits: torch.Tensor         # [B, L, L] fp32: read back only where picked, for the confidences


@dataclass
class InFlight:
    """A launched batch: its windows and the device tensors its links will be read from."""

    windows: list[Window]
    starts: list[tuple[int, int]]
    selection: "Selection"
    probs: list[torch.Tensor]
    ready: object                       # a CUDA event after the batch's work, or None on the CPU
    index: list[list[int]] = field(default_factory=list)    # each row's window indices in score()'s input


def isolation_mask(p: Packed) -> torch.Tensor:
    """[B,L,L] bool: same window, then the prompt-isolation rule; pad keys masked."""
    g, t, s = p.groups, p.types, p.segments
    glob = g == -1
    same_group = (g[:, :, None] == g[:, None, :]) & (
        (t[:, :, None] == t[:, None, :]) | (t[:, :, None] == 0) | (t[:, None, :] == 0))
    rule = glob[:, :, None] | glob[:, None, :] | same_group
    return rule & (s[:, :, None] == s[:, None, :]) & (s >= 0)[:, None, :]


def run_network(network: RexModel, p: Packed) -> torch.Tensor:
    if network.attention_backend == Kernel.TRITON:      # the kernel applies the mask rule itself
        return network(p.ids, p.positions, None, p.valid, p.segments, (p.groups, p.types, p.segments))
    return network(p.ids, p.positions, isolation_mask(p), p.valid, p.segments)


class WindowScorer:
    def __init__(self, network: RexModel, pad_id: int, type_id: int, device: str, knobs: Knobs):
        self.network, self.pad_id, self.type_id = network, pad_id, type_id
        self.device, self.knobs = torch.device(device), knobs
        self.tokens = 0
        self.graphs: dict = {}
        self.batch_rows = 1                # the batch size asked for: sizes the first graph captured
        self.on_backoff: Callable[[int], None] | None = None
        self.clock: Callable[[], StageClock] | None = None     # the run's clock (the model's, per run)
        self._side = None
        self._staged: dict[tuple[int, int], list] = {}      # (B, L) -> pinned input buffers and their copies' events
        self._compiled_ahead: set[tuple] = set()          # (dtype, attention) compile_ahead has run for

    # ------------------------------------------------------------ batching

    def score(self, windows: Sequence[Window], batch_size: int) -> list[Links]:
        """Links of every window (a Scoring's result): the device's batches pipelined with the host."""
        return self.submit(windows, batch_size).result()

    def submit(self, windows: Sequence[Window], batch_size: int, ahead: int = 0) -> "Scoring":
        """Start scoring `windows`: up to `ahead` batches are queued on the device now, the rest when
        the Scoring's result is asked for. The caller does host work meanwhile (run_documents decodes
        the previous group), so the device is not idle while it does."""
        self.batch_rows = batch_size
        scoring = Scoring(self, windows, batch_size)
        scoring.launch(ahead)
        return scoring

    def report_backoff(self, rows: int) -> None:
        clock = self.clock() if self.clock else IDLE
        clock.backoff(rows)
        if self.on_backoff:
            self.on_backoff(rows)

    def pack(self, rows: Sequence[Sequence[Window]]) -> Packed:
        longest = max(sum(len(w.ids) for w in row) for row in rows)
        if not self.knobs.cuda_graphs:
            return self.fill(rows, len(rows), -(-longest // 8) * 8)
        return self.fill(rows, *self.graph_shape(len(rows), longest))

    def graph_shape(self, rows: int, longest: int) -> tuple[int, int]:
        """The captured shape a batch runs in: rows padded to a power of two (at least a few), tokens to a multiple
        of GRAPH_QUANTUM. Few shapes, so that all of them can be captured before a run (graph_shapes)."""
        least = min(GRAPH_LEAST_ROWS, 1 << (self.batch_rows - 1).bit_length())
        return max(least, 1 << (rows - 1).bit_length()), -(-longest // GRAPH_QUANTUM) * GRAPH_QUANTUM

    def graph_shapes(self) -> list[tuple[int, int]]:
        """Every shape a batch of at most batch_rows rows can run in, largest first."""
        top, top_len = self.graph_shape(self.batch_rows, MAX_LEN)
        rows = [r for r in (1 << i for i in range(top.bit_length())) if r >= self.graph_shape(1, 1)[0]]
        return [(r, n) for r in reversed(rows) for n in range(top_len, 0, -GRAPH_QUANTUM)]

    @torch.inference_mode()
    def compile_ahead(self) -> None:
        """Before the first capture: the fused path's Triton kernels for every captured length, compiled side by
        side (contracts/torch/triton_ahead.py), where the first passes would compile them one after another. One
        throwaway pass of the fewest rows per length finds them: the kernels' constants and argument
        specialisations follow the length (a multiple of GRAPH_QUANTUM), not the rows."""
        kind = (self.knobs.dtype, self.network.attention_backend)       # a dtype switch needs other kernels
        if kind in self._compiled_ahead or self.network.attention_backend != Kernel.TRITON:
            return
        self._compiled_ahead.add(kind)
        rows = self.graph_shape(1, 1)[0]
        lengths = sorted({n for _, n in self.graph_shapes()}, reverse=True)
        with (self.clock() if self.clock else IDLE).stage("warm-up"):
            try:
                triton_ahead.ahead(lambda: [run_network(self.network, self.blank(rows, n)) for n in lengths])
            except Exception as e:         # only a saving: the captures compile what is missing, one by one, as before
                if is_out_of_memory(e):
                    torch.cuda.empty_cache()
                log.warning("compiling the kernels ahead failed (%s); the first passes compile them instead", e)

    @torch.inference_mode()            # as launch(): captured with autograd on, each graph kept its activations
    def capture_all(self) -> None:
        """Capture every shape now, before a run whose batches are shaped by timing (host workers'): a shape first
        met inside a run stops it while its graph is captured (draining the device's queue, then two passes)."""
        if not (self.knobs.cuda_graphs and self.device.type == "cuda"):
            return
        self.compile_ahead()
        for shape in self.graph_shapes():
            if self.graph_key(shape) in self.graphs:
                continue
            try:
                self._capture(self.blank(*shape))
            except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                if not is_out_of_memory(e):
                    raise
                # A GPU with less memory: the run captures what it meets, and backs off (Scoring) where it must.
                torch.cuda.empty_cache()
                return

    def staging(self, B: int, L: int) -> torch.Tensor:
        """A host buffer [7, B, L] for one batch's inputs. On a GPU it is pinned, so the copy is queued without
        waiting, and reused once the copy that last read it is done: pinning a new one each batch (cudaHostAlloc)
        cost milliseconds of the host's time per batch."""
        if self.device.type != "cuda":
            return torch.empty((7, B, L), dtype=torch.int64)
        ring = self._staged.setdefault((B, L), [])
        for i, (buffer, copied) in enumerate(ring):
            if copied.query():
                del ring[i]
                return buffer
        if len(ring) >= 16:                  # a bound on what waits: let the oldest go
            ring.pop(0)
        return torch.empty((7, B, L), dtype=torch.int64, pin_memory=True)

    def blank(self, rows: int, length: int) -> Packed:
        """A batch of padding only, of the given shape (graph capture needs shapes, not data)."""
        return self.fill([], rows, length)

    def fill(self, rows: Sequence[Sequence[Window]], B: int, L: int) -> Packed:
        """[B, L] device tensors: padding everywhere, then each row's windows one after another.

        Vectorised: every window's tokens are laid end to end in one flat array per field, then
        scattered into the batch in one step; the seven fields travel to the device as one copy."""
        wins = [w for row in rows for w in row]
        lengths = np.fromiter((len(w.ids) for w in wins), np.int64, len(wins))
        starts, row_of = [], []
        for r, row in enumerate(rows):
            at = 0
            for w in row:
                starts.append((r, at))
                row_of.append(r * L + at)
                at += len(w.ids)
        host = self.staging(B, L)
        buf = host.numpy()                                 # ids, pos, grp, typ, seg, is_text, is_type
        buf[1], buf[3], buf[5:] = 0, 0, 0
        buf[0], buf[2], buf[4] = self.pad_id, -2, -1
        if wins:
            total = int(lengths.sum())
            first = np.repeat(np.cumsum(lengths) - lengths, lengths)
            local = np.arange(total) - first                              # token index inside its window
            slot = np.repeat(np.arange(len(wins)), lengths)
            dest = np.repeat(np.asarray(row_of, np.int64), lengths) + local
            n_hint = np.repeat(np.fromiter((w.n_hint for w in wins), np.int64, len(wins)), lengths)
            ids = (np.concatenate([w.ids for w in wins]) if isinstance(wins[0].ids, np.ndarray)  # host workers'
                   else np.fromiter(chain.from_iterable(w.ids for w in wins), np.int64, total))
            grp = np.concatenate([w.groups for w in wins])          # arrays (Prompter.window_layout): no token loop
            flat = buf.reshape(7, B * L)
            flat[0, dest] = ids
            flat[1, dest] = np.concatenate([w.positions for w in wins])
            flat[2, dest] = np.where(grp < 0, grp, slot * 1024 + grp)          # groups unique per window
            flat[3, dest] = np.concatenate([w.types for w in wins])
            flat[4, dest] = slot
            flat[5, dest] = local >= n_hint
            flat[6, dest] = (local < n_hint) & (ids == self.type_id)
        t = host.to(self.device, non_blocking=True)
        if self.device.type == "cuda":
            copied = torch.cuda.Event()
            copied.record()
            self._staged.setdefault((B, L), []).append((host, copied))
        return Packed(t[0], t[1], t[2], t[3], t[4], t[5].bool(), t[6].bool(), starts=starts)

    # ------------------------------------------------------------ forward

    def logits(self, p: Packed) -> torch.Tensor:
        if self.knobs.cuda_graphs and self.device.type == "cuda":
            return self.graph_for(p).replay_with(p)
        return run_network(self.network, p)

    def graph_for(self, p: Packed) -> "CapturedForward":
        if not self.graphs:
            self.compile_ahead()
            # The largest bucket first, so later, smaller graphs reuse its freed blocks in the shared
            # pool (`bench memory-pool` measures the saving against arrival order: docs/benchmarks.md).
            self._capture(self.blank(*self.graph_shape(max(p.ids.shape[0], self.batch_rows), MAX_LEN)))
        return self._capture(p)

    def graph_key(self, shape: tuple[int, int]) -> tuple:
        return tuple(shape), self.knobs.dtype, self.knobs.attention

    def _capture(self, p: Packed) -> "CapturedForward":
        key = self.graph_key(p.ids.shape)
        if key not in self.graphs:
            # A run's "warm-up" stage: capturing a shape (with the kernel compiles its first passes set off) is a
            # one-time cost that `bench cli-e2e` reports apart from the run's steady pace.
            with (self.clock() if self.clock else IDLE).stage("warm-up"):
                self.graphs[key] = CapturedForward(self.network, p, self.graphs)
        return self.graphs[key]

    @torch.inference_mode()
    def launch(self, rows: Sequence[Sequence[Window]]) -> "InFlight":
        """Pack one batch and queue its forward pass and link selection on the device; no waiting."""
        clock = self.clock() if self.clock else None
        with clock.stage("prepare") if clock else nullcontext():
            p = self.pack(rows)
        windows = [w for row in rows for w in row]
        self.tokens += sum(len(w.ids) for w in windows)
        with clock.device() if clock else nullcontext():
            logits = self.logits(p)
            if self.knobs.cuda_graphs and self.device.type == "cuda":
                logits = logits.clone()      # a graph's output is overwritten by the next batch's replay
            # Built on the host and copied without waiting: a plain torch.tensor(..., device=cuda)
            # would make the host wait for the device's queue.
            extract = torch.tensor([not w.need_probs for w in windows] + [False])
            extract = extract.to(self.device, non_blocking=True)
            selection = self.selected_links(logits, p, extract[p.segments])
            probs = [torch.sigmoid(logits[row, start:start + len(w.ids), start:start + len(w.ids)]).float()
                     for w, (row, start) in zip(windows, p.starts) if w.need_probs]
        ready = torch.cuda.Event() if self.device.type == "cuda" else None
        if ready is not None:
            ready.record()
        return InFlight(windows, p.starts, selection, probs, ready)

    @torch.inference_mode()
    def collect(self, f: "InFlight", out: list) -> None:
        """Read a launched batch's links back (on a side stream, so later batches keep the device
        busy meanwhile) and hand each window its Links."""
        side = self.side_stream()
        # Reading back waits for this batch's device work only: the next batch is already queued.
        with torch.cuda.stream(side) if side is not None else nullcontext():
            if side is not None:
                side.wait_event(f.ready)
            typed, other = self.pick(f.selection)
            confidence, link_probs = self.link_probabilities(f.selection.logits, typed, other)
            typed = self.window_local(typed, f.starts).cpu().numpy()
            other = self.window_local(other, f.starts).tolist()
            confidence, link_probs = confidence.cpu().numpy(), link_probs.tolist()
            probs = [pr.cpu().numpy() for pr in f.probs]
        # Waiting for the read-back above is no host work; handing the links out per window is decoding.
        with (self.clock() if self.clock else IDLE).stage("decode"):
            per_typed = typed_per_window(typed, confidence, len(f.windows))
            per_other: list[list] = [[] for _ in f.windows]
            for (w, r, c), prob in zip(other, link_probs):
                per_other[w].append((r, c, prob))
            probs.reverse()
            flat_index = [i for group in f.index for i in group]
            for k, w in enumerate(f.windows):
                pr = probs.pop() if w.need_probs else None
                rc = per_other[k]
                rows, cols, link_probs = (list(x) for x in zip(*rc)) if rc else ([], [], [])
                out[flat_index[k]] = Links(rows, cols, pr, None if w.need_probs else per_typed[k], link_probs)

    def side_stream(self):
        if self.device.type != "cuda":
            return None
        if self._side is None:
            self._side = torch.cuda.Stream(self.device)
        return self._side

    @staticmethod
    def window_local(hits: torch.Tensor, starts: list[tuple[int, int]]) -> torch.Tensor:
        """[K, 3|4] (batch row, token, token[, token]) -> (window, window-local tokens...)."""
        if not len(hits):
            return hits.new_zeros((0, hits.shape[1]))
        # A window is known by (row, first token): the last window start at or before the hit.
        key = torch.tensor([row * 65536 + at for row, at in starts], device=hits.device)
        w = torch.searchsorted(key, hits[:, 0] * 65536 + hits[:, 1], right=True) - 1
        at = (key[w] % 65536)[:, None]
        return torch.cat([w[:, None], hits[:, 1:] - at], dim=-1)

    @staticmethod
    def selected_links(logits: torch.Tensor, p: Packed, extract: torch.Tensor) -> "Selection":
        """What decoding reads, as masks on the device (no host sync here; `pick` reads them out).

        Extraction windows (`extract`, per token) get typed spans: a text span (head <= tail) whose
        head links to a [TYPE] that links to its tail, exactly as decoding pairs them. Other windows
        (classification) get their readable links for the host decoder.
        """
        same = p.segments[:, :, None] == p.segments[:, None, :]
        positive = (logits > 0) & same
        head_link = positive & p.is_text[:, :, None] & p.is_type[:, None, :]   # row text -> col [TYPE]
        tail_link = positive & p.is_type[:, :, None] & p.is_text[:, None, :]   # row [TYPE] -> col text
        heads, tails = head_link.any(-1) & p.is_text, tail_link.any(-2) & p.is_text
        upper = torch.ones_like(positive[0]).triu()                              # row <= col
        span = positive & upper & heads[:, :, None] & tails[:, None, :]
        return Selection(span & extract[:, :, None], head_link, tail_link,
                         (span | head_link | tail_link) & ~extract[:, :, None], logits)

    @staticmethod
    def pick(sel: "Selection") -> tuple[torch.Tensor, torch.Tensor]:
        """Typed spans [K,4] (row, head, tail, [TYPE] token), ordered spans row-major then types in
        hint order, and the other windows' links [K,3] (row, r, c). Syncs with the device."""
        b, r, c = sel.spans.nonzero().unbind(-1)
        both = sel.head_link[b, r] & sel.tail_link[b, :, c]                     # [K, L] over [TYPE] tokens
        k, t = both.nonzero().unbind(-1)
        return torch.stack([b[k], r[k], c[k], t], dim=-1), sel.other.nonzero()

    @staticmethod
    def link_probabilities(logits: torch.Tensor, typed: torch.Tensor, other: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """The confidence of each typed span [K] and the probability of each other link [K'], on the device.

        A typed span's confidence is its weakest link, min(p[head, tail], p[head, T], p[T, tail]) with
        p = sigmoid(logits): the three links selected_links required to be positive, so it is > 0.5 exactly
        when the span was accepted. Spans paired on the host take the same minimum over `other`'s
        probabilities (decoding._weakest_link), which gives the same value.
        """
        b, head, tail, t = typed.unbind(-1)
        links = torch.stack((logits[b, head, tail], logits[b, head, t], logits[b, t, tail]), dim=-1)   # [K, 3]
        # float64: a float32 sigmoid can differ by an ulp between a CPU kernel's vectorised body and its
        # scalar tail, enough to move a value across the 4-decimal rounding; in float64 it is not.
        return links.double().sigmoid().amin(-1), logits[other.unbind(-1)].double().sigmoid()


def typed_per_window(typed: np.ndarray, confidence: np.ndarray, n: int) -> list[TypedHits]:
    """[K, 4] typed hits (window, head, tail, [TYPE] token) and their confidences [K] -> each window's TypedHits,
    in pick's order. Dense outputs carry hundreds of hits per document, so they are split by window with array
    operations (views, no copies), and become Python numbers only where they are decoded."""
    order = np.argsort(typed[:, 0], kind="stable")          # by window; pick's order within each
    typed, confidence = typed[order], confidence[order]
    bounds = np.searchsorted(typed[:, 0], np.arange(n + 1)).tolist()
    return [TypedHits(typed[lo:hi, 1:], confidence[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]


class CapturedForward:
    """One batch shape captured as a CUDA graph: inputs are copied into static tensors, replayed.

    Graphs share one memory pool (they never run concurrently), so many shapes cost little memory.
    """

    def __init__(self, network: RexModel, example: Packed, siblings: dict):
        self.network = network
        self.static = Packed(*(t.clone() for t in (example.ids, example.positions, example.groups, example.types,
                                                    example.segments, example.is_text, example.is_type)),
                             starts=[])
        pool = next((g.pool for g in siblings.values()), None) or torch.cuda.graph_pool_handle()
        self.pool = pool
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):                       # warm-up outside the capture, as required
            self.run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.out = self.run()

    def run(self):
        return run_network(self.network, self.static)

    def replay_with(self, p: Packed) -> torch.Tensor:
        for dst, src in zip((self.static.ids, self.static.positions, self.static.groups, self.static.types,
                             self.static.segments), (p.ids, p.positions, p.groups, p.types, p.segments)):
            dst.copy_(src)
        self.graph.replay()
        return self.out


class Scoring:
    """One set of windows through the device, batch by batch: launched ahead, read back in order.

    Batch i+1 is packed and queued before batch i's links are read back, so the host's work overlaps
    the device's. A batch that runs out of GPU memory is halved and retried (never dropped), after
    what is in flight has been read back to free its memory, and the run report says so."""

    def __init__(self, scorer: WindowScorer, windows: Sequence[Window], batch_size: int):
        self.scorer = scorer
        self.out: list[Links | None] = [None] * len(windows)
        self.todo = [[[windows[i] for i in row] for row in rows] + [rows]
                     for rows in arrange([len(w.ids) for w in windows], batch_size, scorer.knobs.unpad)]
        self.todo.reverse()
        self.in_flight: list[InFlight] = []

    def launch(self, up_to: int) -> None:
        """Queue batches until `up_to` are in flight (or none is left)."""
        while self.todo and len(self.in_flight) < up_to:
            self.launch_next()

    def launch_next(self) -> None:
        *rows, index = self.todo.pop()
        try:
            launched = self.scorer.launch(rows)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            if not is_out_of_memory(e) or len(rows) == 1:
                raise
            self.read_back()                                      # free their memory before retrying
            if self.scorer.device.type == "cuda":
                torch.cuda.empty_cache()
            half = (len(rows) + 1) // 2
            self.scorer.report_backoff(half)
            self.todo.append(rows[half:] + [index[half:]])
            self.todo.append(rows[:half] + [index[:half]])
            return
        launched.index = index
        self.in_flight.append(launched)

    def finished(self) -> bool:
        """Every batch launched and done on the device: reading them back would not wait."""
        return not self.todo and all(f.ready is None or f.ready.query() for f in self.in_flight[-1:])

    def read_back(self, keep: int = 0) -> None:
        """Collect the oldest batches in flight until `keep` are left."""
        while len(self.in_flight) > keep:
            self.scorer.collect(self.in_flight.pop(0), self.out)

    def result(self) -> list[Links]:
        while self.todo:
            self.launch_next()
            self.read_back(keep=1)                  # one batch queued behind the one being read back
        self.read_back()
        return self.out  # type: ignore[return-value]
