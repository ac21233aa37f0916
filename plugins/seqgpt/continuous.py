"""Continuous batching: a pool of decode slots that is refilled as soon as a prompt finishes.

Batches formed up front run as long as their slowest prompt: with beams ending at different
lengths, most rows of a batch sit frozen for most of its steps. Here the decoder owns `items` slots
(a slot is one prompt's num_beams rows) over one static KV cache; every step decodes all slots,
and a slot whose prompt is done is handed its tokens and refilled with the next waiting prompt's
prefill, so the decoder never runs half-empty while work waits.

Layout: every prompt is right-aligned to column P (the pool's prompt capacity) and its generated tokens
fill [P, P + max_new_tokens). The eager backend keeps a copy of the prompt in each beam row (RowLayout,
HF's arithmetic op for op); the others keep it once per item (shared_prompt.SharedPromptLayout), so a
step reads a prompt once for all its beams. Slots started at different times sit at different steps,
so each row writes its new token at its own column (P + its tokens so far - 1) and a mask says what
is real. A step attends one window of columns [start, end) for all rows: from the longest active
prompt's first column to the furthest generated column. Keys outside a row's own prompt and tokens
are masked, and ALiBi counts real tokens only, so a prompt's tokens do not depend on its neighbours,
its slot or when it was admitted (the tests pin them to one prompt at a time through `generate`).

Two ways to run a step:
- plain (`graphs=None`): the window is exact, the step runs eagerly;
- graphs (the memory-pool knob): window ends are bucketed (prompt side to a power of two >= 64,
  generated side to graphs.spans) and each (start, span) step is captured once as a CUDA graph at
  pool construction; without CUDA the same bucketed steps run uncaptured.

The host learns which slots are done from a per-item flag. On CUDA it reads the flags of the step
before the last (copied to pinned memory), so it never waits on an idle device; a done prompt runs
at most one extra step, frozen, which changes nothing. Finished tokens are copied to pinned memory
behind an event: whoever needs them (the pipeline's decoding thread) waits on that event, not the
decode loop.
"""
from __future__ import annotations

from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Iterator

import torch

from contracts.names import Kernel
from contracts.torch.memory import is_out_of_memory
from plugins.seqgpt.cache import KVCache
from plugins.seqgpt.generation import Batch, EncodedPrompt, GenerationSettings, new_search, to_device
from plugins.seqgpt.graphs import PROMPT_QUANTUM, spans
from plugins.seqgpt.shared_prompt import SharedPromptLayout


def capacity_bucket(length: int) -> int:
    """Prompt columns of a pool or a window: a power of two, at least PROMPT_QUANTUM."""
    return max(PROMPT_QUANTUM, 1 << max(0, length - 1).bit_length())


class SlotKVCache(KVCache):
    """Columns [start, end) of a pool's buffer; each row writes its one new token at its own column
    (`columns`, [rows] long, relative to start), so rows at different steps share one step."""

    def __init__(self, buffer: torch.Tensor, columns: torch.Tensor):
        super().__init__(buffer)
        self.columns = columns

    def write(self, layer, k, v):
        if k.shape[2] != 1:
            raise RuntimeError("a slot pool step takes one token per row")
        index = self.columns[:, None, None, None].expand(-1, k.shape[1], 1, k.shape[3])
        self.keys[layer].scatter_(2, index, k)
        self.values[layer].scatter_(2, index, v)
        return self.keys[layer], self.values[layer]

    def advance(self, n: int) -> None:
        pass


