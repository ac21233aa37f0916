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
item that is done is frozen while the rest of its batch runs on, so we may drop it from the batch;
(d) the repetition penalty does see the batch: it penalises every id in the row, and a left-padded
row contains PAD ids. We keep (d) as the reference run has it: a chunk's PAD id is penalised exactly
when the chunk is shorter than the longest chunk of its own document (`EncodedPrompt.penalize_pad`),
whatever batch we actually run it in. With that, cross-document batching changes nothing but the
float rounding of equal maths.

Version drift (spec §1.4): the reference pinned transformers 4.28.1, which divided by the full row
length (left pads + prompt + generated, EOS excluded), used that length in the done check too, and
at max_length finished the running beams rather than the top candidates; there the result could
depend on how much padding a batch had. We follow 5.17.0, the version we pin and test against; on
real prompts the two can pick different hypotheses when beams end at different lengths.

Greedy (num_beams=1) is `_sample` without sampling: the repetition penalty acts on raw logits, then
argmax; a row stops at EOS or after max_new_tokens.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from plugins.seqgpt.modeling import Bloom

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
        return cls(ids.to(device), mask.to(device))


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


@torch.no_grad()
def generate(network: Bloom, prompts: Sequence[EncodedPrompt], settings: GenerationSettings,
             attention: str = "eager") -> Generation:
    if settings.num_beams == 1:
        return _greedy(network, prompts, settings, attention)
    return _beam_search(network, prompts, settings, attention)


def _strip_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[:tokens.index(eos)] if eos in tokens else tokens


def _greedy(network: Bloom, prompts, s: GenerationSettings, attention: str) -> Generation:
    device = network.word_embeddings.weight.device
    batch = Batch.left_padded(prompts, s.pad_token_id, device)
    mask = batch.attention_mask
    cache = network.new_cache(len(prompts), mask.shape[1] + s.max_new_tokens)
    logits = network(batch.input_ids, mask, cache, attention)[:, -1].float()
    fed = int(mask.sum())
    vocab = logits.shape[-1]
    seen = seen_tokens(prompts, vocab, s.pad_token_id, device) if s.repetition_penalty != 1.0 else None
    active = torch.arange(len(prompts), device=device)          # original row of each running row
    out: list[list[int]] = [[] for _ in prompts]
    for step in range(s.max_new_tokens):
        scores = logits if seen is None else penalise(logits, seen, s.repetition_penalty)
        next_tokens = torch.argmax(scores, dim=-1)
        for row, token in zip(active.tolist(), next_tokens.tolist()):
            out[row].append(token)
        if step + 1 == s.max_new_tokens:
            break
        keep = (next_tokens != s.eos_token_id).nonzero().squeeze(1)
        if len(keep) == 0:
            break
        if len(keep) < len(active):                     # finished rows leave the batch
            active, next_tokens, mask = active[keep], next_tokens[keep], mask[keep]
            cache.select(keep)
            seen = None if seen is None else seen[keep]
        if seen is not None:
            seen[torch.arange(len(keep), device=device), next_tokens] = True
        mask = torch.cat([mask, mask.new_ones((len(keep), 1))], dim=1)
        logits = network(next_tokens[:, None], mask, cache, attention)[:, -1].float()
        fed += len(keep)
    return Generation([_strip_eos(t, s.eos_token_id) for t in out], fed)


