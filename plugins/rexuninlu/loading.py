"""The official checkpoint layout of iic/nlp_deberta_rex-uninlu_chinese-base, loaded strictly.

Directory: config.json, vocab.txt, tokenizer_config.json, special_tokens_map.json and
pytorch_model.bin (or model.safetensors) holding the whole RexModel state dict, keys prefixed `plm.`.
The reference loads with strict=False, which hides mismatches; we fail and name the key instead.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from contracts import cache_folder
from contracts.domain import WeightsError
from contracts.torch.checkpoints import check_tensors, read_state_dict
from plugins.rexuninlu.modeling import RexConfig, RexModel
from plugins.rexuninlu.prompting import Vocabulary

# Added at run time by the reference, in this order; the ids are len(vocab.txt) + k.
PROMPT_TOKENS = ("[PREFIX]", "[TYPE]", "[CLASSIFY]", "[MULTICLASSIFY]")
REQUIRED_FILES = ("config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
# What BertTokenizerFast.from_pretrained reads, where present: the tokenizer cache is keyed on them.
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json",
                   "added_tokens.json")
WEIGHT_FILES = ("pytorch_model.bin", "model.safetensors")
# Buffers some exports carry that do not affect the computation.
BENIGN_EXTRA_KEYS = ("plm.embeddings.position_ids",)


def read_config(weights: Path) -> RexConfig:
    missing = [f for f in REQUIRED_FILES if not (weights / f).is_file()]
    if not weights.is_dir():
        raise WeightsError(f"weights directory {weights} does not exist; set models.rexuninlu.weights in "
                           "settings.toml or run `python3 launcher.py weights fetch rexuninlu`")
    other = _other_architecture(weights / "config.json")
    if other:
        raise WeightsError(f"{weights} holds a {other!r} model (config.json model_type), not RexUniNLU's "
                           "'deberta-v2': is this another model's checkpoint?")
    if missing:
        raise WeightsError(f"{weights} is not a RexUniNLU checkpoint: missing {', '.join(missing)}")
    try:
        raw = json.loads((weights / "config.json").read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WeightsError(f"{weights / 'config.json'} is not valid JSON: {e}") from None
    config = RexConfig.from_dict(raw)
    with open(weights / "vocab.txt", encoding="utf-8") as f:
        vocab_lines = sum(1 for _ in f)
    if vocab_lines != config.vocab_size:
        raise WeightsError(f"config.json vocab_size={config.vocab_size} but vocab.txt has {vocab_lines} lines; "
                           "the prompt tokens are numbered after the vocabulary, so these must agree")
    return config


def _other_architecture(config: Path) -> str | None:
    """The model_type of a readable config.json that is not DeBERTa-v2 (checked before the files, so a
    folder of another model is named as such rather than as one missing vocab.txt)."""
    try:
        model_type = json.loads(config.read_text("utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return model_type if isinstance(model_type, str) and model_type != "deberta-v2" else None


def load_tokenizer(weights: Path):
    """The fast WordPiece tokenizer (offsets are needed) plus the four prompt tokens."""
    from transformers import BertTokenizerFast
    tok = BertTokenizerFast.from_pretrained(str(weights))
    tok.add_special_tokens({"additional_special_tokens": list(PROMPT_TOKENS)})
    ids = tok.convert_tokens_to_ids(list(PROMPT_TOKENS))
    base = len(tok) - len(PROMPT_TOKENS)
    if ids != list(range(base, base + 4)):
        raise WeightsError(f"{weights}: prompt tokens got ids {ids}; expected {base}..{base + 3}. "
                           "Does vocab.txt already contain [PREFIX]/[TYPE]?")
    return tok


def load_vocabulary(weights: Path) -> Vocabulary:
    """The tokenizer as prompting uses it. transformers builds it (BertTokenizerFast, as the reference does) the first
    time; its Rust backend and ids are then kept in the cache folder the launcher names (IEW_CACHE_DIR), from which a
    later process loads them in milliseconds without importing transformers, about 2 s of every `extract` on the
    GPU machine (docs/benchmarks.md). Keyed on the tokenizer's files and the transformers and tokenizers versions
    that built it; without a cache folder, or with an unreadable entry, it is built again."""
    kept_at = kept_tokenizer_at(weights)
    kept = cache_folder.read_json(kept_at) if kept_at is not None else None
    if kept is not None:
        try:
            from tokenizers import Tokenizer
            return Vocabulary(Tokenizer.from_str(kept["tokenizer"]), **kept["ids"])
        except Exception:                      # noqa: BLE001 - truncated, another format: build it again
            pass
    vocabulary = Vocabulary.of(load_tokenizer(weights))
    if kept_at is not None:
        ids = {k: v for k, v in vars(vocabulary).items() if k != "rust"}
        cache_folder.keep_json(kept_at, {"tokenizer": vocabulary.rust.to_str(), "ids": ids})
    return vocabulary


def kept_tokenizer_at(weights: Path) -> Path | None:
    """The cache folder's entry for this checkpoint's tokenizer (its files, the prompt tokens, the libraries)."""
    return cache_folder.tokenizer_entry("rexuninlu", weights, TOKENIZER_FILES, PROMPT_TOKENS)


def load_model(weights: Path, device: str = "cpu") -> tuple[RexModel, RexConfig]:
    config = read_config(weights)
    state = read_state_dict(weights, WEIGHT_FILES)
    # Built where it will run: the random numbers a new network is filled with, all overwritten below, take the
    # host about a second (98 M parameters) and a GPU a few milliseconds. (Built on the meta device instead, its
    # first random fill imports torch's reference kernels, which costs as long again.)
    with torch.device(device):
        model = RexModel(config)
    expected = model.state_dict()
    check_tensors(weights, state, {k: v.shape for k, v in expected.items()}, "RexUniNLU architecture",
                  ignored=BENIGN_EXTRA_KEYS)
    model.load_state_dict({k: state[k] for k in expected}, strict=True)      # copied in as float32
    return model.eval(), config


# The reference's WordPiece ids for the tokens prompting builds on (docs/models/rexuninlu.md §1.1).
SPECIAL_IDS = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3, "[MASK]": 4}


def check_checkpoint(weights: Path) -> str:
    """What `load_model` and `load_tokenizer` would refuse, found without building the network in memory:
    the architecture, the vocabulary and its special tokens, every tensor and its shape."""
    import torch
    config = read_config(weights)
    tok = load_tokenizer(weights)
    found = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_IDS}
    wrong = [f"{t} is id {found[t]} (expected {i})" for t, i in SPECIAL_IDS.items() if found[t] != i]
    if wrong:
        raise WeightsError(f"{weights / 'vocab.txt'}: {'; '.join(wrong)}; this is not RexUniNLU's vocabulary")
    state = read_state_dict(weights, WEIGHT_FILES)
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in RexModel(config).state_dict().items()}
    check_tensors(weights, state, expected, "RexUniNLU architecture", ignored=BENIGN_EXTRA_KEYS)
    params = sum(state[k].numel() for k in expected)
    return (f"RexUniNLU (DeBERTa-v2): {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
            f"vocabulary {config.vocab_size:,} + {len(PROMPT_TOKENS)} prompt tokens, {params:,} parameters")