class RowLayout:
    """The pool's K/V with every beam row holding its own copy of the prompt: [n_layer, 2, rows, H,
    P + max_new_tokens, D] and a key mask per row. The eager backend runs here, so its fp32 arithmetic
    is HF `generate`'s op for op; the other backends use shared_prompt.SharedPromptLayout."""

    def __init__(self, network, items: int, beams: int, prompt_capacity: int, new_tokens: int):
        self.beams, self.P = beams, prompt_capacity
        rows, device = items * beams, network.word_embeddings.weight.device
        self.cache = network.new_cache(rows, prompt_capacity + new_tokens)
        self.key_mask = torch.zeros((rows, prompt_capacity + new_tokens), dtype=torch.long, device=device)

    def admit(self, items: torch.Tensor, prefill: KVCache, mask: torch.Tensor) -> None:
        k, P, length = self.beams, self.P, mask.shape[1]
        rows = (items[:, None] * k + torch.arange(k, device=items.device)).view(-1)
        self.cache.buffer[:, :, rows, :, P - length:P] = prefill.buffer.repeat_interleave(k, dim=2)
        self.key_mask[rows] = 0                    # the previous prompt's keys and tokens are gone
        self.key_mask[rows, P - length:P] = mask.repeat_interleave(k, dim=0)

    def logits(self, network, search, start: int, end: int, attention: str) -> torch.Tensor:
        if search.reorder is not None:            # beams of an item share the prompt: move generated columns only
            self.cache.reorder(search.reorder, self.P, end)
        chosen = search.step[:, None].expand(-1, self.beams).reshape(-1)     # per row; no host sync
        # A row writes at P + its tokens so far - 1. A done slot waiting to be refilled may sit beyond
        # a window sized for its neighbours: it writes at the window's last column, into its own row,
        # which nobody reads again before admit() resets it.
        columns = ((chosen - 1).clamp(min=0) + self.P).clamp(max=end - 1)
        self.key_mask.scatter_(1, columns[:, None], 1)
        cache = SlotKVCache(self.cache.buffer[:, :, :, :, start:end], columns - start)
        return network(search.next_tokens[:, None], self.key_mask[:, start:end], cache, attention)[:, -1]

    def clear(self) -> None:
        self.key_mask.zero_()


class SlotPool:
    """`items` slots of num_beams rows each over one static KV cache of prompt capacity P."""

    def __init__(self, network, items: int, prompt_capacity: int, settings: GenerationSettings, attention: str,
                 bucketed: bool = False, graph_pool=None, stream: torch.cuda.Stream | None = None):
        s = self.settings = settings
        self.network, self.attention, self.bucketed = network, attention, bucketed
        self.items, self.beams, self.P = items, s.num_beams, prompt_capacity
        self.device = network.word_embeddings.weight.device
        layout = RowLayout if attention == Kernel.EAGER else SharedPromptLayout
        self.layout = layout(network, items, s.num_beams, prompt_capacity, s.max_new_tokens)
        self.search = new_search(items, network.config.vocab_size, s, self.device)
        self.search.clear()                                       # every slot empty (done)
        self.spans = spans(s.max_new_tokens)
        self.fresh: dict[int, object] = {}       # searches for admitted prompts, by count, reused (reset by start)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        if graph_pool is not None:
            self._capture(graph_pool, stream)

    # -- admitting prompts ---------------------------------------------------------------------

    def admit(self, slots: list[int], prompts: list[EncodedPrompt]) -> None:
        """Prefill `prompts` (each once, whatever the beams) and start them in `slots`."""
        s, k, P = self.settings, self.beams, self.P
        batch = Batch.left_padded(prompts, s.pad_token_id, self.device)
        n, length = batch.input_ids.shape
        if length > P:
            raise ValueError(f"a prompt of {length} tokens does not fit a slot pool of {P} prompt columns")
        scratch = self.network.new_cache(n, length)
        logits = self.network(batch.input_ids, batch.attention_mask, scratch, self.attention)[:, -1].float()
        items = self._index(slots)
        self.layout.admit(items, scratch, batch.attention_mask)
        if n not in self.fresh:
            if len(self.fresh) >= 4:              # with a repetition penalty each holds [n * beams, vocab]
                self.fresh.pop(next(iter(self.fresh)))
            self.fresh[n] = new_search(n, self.network.config.vocab_size, s, self.device)
        fresh = self.fresh[n]
        fresh.start(prompts, sum(len(p.ids) for p in prompts))
        fresh.update(logits.repeat_interleave(k, dim=0))
        self.search.load(items, fresh)

    def tokens_of(self, slots: list[int]) -> torch.Tensor:
        """[n, max_new_tokens] device tensor: the chosen tokens of `slots` (EOS and after included)."""
        return self.search.tokens_of(self._index(slots))

    def _index(self, slots: list[int]) -> torch.Tensor:
        return to_device(torch.tensor(slots, dtype=torch.long), self.device)

    # -- decoding ------------------------------------------------------------------------------

    def window(self, longest_prompt: int, furthest_step: int) -> tuple[int, int]:
        """Columns a step attends, given the longest active prompt and the furthest (1-based) decode
        step of any active slot; bucketed when steps are captured."""
        if self.bucketed:
            prompt = min(self.P, capacity_bucket(longest_prompt))
            span = next(x for x in self.spans if x >= furthest_step)
            return self.P - prompt, self.P + span
        return self.P - longest_prompt, self.P + furthest_step

    def step(self, start: int, end: int) -> None:
        graph = self.graphs.get((start, end))
        if graph is not None:
            graph.replay()
        else:
            self._step(start, end)

    def _step(self, start: int, end: int) -> None:
        self.search.count_fed()
        self.search.update(self.layout.logits(self.network, self.search, start, end, self.attention).float())

    def clear(self) -> None:
        self.layout.clear()
        self.search.clear()

    def _capture(self, graph_pool, stream: torch.cuda.Stream) -> None:
        # Every window a run can ask for, captured from a valid empty state (warm-up first: lazy
        # cuBLAS and allocator work must not happen during capture); admit() fills slots in place.
        prompt_sides = sorted({min(self.P, capacity_bucket(n)) for n in range(1, self.P + 1)})
        for prompt in prompt_sides:
            for span in self.spans:
                start, end = self.P - prompt, self.P + span
                self.clear()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    self._step(start, end)
                torch.cuda.current_stream().wait_stream(stream)
                self.clear()
                graph = torch.cuda.CUDAGraph()
                # thread_local: the pipeline's parsing thread may wait on a CUDA event meanwhile
                with torch.cuda.graph(graph, pool=graph_pool, capture_error_mode="thread_local"):
                    self._step(start, end)
                self.graphs[(start, end)] = graph
        self.clear()


