"""The official checkpoint layout of iic/nlp_deberta_rex-uninlu_chinese-base, loaded strictly.

Directory: config.json, vocab.txt, tokenizer_config.json, special_tokens_map.json and
pytorch_model.bin (or model.safetensors) holding the whole RexModel state dict, keys prefixed `plm.`.
The reference loads with strict=False, which hides mismatches; we fail and name the key instead.
"""
from __future__ import annotations

import json
from pathlib import Path

from contracts.checkpoints import check_tensors, read_state_dict
from contracts.domain import WeightsError
from plugins.rexuninlu.modeling import RexConfig, RexModel

# Added at run time by the reference, in this order; the ids are len(vocab.txt) + k.
PROMPT_TOKENS = ("[PREFIX]", "[TYPE]", "[CLASSIFY]", "[MULTICLASSIFY]")
REQUIRED_FILES = ("config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
WEIGHT_FILES = ("pytorch_model.bin", "model.safetensors")
# Buffers some exports carry that do not affect the computation.
BENIGN_EXTRA_KEYS = ("plm.embeddings.position_ids",)


def read_config(weights: Path) -> RexConfig:
    missing = [f for f in REQUIRED_FILES if not (weights / f).is_file()]
    if not weights.is_dir():
        raise WeightsError(f"weights directory {weights} does not exist; set models.rexuninlu.weights in "
                           "settings.toml or run `python3 launcher.py demo-weights`")
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


def load_model(weights: Path) -> tuple[RexModel, RexConfig]:
    config = read_config(weights)
    state = read_state_dict(weights, WEIGHT_FILES)
    model = RexModel(config)
    expected = model.state_dict()
    check_tensors(weights, state, {k: v.shape for k, v in expected.items()}, "RexUniNLU architecture",
                  ignored=BENIGN_EXTRA_KEYS)
    model.load_state_dict({k: state[k].float() for k in expected}, strict=True)
    return model.eval(), config