def _beam_search(network: Bloom, prompts, s: GenerationSettings, attention: str) -> Generation:
    """HF 5.17.0 beam search (module docstring), vectorised over items; done items leave the batch."""
    device = network.word_embeddings.weight.device
    k, n = s.num_beams, len(prompts)
    batch = Batch.left_padded(prompts, s.pad_token_id, device)
    cache = network.new_cache(n, batch.input_ids.shape[1] + s.max_new_tokens)
    # Prefill once per prompt, then copy the cache for its beams (HF prefills the repeated rows).
    logits = network(batch.input_ids, batch.attention_mask, cache, attention)[:, -1].float()
    fed = int(batch.attention_mask.sum())
    beam_rows = torch.arange(n, device=device).repeat_interleave(k)
    cache.select(beam_rows)
    mask = batch.attention_mask[beam_rows]
    logits = logits[beam_rows]
    vocab = logits.shape[-1]
    seen = seen_tokens(prompts, vocab, s.pad_token_id, device)[beam_rows] if s.repetition_penalty != 1.0 else None

    items = torch.arange(n, device=device)                   # original prompt of each running item
    running_scores = torch.full((n, k), NEG, device=device)
    running_scores[:, 0] = 0.0
    running_tokens = torch.full((n, k, s.max_new_tokens), s.pad_token_id, dtype=torch.long, device=device)
    finished_scores = torch.full((n, k), NEG, device=device)
    finished_tokens = running_tokens.clone()
    finished_flags = torch.zeros((n, k), dtype=torch.bool, device=device)
    improvable = torch.ones((n, 1), dtype=torch.bool, device=device)
    top_k_mask = torch.arange(2 * k, device=device) < k      # only the top num_beams candidates may finish
    best: dict[int, torch.Tensor] = {}

    for step in range(s.max_new_tokens):
        m = len(items)
        log_probs = torch.log_softmax(logits, dim=-1)
        if seen is not None:
            log_probs = penalise(log_probs, seen, s.repetition_penalty)
        totals = (log_probs.view(m, k, vocab) + running_scores[:, :, None]).view(m, k * vocab)
        top_scores, top_index = torch.topk(totals, 2 * k)                          # [m, 2k]
        top_beam, top_token = top_index // vocab, top_index % vocab
        candidates = torch.gather(running_tokens, 1, top_beam[:, :, None].expand(-1, -1, s.max_new_tokens))
        candidates[:, :, step] = top_token
        hits = (top_token == s.eos_token_id) | (step + 1 >= s.max_new_tokens)

        # next running beams: the best candidates that did not hit
        running_candidates = top_scores + hits.to(torch.float32) * NEG
        chosen = torch.topk(running_candidates, k)[1]                              # [m, k]
        running_scores = torch.gather(running_candidates, 1, chosen)
        running_tokens = torch.gather(candidates, 1, chosen[:, :, None].expand(-1, -1, s.max_new_tokens))
        source_beam = torch.gather(top_beam, 1, chosen)

        # finished hypotheses (same arithmetic as HF, so ties resolve the same way)
        just_finished = hits & top_k_mask[None, :]
        scored = top_scores / ((step + 1) ** s.length_penalty)
        scored = scored + (~improvable).to(torch.float32) * NEG
        scored = scored + (~just_finished) * NEG
        merged_scores = torch.cat([finished_scores, scored], dim=1)
        keep = torch.topk(merged_scores, k)[1]
        finished_scores = torch.gather(merged_scores, 1, keep)
        finished_tokens = torch.gather(torch.cat([finished_tokens, candidates], dim=1), 1,
                                       keep[:, :, None].expand(-1, -1, s.max_new_tokens))
        finished_flags = torch.gather(torch.cat([finished_flags, just_finished], dim=1), 1, keep)

        # done heuristic, with `step + 1` tokens generated
        best_running = running_scores[:, :1] / ((step + 1) ** s.length_penalty)
        worst_finished = torch.where(finished_flags, finished_scores.min(dim=1, keepdim=True)[0], NEG)
        improvable = improvable & (best_running > worst_finished).any(dim=-1, keepdim=True)

        if step + 1 == s.max_new_tokens:
            break
        live = improvable[:, 0]
        for item in (~live).nonzero().squeeze(1).tolist():
            best[int(items[item])] = finished_tokens[item, 0]
        if not bool(live.any()):
            break

        # reorder the beams' state, dropping items that are done
        rows = (torch.arange(m, device=device)[:, None] * k + source_beam)[live].reshape(-1)
        items, running_scores, running_tokens = items[live], running_scores[live], running_tokens[live]
        finished_scores, finished_tokens = finished_scores[live], finished_tokens[live]
        finished_flags, improvable = finished_flags[live], improvable[live]
        cache.select(rows)
        mask = torch.cat([mask[rows], mask.new_ones((len(rows), 1))], dim=1)
        next_tokens = running_tokens[:, :, step].reshape(-1)
        if seen is not None:
            seen = seen[rows]
            seen[torch.arange(len(rows), device=device), next_tokens] = True
        logits = network(next_tokens[:, None], mask, cache, attention)[:, -1].float()
        fed += len(rows)

    for item in range(len(items)):
        best.setdefault(int(items[item]), finished_tokens[item, 0])
    tokens = [_strip_eos(best[i].tolist(), s.eos_token_id) for i in range(n)]
    return Generation(tokens, fed)