class DoneFlags:
    """Per-slot done flags as the host sees them. With lag 1 (CUDA) `latest()` returns the flags of
    the step before the last, copied to pinned memory, so reading never waits on a busy device."""

    def __init__(self, search, lag: int):
        self.search, self.lag, self.count = search, lag, 0
        if lag:
            self.host = torch.zeros((2, len(search.step)), dtype=torch.bool, pin_memory=True)
            self.events = [torch.cuda.Event(), torch.cuda.Event()]

    def record(self) -> None:
        if self.lag:
            slot = self.count % 2
            self.host[slot].copy_(self.search.done, non_blocking=True)
            self.events[slot].record()
        self.count += 1

    def latest(self) -> tuple[int, list[bool]] | None:
        """(index of the recorded step, flags), or None before any is readable."""
        if not self.lag:
            return (self.count - 1, self.search.done.tolist()) if self.count else None
        if self.count < 2:
            return None
        slot = self.count % 2                 # the record before the last one
        self.events[slot].synchronize()
        return self.count - 2, self.host[slot].tolist()


@dataclass
class Finished:
    """A prompt's chosen tokens, possibly still being copied off the device."""

    tokens_host: torch.Tensor
    event: torch.cuda.Event | None
    eos: int

    def tokens(self) -> list[int]:
        if self.event is not None:
            self.event.synchronize()
        row = self.tokens_host.tolist()
        return row[:row.index(self.eos)] if self.eos in row else row


@dataclass
class _Slot:
    key: Hashable
    prompt: EncodedPrompt
    admitted_at: int          # DoneFlags.count when admitted: flags recorded from then on describe it
    steps: int = 0            # decode steps run since


