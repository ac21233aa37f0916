"""The memory-pool path for decoding: static shapes, one CUDA graph per decode span, reused.

A decode step of SeqGPT-560M at batch 1 is ~600 small kernels; launched one by one from Python it
takes ~20 ms, captured and replayed as one graph about a millisecond. A graph fixes every shape and
address, so a `StaticRun` owns everything a step touches, allocated once and reset in place:

- the static decoder (KV cache, key mask, write column; decoders.py),
- the search state (generation.py), whose update is part of the captured step, so a step is one
  replay: decode, choose tokens, reorder beams, with no host sync,
- one graph per *span*: step s attends columns [0, P + span) with span the power of two >= s
  (at least 16), so early steps do not read the whole empty cache.

Runs are keyed by (row bucket, prompt bucket, settings, attention, dtype): rows are padded up to a
power of two and prompts to a multiple of 64, so batches of nearby sizes share a run; finished rows
keep running (frozen) instead of forcing a new shape. All graphs share one memory pool: they never
run concurrently and keep nothing of their own between replays (every persistent tensor is state
allocated outside the capture), so their scratch can overlap.

Without capture (`capture=False`, the CPU) the same step runs eagerly: the tests pin its tokens
to the plain decoder's.
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from plugins.seqgpt.decoders import StaticDecoder
from plugins.seqgpt.generation import GenerationSettings, decode_step, new_search

PROMPT_QUANTUM = 64
MIN_SPAN = 16


def row_bucket(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def prompt_bucket(length: int) -> int:
    return -(-length // PROMPT_QUANTUM) * PROMPT_QUANTUM


def spans(new_tokens: int) -> list[int]:
    """Attended spans of generated columns, one graph each: 16, 32, ... up to new_tokens."""
    out, span = [], MIN_SPAN
    while span < new_tokens:
        out.append(span)
        span *= 2
    return out + [new_tokens]


class StaticRun:
    def __init__(self, network, items: int, prompt_capacity: int, settings: GenerationSettings,
                 attention: str, pool=None, stream: torch.cuda.Stream | None = None):
        k = settings.num_beams
        self.decoder = StaticDecoder(network, items * k, prompt_capacity, settings.max_new_tokens, attention)
        self.search = new_search(items, network.config.vocab_size, settings, network.word_embeddings.weight.device)
        self.spans = spans(settings.max_new_tokens)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if pool is not None:
            self._capture(pool, stream)

    def span_for(self, step: int) -> int:
        """Step `step` (1-based decode step) attends `step` generated columns."""
        return next(span for span in self.spans if span >= step)

    def advance(self, step: int) -> None:
        span = self.span_for(step)
        if span in self.graphs:
            self.graphs[span].replay()
        else:
            self._step(span)

    def _step(self, span: int) -> None:
        decode_step(self.decoder, self.search, span)

    def _capture(self, pool, stream: torch.cuda.Stream) -> None:
        # Warm up (lazy cuBLAS/allocator work must not happen during capture) and capture from a
        # valid empty state; generate() resets the state in place before the real prefill.
        for span in self.spans:
            self.decoder.clear()
            self.search.clear()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self._step(span)
            torch.cuda.current_stream().wait_stream(stream)
            self.decoder.clear()
            self.search.clear()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._step(span)
            self.graphs[span] = graph


class DecodeGraphs:
    """Static runs kept across generate() calls. `keep` bounds how many stay allocated: each holds a
    KV cache of 96 KiB a token (fp16, SeqGPT-560M): rows x (prompt + new tokens) for a static run and an
    eager slot pool, items x prompt + rows x new tokens for a slot pool of another backend (shared_prompt.py)."""

    def __init__(self, capture: bool, keep: int = 2):
        self.capture, self.keep = capture, keep
        self.runs: OrderedDict[tuple, StaticRun] = OrderedDict()
        self.pool = None
        self.stream = None        # one warm-up stream: cuBLAS keeps a workspace per stream for good

    def run_for(self, network, n_prompts: int, prompt_length: int, settings: GenerationSettings,
                attention: str) -> StaticRun:
        items, capacity = row_bucket(n_prompts), prompt_bucket(prompt_length)
        return self._keep((items, capacity, settings, attention), network, lambda pool, stream: StaticRun(
            network, items, capacity, settings, attention, pool, stream))

    def _keep(self, shape: tuple, network, build):
        weight = network.word_embeddings.weight
        key = (id(network), weight.dtype, str(weight.device)) + shape
        if key in self.runs:
            self.runs.move_to_end(key)
            return self.runs[key]
        while len(self.runs) >= self.keep:             # free an old cache before allocating a new one
            self.runs.popitem(last=False)
        if not self.runs:
            # Once its last graph is gone the allocator retires a pool; a new capture needs a new one.
            self.pool = None
        if self.capture and self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        if self.capture and self.stream is None:
            self.stream = torch.cuda.Stream()
        self.runs[key] = build(self.pool if self.capture else None, self.stream)
        return self.runs[key]

    def pool_for(self, network, items: int, prompt_capacity: int, settings: GenerationSettings, attention: str):
        """A continuous-batching slot pool (continuous.py) with bucketed steps, captured when on CUDA."""
        from plugins.seqgpt.continuous import SlotPool
        return self._keep(("slots", items, prompt_capacity, settings, attention), network, lambda pool, stream: SlotPool(
            network, items, prompt_capacity, settings, attention, bucketed=True, graph_pool=pool, stream=stream))

    def clear(self) -> None:
        self.runs.clear()
        self.pool = None
