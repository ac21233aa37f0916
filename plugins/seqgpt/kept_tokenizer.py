"""SeqGPT's tokenizer without importing transformers, after the first process on a machine.

`AutoTokenizer.from_pretrained` imports transformers: about 2.8 s of a 3.9 s SeqGPT load on the 2-core VM, in every
`launcher.py extract` process. The first process builds the checkpoint's tokenizer with transformers, as before, and
keeps its Rust backend (`backend_tokenizer.to_str()`, after transformers has set it up) in the cache folder the
launcher names (IEW_CACHE_DIR). A later process loads that with the `tokenizers` library alone and answers the few
calls the pipeline makes (`RustTokenizer`) as transformers' fast tokenizer answers them: encoding is the backend's
`encode_batch` with truncation and padding off, decoding its `decode`. Whether transformers adds anything of its own
on top (it cleans up decoded spaces for some tokenizers, not for BPE ones as BLOOM's, in the version pinned) is not
assumed: the first process compares both on PROBES and keeps the entry only if they agree on every one; otherwise it
and every later process use transformers' tokenizer. RexUniNLU does the same (rexuninlu.loading.load_vocabulary).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from contracts import cache_folder
from plugins.seqgpt.loading import TOKENIZER_FILES, load_tokenizer

# Texts the two tokenizers must agree on, ids, offsets and decoding (with and without special tokens skipped):
# scripts, spaces at either end and doubled, punctuation of both languages, digits, emoji, the prompt's own markers.
PROBES = ("", " ", "北大西洋议会春季会议在西班牙巴塞罗那闭幕。", "输入: 张三在北京工作\n抽取: 人物,地点\n输出: [GEN]",
          "  The meeting (in Barcelona) closed, didn't it?  ", "2026年12月7日 · 价格 ¥1,234.50 / $99", "emoji 😀 ok",
          "Ünïcödé — «quotes» … ‘a’", "<s></s><pad><unk>", "tab\there\r\nnew line", "全角：（括号）！？",
          "spaces before punctuation , . ! ? and do n't 's 've 're")     # what a decoding clean-up would change


class RustTokenizer:
    """The calls SeqGPT makes of transformers' fast tokenizer, answered by its Rust backend (module docstring)."""

    def __init__(self, rust, size: int, split_special_tokens: bool):
        self.rust, self.size = rust, size
        rust.no_truncation()
        rust.no_padding()
        rust.encode_special_tokens = split_special_tokens

    @classmethod
    def from_entry(cls, entry: dict) -> "RustTokenizer":
        from tokenizers import Tokenizer
        return cls(Tokenizer.from_str(entry["tokenizer"]), entry["size"], entry["split_special_tokens"])

    def __call__(self, text: str | Sequence[str], add_special_tokens: bool = True,
                 return_offsets_mapping: bool = False) -> dict:
        one = isinstance(text, str)
        encodings = self.rust.encode_batch([text] if one else list(text), add_special_tokens=add_special_tokens)
        out = {"input_ids": [e.ids for e in encodings]}
        if return_offsets_mapping:
            out["offset_mapping"] = [e.offsets for e in encodings]
        return {k: v[0] for k, v in out.items()} if one else out

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.rust.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    def __len__(self) -> int:
        return self.size


def load(weights: Path):
    """The tokenizer for a model's runs: from the cache folder where an entry agreed with transformers, else built by
    transformers (and kept, if it agrees)."""
    kept_at = kept_at_for(weights)
    kept = cache_folder.read_json(kept_at) if kept_at is not None else None
    if kept is not None:
        try:
            return RustTokenizer.from_entry(kept)
        except Exception:                      # noqa: BLE001 - truncated, another format: build it again
            pass
    built = load_tokenizer(weights)
    if kept_at is not None and agree(built, RustTokenizer.from_entry(entry := entry_of(built))):
        cache_folder.keep_json(kept_at, entry)
    return built


def entry_of(built) -> dict:
    """What the cache folder keeps of transformers' tokenizer: its Rust backend as transformers set it up."""
    return {"tokenizer": built.backend_tokenizer.to_str(), "size": len(built),
            "split_special_tokens": bool(built.split_special_tokens)}


def agree(reference, candidate) -> bool:
    """Whether `candidate` answers every call SeqGPT makes as `reference` does, on PROBES."""
    if len(reference) != len(candidate):
        return False
    for special in (True, False):
        a = reference(list(PROBES), add_special_tokens=special, return_offsets_mapping=True)
        b = candidate(list(PROBES), add_special_tokens=special, return_offsets_mapping=True)
        if [list(x) for x in a["input_ids"]] != b["input_ids"] or \
                [[tuple(o) for o in x] for x in a["offset_mapping"]] != [[tuple(o) for o in x] for x in b["offset_mapping"]]:
            return False
        for ids in a["input_ids"]:
            for skip in (True, False):
                if reference.decode(ids, skip_special_tokens=skip) != candidate.decode(ids, skip_special_tokens=skip):
                    return False
    return True


def kept_at_for(weights: Path) -> Path | None:
    """The cache folder's entry for this checkpoint's tokenizer (its files, the libraries that built it)."""
    return cache_folder.tokenizer_entry("seqgpt", weights, TOKENIZER_FILES + ("special_tokens_map.json",))
