"""Greedy and beam-search decoding with the semantics of Hugging Face transformers 5.17.0 `generate`.

Faithful means: with the same settings, the tokens equal what `BloomForCausalLM.generate` returns in
the pinned transformers 5.17.0 (fp32, CPU) when it is run on one document's prompt chunks as one
left-padded batch, the way the reference inference.py calls it.

Beam search in transformers 5.17.0 (`GenerationMixin._beam_search`, defaults: length_penalty 1.0,
early_stopping False, do_sample False, num_return_sequences 1):

1. Each prompt is repeated num_beams times; running beam scores start at [0, -1e9, -1e9, ...] so the
   first step expands only beam 0.
2. Per step: logits of the last position in fp32 -> log_softmax -> logits processors (repetition
   penalty, applied to the *log-probs*) -> plus the running score. The top 2*num_beams candidates over
   (beam x vocab) are kept.
3. A candidate "hits" when its token is EOS or the row reaches max_length (= padded prompt length +
   max_new_tokens, so every row may add exactly max_new_tokens). The next running beams are the best
   num_beams candidates that did not hit (hits get -1e9).
4. Finished hypotheses: only hits ranked in the top num_beams of the 2*num_beams candidates count.
   Their score is sum_logprobs / generated_length ** length_penalty, where generated_length counts
   the new tokens *including* the EOS token and never the prompt or its padding. They are merged
   with the finished set kept so far; the best num_beams stay. Nothing more is added once the item is
   done.
5. Done heuristic (early_stopping False): an item is done when all num_beams finished slots are
   filled and the best running beam's score / (tokens generated so far) ** length_penalty is not
   above the worst finished score. The loop ends when every item is done or max_length is reached
   (at the last step every candidate hits, so the top num_beams of them finish).
6. The answer is the best finished hypothesis; `generate` pads shorter rows with PAD, which decoding
   with skip_special_tokens drops (as it drops EOS and any other special token the model emits).

How the batch enters: (a) left pads get ALiBi position 0 and a masked key, so they change no real
logit (our eager path reproduces HF's arithmetic to the bit); (b) the length normalisation and the
done heuristic count generated tokens only, so unlike 4.28.1 they do not see the padding; (c) an
item that is done is frozen while the rest of its batch runs on (HF keeps it in the batch; so do
we, which keeps every shape fixed);
(d) the repetition penalty does see the batch: it penalises every id in the row, and a left-padded
row contains PAD ids. We keep (d) as the reference run has it: a chunk's PAD id is penalised exactly
when the chunk is shorter than the longest chunk of its own document (`EncodedPrompt.penalize_pad`),
whatever batch we actually run it in. With that, cross-document batching changes nothing but the
float rounding of equal maths.

Version drift (docs/models/seqgpt.md §1.4): the reference pinned transformers 4.28.1, which divided by the full row
length (left pads + prompt + generated, EOS excluded), used that length in the done check too, and
at max_length finished the running beams rather than the top candidates; there the result could
depend on how much padding a batch had. We follow 5.17.0, the version we pin and test against; on
real prompts the two can pick different hypotheses when beams end at different lengths.

Greedy (num_beams=1) is `_sample` without sampling: the repetition penalty acts on raw logits, then
argmax; a row stops at EOS or after max_new_tokens (a finished row is fed PAD, as HF does).

How it runs: the search state lives in device tensors updated in place (`GreedySearch`,
`BeamSearch`), so one search step needs no host sync and can sit inside a captured CUDA graph; the
host only reads a "still running" flag to stop early. A decoder (decoders.py) runs the network:
the plain one, or the static one that `graphs.DecodeGraphs` captures (the memory-pool optimization).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from contracts.names import Kernel
from plugins.seqgpt.decoders import PlainDecoder
from plugins.seqgpt.modeling import Bloom

if TYPE_CHECKING:
    from plugins.seqgpt.graphs import DecodeGraphs

NEG = -1.0e9          # HF's "impossible" score for beams and hypotheses


@dataclass(frozen=True)
class GenerationSettings:
    num_beams: int = 4                  # README / model card / ModelScope: beam 4, no sampling
    max_new_tokens: int = 256
    repetition_penalty: float = 1.0     # the README profile; inference.py uses 2.0
    length_penalty: float = 1.0
    eos_token_id: int = 2
    pad_token_id: int = 3

    def __post_init__(self):
        if self.num_beams < 1:
            raise ValueError(f"num_beams must be at least 1, got {self.num_beams}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be positive, got {self.repetition_penalty}")


@dataclass(frozen=True)
class EncodedPrompt:
    ids: tuple[int, ...]
    penalize_pad: bool = False          # the reference batch (its document's chunks) left-pads this row


@dataclass
class Batch:
    """Left-padded prompts: input_ids and attention_mask [B, L]."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    @classmethod
    def left_padded(cls, prompts: Sequence[EncodedPrompt], pad_id: int, device) -> "Batch":
        length = max(len(p.ids) for p in prompts)
        ids = torch.full((len(prompts), length), pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), length), dtype=torch.long)
        for row, p in enumerate(prompts):
            if p.ids:
                ids[row, length - len(p.ids):] = torch.tensor(p.ids)
                mask[row, length - len(p.ids):] = 1
        return cls(to_device(ids, device), to_device(mask, device))


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """A host tensor on `device`; to a GPU through pinned memory, so the host does not wait for the
    work already queued there (a pageable copy would)."""
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def seen_tokens(prompts: Sequence[EncodedPrompt], vocab: int, pad_id: int, device) -> torch.Tensor:
    """[B, V] bool: ids the repetition penalty applies to (the row's prompt, its PAD if padded)."""
    seen = torch.zeros((len(prompts), vocab), dtype=torch.bool)
    for row, p in enumerate(prompts):
        seen[row, list(p.ids)] = True
        if p.penalize_pad:
            seen[row, pad_id] = True
    return seen.to(device)


