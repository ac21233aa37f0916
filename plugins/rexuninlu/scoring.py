"""Windows -> batched forward -> the links decoding needs (the batcher of design.md §2).

Rows: each row of a batch holds one window (padded), or — with `knobs.unpad` — several short
windows packed end to end, kept apart by the mask and the ConvLayer (lossless). With
`knobs.cuda_graphs` each (rows, length) shape is captured once as a CUDA graph and replayed.
Padding follows spec §2.7 so a window scores the same in any batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from plugins.rexuninlu.decoding import Links, Window
from plugins.rexuninlu.modeling import RexModel
from plugins.rexuninlu.prompting import MAX_LEN
from workstation.batching import run_with_backoff
from workstation.models import Knobs


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


def isolation_mask(p: Packed) -> torch.Tensor:
    """[B,L,L] bool: same window, then the prompt-isolation rule; pad keys masked."""
    g, t, s = p.groups, p.types, p.segments
    glob = g == -1
    same_group = (g[:, :, None] == g[:, None, :]) & (
        (t[:, :, None] == t[:, None, :]) | (t[:, :, None] == 0) | (t[:, None, :] == 0))
    rule = glob[:, :, None] | glob[:, None, :] | same_group
    return rule & (s[:, :, None] == s[:, None, :]) & (s >= 0)[:, None, :]


def run_network(network: RexModel, p: Packed) -> torch.Tensor:
    if network.attention_backend == "triton":           # the kernel applies the mask rule itself
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

    # ------------------------------------------------------------ batching

    def score(self, windows: Sequence[Window], batch_size: int) -> list[Links]:
        self.batch_rows = batch_size
        out: list[Links | None] = [None] * len(windows)
        pack = self.knobs.unpad
        for rows in arrange([len(w.ids) for w in windows], batch_size, pack):
            links = run_with_backoff(rows, lambda r: self.forward([[windows[i] for i in row] for row in r]),
                                     self.on_backoff)
            for row, row_links in zip(rows, links):
                for i, link in zip(row, row_links):
                    out[i] = link
        return out  # type: ignore[return-value]

    def pack(self, rows: Sequence[Sequence[Window]]) -> Packed:
        longest = max(sum(len(w.ids) for w in row) for row in rows)
        quantum = 64 if self.knobs.cuda_graphs else 8          # fewer distinct shapes to capture
        L = -(-longest // quantum) * quantum
        B = len(rows)
        if self.knobs.cuda_graphs:
            B = 1 << (B - 1).bit_length()                         # rows padded to a power of two
        return self.fill(rows, B, L)

    def blank(self, rows: int, length: int) -> Packed:
        """A batch of padding only, of the given shape (graph capture needs shapes, not data)."""
        return self.fill([], rows, length)

    def fill(self, rows: Sequence[Sequence[Window]], B: int, L: int) -> Packed:
        """[B, L] device tensors: padding everywhere, then each row's windows one after another."""
        ids = np.full((B, L), self.pad_id, np.int64)
        pos, typ = np.zeros((B, L), np.int64), np.zeros((B, L), np.int64)
        grp, seg = np.full((B, L), -2, np.int64), np.full((B, L), -1, np.int64)
        is_text, is_type = np.zeros((B, L), bool), np.zeros((B, L), bool)
        starts, slot = [], 0
        for r, row in enumerate(rows):
            at = 0
            for w in row:
                nh, end = w.n_hint, at + len(w.ids)
                starts.append((r, at))
                ids[r, at:end] = w.ids
                pos[r, at:end] = w.positions
                g = np.asarray(w.groups)
                grp[r, at:end] = np.where(g < 0, g, slot * 1024 + g)     # groups unique per window
                typ[r, at:end] = w.types
                seg[r, at:end] = slot
                is_text[r, at + nh:end] = True
                is_type[r, at:at + nh] = ids[r, at:at + nh] == self.type_id
                at, slot = end, slot + 1
        t = [torch.from_numpy(a).to(self.device, non_blocking=True) for a in (ids, pos, grp, typ, seg, is_text, is_type)]
        return Packed(*t, starts=starts)

    # ------------------------------------------------------------ forward

    def logits(self, p: Packed) -> torch.Tensor:
        if self.knobs.cuda_graphs and self.device.type == "cuda":
            return self.graph_for(p).replay_with(p)
        return run_network(self.network, p)

    def graph_for(self, p: Packed) -> "CapturedForward":
        if not self.graphs:
            # The largest bucket first, so later, smaller graphs reuse its freed blocks in the shared
            # pool. bench memory-pool: peak reserved 2,348 -> 2,250 MiB and peak allocated 1,558 ->
            # 1,365 MiB against capturing in arrival order; the pool itself still stays apart from
            # eager allocations (docs/benchmarks.md).
            rows = max(p.ids.shape[0], 1 << (self.batch_rows - 1).bit_length())
            self._capture(self.blank(rows, -(-MAX_LEN // 64) * 64))
        return self._capture(p)

    def _capture(self, p: Packed) -> "CapturedForward":
        key = (tuple(p.ids.shape), self.knobs.dtype, self.knobs.attention)
        if key not in self.graphs:
            self.graphs[key] = CapturedForward(self.network, p, self.graphs)
        return self.graphs[key]

    @torch.inference_mode()
    def forward(self, rows: Sequence[Sequence[Window]]) -> list[list[Links]]:
        p = self.pack(rows)
        logits = self.logits(p)
        windows = [w for row in rows for w in row]
        self.tokens += sum(len(w.ids) for w in windows)
        hits = self.readable_links(logits, p).tolist()
        per_window: list[list[tuple[int, int]]] = [[] for _ in windows]
        for w, r, c in hits:
            per_window[w].append((r, c))
        links = []
        for k, w in enumerate(windows):
            row, start = p.starts[k]
            n = len(w.ids)
            probs = torch.sigmoid(logits[row, start:start + n, start:start + n]).float().cpu() \
                if w.need_probs else None
            links.append(Links([r for r, _ in per_window[k]], [c for _, c in per_window[k]], probs))
        out, k = [], 0
        for row in rows:
            out.append(links[k:k + len(row)])
            k += len(row)
        return out

    @staticmethod
    def readable_links(logits: torch.Tensor, p: Packed) -> torch.Tensor:
        """Positive entries decoding can use: [K,3] (window, row, col) in window-local indices,
        row-major like torch.where.

        Lossless filter: a text span (r <= c) counts only if r links to some [TYPE] and some
        [TYPE] links to c; links count only between a [TYPE] and the text of the same window.
        Everything else the decoder would skip, so dropping it here saves the transfer and the loop.
        """
        same = p.segments[:, :, None] == p.segments[:, None, :]
        positive = (logits > 0) & same
        head_link = positive & p.is_text[:, :, None] & p.is_type[:, None, :]   # row text -> col [TYPE]
        tail_link = positive & p.is_type[:, :, None] & p.is_text[:, None, :]   # row [TYPE] -> col text
        heads, tails = head_link.any(-1) & p.is_text, tail_link.any(-2) & p.is_text
        upper = torch.ones_like(positive[0]).triu()                              # row <= col
        span = positive & upper & heads[:, :, None] & tails[:, None, :]
        b, r, c = (span | head_link | tail_link).nonzero().unbind(-1)
        w = p.segments[b, r]
        start = torch.tensor([s for _, s in p.starts], device=logits.device)[w]
        return torch.stack([w, r - start, c - start], dim=-1)


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