def stream_generate(network, prompts: Iterable[tuple[Hashable, EncodedPrompt]], items: int,
                    settings: GenerationSettings, attention: str = Kernel.EAGER, graphs=None,
                    device_clock: Callable | None = None, on_backoff: Callable[[int], None] | None = None,
                    on_fed: Callable[[int], None] | None = None) -> Iterator[tuple[Hashable, Finished]]:
    """Generate for every (key, prompt) through a continuously refilled slot pool; yield (key,
    Finished) as each prompt finishes (not in input order). Tokens equal `generate`'s for each prompt.

    items: prompts decoded at once. graphs: a DecodeGraphs (memory-pool knob) for bucketed, captured
    steps, else plain. device_clock(): a context that brackets device work (StageClock.device).
    `prompts` is read lazily, about 2 x items ahead. on_fed(n): real tokens fed, once per pool. On
    out of memory the pool halves and the prompts in flight start again (their tokens do not depend
    on the pool), reported through on_backoff(new items)."""
    clock = device_clock or nullcontext
    source = iter(prompts)
    waiting: deque[tuple[Hashable, EncodedPrompt]] = deque()
    exhausted = False

    def refill_queue(n: int) -> None:
        nonlocal exhausted
        while not exhausted and len(waiting) < n:
            nxt = next(source, None)
            if nxt is None:
                exhausted = True
            else:
                waiting.append(nxt)

    pool: SlotPool | None = None
    flags: DoneFlags | None = None
    slots: dict[int, _Slot] = {}
    admit: list[tuple[Hashable, EncodedPrompt]] = []    # out of the queue, not yet in a slot
    while True:
        refill_queue(2 * items)
        if not waiting and not slots:
            break
        try:
            if pool is None:
                longest = max(len(p.ids) for _, p in waiting)
                with clock():
                    pool = _new_pool(network, items, capacity_bucket(longest), settings, attention, graphs)
                flags = DoneFlags(pool.search, 1 if pool.device.type == "cuda" else 0)
            seen = flags.latest()
            finished = [i for i, slot in slots.items()
                        if seen is not None and seen[0] >= slot.admitted_at and seen[1][i]]
            if finished:
                yield from _harvest(pool, finished, slots, settings)
            free = [i for i in range(pool.items) if i not in slots]
            # A prefill is an eager forward of its own: wait until a few slots are free (at most an
            # eighth of the pool idles) rather than prefill one prompt per step.
            if len(free) >= min(max(1, pool.items // 8), len(waiting)) or not slots:
                while free[len(admit):] and waiting and len(waiting[0][1].ids) <= pool.P:
                    admit.append(waiting.popleft())
            if admit:
                chosen = free[:len(admit)]
                with clock():
                    pool.admit(chosen, [p for _, p in admit])
                for i, (key, prompt) in zip(chosen, admit):
                    slots[i] = _Slot(key, prompt, flags.count)
                admit = []
            if not slots and not waiting:          # all done
                continue
            if not slots:                          # the next prompt is longer than this pool: a bigger one
                pool = _retire(pool, on_fed)
                if graphs is not None:             # free the smaller pool's cache before allocating
                    graphs.clear()
                continue
            longest = max(len(slot.prompt.ids) for slot in slots.values())
            furthest = min(settings.max_new_tokens, max(slot.steps for slot in slots.values()) + 1)
            with clock():
                pool.step(*pool.window(longest, furthest))
            flags.record()
            for slot in slots.values():
                slot.steps += 1
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            if not is_out_of_memory(e) or items == 1:
                raise
            # Restart the prompts in flight and those being admitted (a prefill can run out too), first in line.
            waiting.extendleft(reversed([(slot.key, slot.prompt) for _, slot in sorted(slots.items())] + admit))
            slots.clear()
            admit = []
            pool = flags = _retire(pool, on_fed)
            if graphs is not None:
                graphs.clear()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            items = (items + 1) // 2
            if on_backoff:
                on_backoff(items)
    _retire(pool, on_fed)


def _new_pool(network, items, capacity, settings, attention, graphs) -> SlotPool:
    if graphs is None:
        return SlotPool(network, items, capacity, settings, attention)
    pool = graphs.pool_for(network, items, capacity, settings, attention)
    pool.clear()                               # kept from an earlier run: start with every slot empty
    return pool


def _retire(pool: SlotPool | None, on_fed) -> None:
    """Report the tokens a pool fed since it was cleared (one read of its device counter, at the end)."""
    if pool is not None and on_fed:
        on_fed(int(pool.search.fed))
    return None


def _harvest(pool: SlotPool, finished: list[int], slots: dict, settings) -> Iterator[tuple[Hashable, Finished]]:
    tokens = pool.tokens_of(finished)
    event = None
    if tokens.is_cuda:
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    else:
        host = tokens
    for row, i in enumerate(finished):
        yield slots.pop(i).key, Finished(host[row], event, settings.eos_token_id)