def penalise(scores: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    # HF RepetitionPenaltyLogitsProcessor: negative scores times the penalty, positive ones divided.
    return torch.where(seen, torch.where(scores < 0, scores * penalty, scores / penalty), scores)


@dataclass
class Generation:
    tokens: list[list[int]]             # per prompt: the new tokens, EOS and everything after it removed
    tokens_fed: int                     # real (non-pad) token positions run through the network


def _strip_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[:tokens.index(eos)] if eos in tokens else tokens


# ----------------------------------------------------------------------------------------------
# Search state. Each `update(logits)` is one step of HF's loop for every row/item at once, written
# in place into tensors allocated up front; rows/items past the real prompts are padding that is
# finished from the start. `next_tokens` and `reorder` are what the decoder feeds next.
# Each item counts its own steps and stops counting once done, so items that started at different
# times can share one search (continuous batching, continuous.py) and a done item, stepped on while
# others run, never indexes past max_new_tokens.
# ----------------------------------------------------------------------------------------------

class _Search:
    beams = 1
    reorder: torch.Tensor | None = None
    item_state: tuple[str, ...] = ("step",)               # tensors indexed by item (continuous batching
    row_state: tuple[str, ...] = ("next_tokens", "seen")  # moves an item's state between searches)

    def __init__(self, rows: int, items: int, vocab: int, s: GenerationSettings, device):
        self.s, self.vocab, self.device = s, vocab, torch.device(device)
        self.seen = torch.zeros((rows, vocab), dtype=torch.bool, device=device) \
            if s.repetition_penalty != 1.0 else None
        self.next_tokens = torch.full((rows,), s.pad_token_id, dtype=torch.long, device=device)
        self.step = torch.zeros(items, dtype=torch.long, device=device)    # tokens chosen so far, per item
        self.fed = torch.zeros(1, dtype=torch.long, device=device)         # Generation.tokens_fed
        self.running = torch.zeros(1, dtype=torch.bool, device=device)     # any row/item not done

    def start(self, prompts: Sequence[EncodedPrompt], fed: int) -> None:
        self.clear()
        if self.seen is not None:
            rows = len(prompts) * self.beams
            seen = seen_tokens(prompts, self.vocab, self.s.pad_token_id, self.device)
            self.seen[:rows] = seen.repeat_interleave(self.beams, dim=0)
        self.fed.fill_(fed)
        self.running.fill_(True)

    def clear(self) -> None:
        if self.seen is not None:
            self.seen.zero_()
        self.next_tokens.fill_(self.s.pad_token_id)
        self.step.zero_()
        self.fed.zero_()
        self.running.zero_()

    def _see(self, rows_tokens: torch.Tensor) -> None:
        if self.seen is not None:
            self.seen.scatter_(1, rows_tokens[:, None], True)

    def load(self, items: torch.Tensor, other: "_Search") -> None:
        """Make `other`'s items 0..n-1 (started and updated with their prefill logits) this search's
        items `items` [n] long, in place: a slot pool admits new prompts this way."""
        rows = (items[:, None] * self.beams + torch.arange(self.beams, device=items.device)).view(-1)
        for names, index in ((self.item_state, items), (self.row_state, rows)):
            for name in names:
                if getattr(self, name) is not None:
                    getattr(self, name).index_copy_(0, index, getattr(other, name))
        if self.reorder is not None:     # the new rows' generated columns hold nothing yet: keep them in place
            self.reorder.index_copy_(0, rows, rows)
        self.fed += other.fed


class GreedySearch(_Search):
    item_state = _Search.item_state + ("tokens", "finished")

    def __init__(self, rows: int, vocab: int, s: GenerationSettings, device):
        super().__init__(rows, rows, vocab, s, device)
        self.tokens = torch.full((rows, s.max_new_tokens), s.pad_token_id, dtype=torch.long, device=device)
        self.finished = torch.ones(rows, dtype=torch.bool, device=device)

    def start(self, prompts, fed):
        super().start(prompts, fed)
        self.finished[:len(prompts)] = False

    def clear(self):
        super().clear()
        self.tokens.fill_(self.s.pad_token_id)
        self.finished.fill_(True)

    def count_fed(self) -> None:
        self.fed += (~self.finished).sum()

    def update(self, logits: torch.Tensor) -> None:
        s = self.s
        scores = logits if self.seen is None else penalise(logits, self.seen, s.repetition_penalty)
        chosen = torch.argmax(scores, dim=-1)
        active = ~self.finished
        chosen = torch.where(active, chosen, s.pad_token_id)
        at = self.step.clamp(max=s.max_new_tokens - 1)[:, None]
        self.tokens.scatter_(1, at, torch.where(active[:, None], chosen[:, None], self.tokens.gather(1, at)))
        self.step += active
        self.finished |= (chosen == s.eos_token_id) | (self.step >= s.max_new_tokens)
        self._see(chosen)
        self.next_tokens.copy_(chosen)
        self.running.copy_(~self.finished.all().view(1))

    @property
    def done(self) -> torch.Tensor:
        return self.finished

    def result(self, n: int) -> list[list[int]]:
        return [_strip_eos(row, self.s.eos_token_id) for row in self.tokens[:n].tolist()]

    def tokens_of(self, items: torch.Tensor) -> torch.Tensor:
        return self.tokens.index_select(0, items)


class LengthNorm:
    """(generated length) ** length_penalty per step, applied as `x / python_float` is on each device,
    which is how HF divides: CUDA multiplies by the fp32 reciprocal of the scalar, the CPU divides.
    A device tensor indexed by the step keeps the bits and stays capturable."""

    def __init__(self, s: GenerationSettings, device):
        norms = torch.tensor([(i + 1) ** s.length_penalty for i in range(s.max_new_tokens)], dtype=torch.float32)
        self.multiply = torch.device(device).type == "cuda"
        self.table = (torch.ones_like(norms) / norms if self.multiply else norms).to(device)

    def __call__(self, x: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        factor = self.table[step]
        return x * factor if self.multiply else x / factor


class BeamSearch(_Search):
    """HF 5.17.0 beam search (module docstring), vectorised over items: [items, k] scores,
    [items, k, max_new] tokens; `reorder` names each next row's source row."""

    item_state = _Search.item_state + ("running_scores", "running_tokens", "finished_scores", "finished_tokens",
                                       "finished_flags", "improvable")

    def __init__(self, items: int, vocab: int, s: GenerationSettings, device):
        k, n_new = s.num_beams, s.max_new_tokens
        super().__init__(items * k, items, vocab, s, device)
        self.beams = k
        self.running_scores = torch.zeros((items, k), device=device)
        self.running_tokens = torch.full((items, k, n_new), s.pad_token_id, dtype=torch.long, device=device)
        self.finished_scores = torch.zeros((items, k), device=device)
        self.finished_tokens = torch.full_like(self.running_tokens, s.pad_token_id)
        self.finished_flags = torch.zeros((items, k), dtype=torch.bool, device=device)
        self.improvable = torch.zeros((items, 1), dtype=torch.bool, device=device)
        self.reorder = torch.arange(items * k, device=device)
        self.first_row = torch.arange(items, device=device)[:, None] * k
        self.top_k_mask = torch.arange(2 * k, device=device) < k     # only the top num_beams may finish
        self.norm = LengthNorm(s, device)

    def start(self, prompts, fed):
        super().start(prompts, fed)
        self.improvable[:len(prompts)] = True

    def clear(self):
        super().clear()
        self.running_scores.fill_(NEG)
        self.running_scores[:, 0] = 0.0          # the first step expands beam 0 only
        self.running_tokens.fill_(self.s.pad_token_id)
        self.finished_scores.fill_(NEG)
        self.finished_tokens.fill_(self.s.pad_token_id)
        self.finished_flags.zero_()
        self.improvable.zero_()
        self.reorder.copy_(torch.arange(len(self.reorder), device=self.reorder.device))

    def count_fed(self) -> None:
        self.fed += self.improvable.sum() * self.beams

    def update(self, logits: torch.Tensor) -> None:
        s, k = self.s, self.beams
        m, _, n_new = self.running_tokens.shape
        vocab = logits.shape[-1]
        log_probs = torch.log_softmax(logits, dim=-1)
        if self.seen is not None:
            log_probs = penalise(log_probs, self.seen, s.repetition_penalty)
        totals = (log_probs.view(m, k, vocab) + self.running_scores[:, :, None]).view(m, k * vocab)
        top_scores, top_index = torch.topk(totals, 2 * k)                          # [m, 2k]
        top_beam, top_token = top_index // vocab, top_index % vocab
        candidates = torch.gather(self.running_tokens, 1, top_beam[:, :, None].expand(-1, -1, n_new))
        step = self.step[:, None]                                                  # [m, 1]
        candidates.scatter_(2, step[:, :, None].expand(m, 2 * k, 1), top_token[:, :, None])
        hits = (top_token == s.eos_token_id) | (step + 1 >= s.max_new_tokens)

        # next running beams: the best candidates that did not hit
        running_candidates = top_scores + hits.to(torch.float32) * NEG
        chosen = torch.topk(running_candidates, k)[1]                              # [m, k]
        running_scores = torch.gather(running_candidates, 1, chosen)
        running_tokens = torch.gather(candidates, 1, chosen[:, :, None].expand(-1, -1, n_new))
        source_beam = torch.gather(top_beam, 1, chosen)

        # finished hypotheses (same arithmetic as HF, so ties resolve the same way)
        just_finished = hits & self.top_k_mask[None, :]
        scored = self.norm(top_scores, step)
        scored = scored + (~self.improvable).to(torch.float32) * NEG
        scored = scored + (~just_finished) * NEG
        merged_scores = torch.cat([self.finished_scores, scored], dim=1)
        keep = torch.topk(merged_scores, k)[1]
        finished_scores = torch.gather(merged_scores, 1, keep)
        finished_tokens = torch.gather(torch.cat([self.finished_tokens, candidates], dim=1), 1,
                                       keep[:, :, None].expand(-1, -1, n_new))
        finished_flags = torch.gather(torch.cat([self.finished_flags, just_finished], dim=1), 1, keep)

        # done heuristic, with step + 1 tokens generated
        best_running = self.norm(running_scores[:, :1], step)
        worst_finished = torch.where(finished_flags, finished_scores.min(dim=1, keepdim=True)[0], NEG)
        improvable = self.improvable & (best_running > worst_finished).any(dim=-1, keepdim=True)

        self.running_scores.copy_(running_scores)
        self.running_tokens.copy_(running_tokens)
        self.finished_scores.copy_(finished_scores)
        self.finished_tokens.copy_(finished_tokens)
        self.finished_flags.copy_(finished_flags)
        self.improvable.copy_(improvable)
        rows = (self.first_row + source_beam).view(-1)
        self.reorder.copy_(rows)
        self.next_tokens.copy_(torch.gather(running_tokens, 2, step[:, :, None].expand(m, k, 1)).view(-1))
        if self.seen is not None:
            self.seen.copy_(self.seen.index_select(0, rows))
            self._see(self.next_tokens)
        self.running.copy_(improvable.any().view(1))
        self.step += improvable[:, 0]

    @property
    def done(self) -> torch.Tensor:
        return ~self.improvable[:, 0]

    def result(self, n: int) -> list[list[int]]:
        return [_strip_eos(row, self.s.eos_token_id) for row in self.finished_tokens[:n, 0].tolist()]

    def tokens_of(self, items: torch.Tensor) -> torch.Tensor:
        return self.finished_tokens[:, 0].index_select(0, items)


def new_search(rows_or_items: int, vocab: int, s: GenerationSettings, device) -> GreedySearch | BeamSearch:
    return (GreedySearch if s.num_beams == 1 else BeamSearch)(rows_or_items, vocab, s, device)


def decode_step(decoder, search: _Search, span: int) -> None:
    """One decode step: count the rows fed, run the decoder, choose the next tokens (and beams). The
    graph path captures exactly this."""
    search.count_fed()
    search.update(decoder.step(search.next_tokens, search.reorder, span))


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------

class StopCheck:
    """Reads the search's `running` flag. With lag 1 (CUDA graphs) the host reads the flag of the step
    before the last, copied to pinned memory, so it never waits on an idle device: at most one extra
    step runs, on rows that are all done and frozen, which changes no output."""

    def __init__(self, running: torch.Tensor, lag: int):
        self.running, self.lag, self.count = running, lag, 0
        if lag:
            self.host = torch.zeros((2, 1), dtype=torch.bool, pin_memory=True)
            self.events = [torch.cuda.Event(), torch.cuda.Event()]

    def record(self) -> None:
        if self.lag:
            slot = self.count % 2
            self.host[slot].copy_(self.running, non_blocking=True)
            self.events[slot].record()
        self.count += 1

    def keep_going(self) -> bool:
        if not self.lag:
            return bool(self.running)
        if self.count < 2:
            return True
        slot = self.count % 2                       # the record before the last one
        self.events[slot].synchronize()
        return bool(self.host[slot])


@torch.inference_mode()      # also for the static runs it allocates: they are reused only in here
def generate(network: Bloom, prompts: Sequence[EncodedPrompt], settings: GenerationSettings,
             attention: str = Kernel.EAGER, graphs: "DecodeGraphs | None" = None,
             on_step: Callable[[], None] | None = None) -> Generation:
    """Generate for left-padded prompts. With `graphs`, decode through static shapes (captured as CUDA
    graphs on a GPU); the tokens are those of the plain path. on_step: called after each decode
    step is launched (the benchmark records a CUDA event there)."""
    s = settings
    device = network.word_embeddings.weight.device
    batch = Batch.left_padded(prompts, s.pad_token_id, device)
    if graphs is None:
        decoder = PlainDecoder(network, attention, s.max_new_tokens)
        search = new_search(len(prompts), network.config.vocab_size, s, device)

        def advance(step: int) -> None:
            decode_step(decoder, search, step)
        lag = 0
    else:
        run = graphs.run_for(network, len(prompts), batch.input_ids.shape[1], s, attention)
        decoder, search, advance = run.decoder, run.search, run.advance
        lag = 1 if device.type == "cuda" else 0
    search.start(prompts, int(batch.attention_mask.sum()))
    search.update(decoder.prefill(batch, search.beams))
    check = StopCheck(search.running, lag)
    check.record()
    for step in range(1, s.max_new_tokens):
        if not check.keep_going():
            break
        advance(step)
        check.record()
        if on_step:
            on_step()
    return Generation(search.result(len(prompts)), int(search.fed))
