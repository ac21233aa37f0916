"""The official SeqGPT-560M directory -> our Bloom network, tokenizer and special token ids (docs/models/seqgpt.md §2).

Strict: a missing, extra or mis-shaped tensor is an error that names it. Accepted: an fp16
`pytorch_model.bin` (the official file) or `model.safetensors`; keys with or without the
`transformer.` prefix; no `lm_head.weight` when the embeddings are tied (the BLOOM default).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from contracts.domain import WeightsError
from contracts.torch.checkpoints import check_tensors, read_state_dict
from plugins.seqgpt.modeling import Bloom, BloomConfig

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class SpecialTokens:
    eos: int
    pad: int


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise WeightsError(f"{path} is missing; point --weights at the SeqGPT-560M checkpoint directory") from None
    except json.JSONDecodeError as e:
        raise WeightsError(f"{path} is not valid JSON ({e.msg}, line {e.lineno})") from None


def read_config(weights: Path) -> BloomConfig:
    raw = _read_json(weights / "config.json")
    if raw.get("model_type", "bloom") != "bloom":
        raise WeightsError(f"{weights / 'config.json'} describes a {raw['model_type']!r} model, not BLOOM")
    if raw.get("pretraining_tp", 1) > 1 and raw.get("slow_but_exact", False):
        raise WeightsError("config.json asks for slow_but_exact tensor-parallel sums, which this loader does not do")
    try:
        return BloomConfig(
            vocab_size=int(raw["vocab_size"]),
            hidden_size=int(raw.get("hidden_size", raw.get("n_embed"))),
            n_layer=int(raw.get("n_layer", raw.get("num_hidden_layers"))),
            n_head=int(raw.get("n_head", raw.get("num_attention_heads"))),
            layer_norm_epsilon=float(raw.get("layer_norm_epsilon", 1e-5)),
            apply_residual_connection_post_layernorm=bool(raw.get("apply_residual_connection_post_layernorm",
                                                                  False)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
            hidden_dropout=float(raw.get("hidden_dropout", 0.0)),           # used in training only
            attention_dropout=float(raw.get("attention_dropout", 0.0)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsError(f"{weights / 'config.json'} lacks a usable BLOOM field ({e})") from None


def read_special_tokens(weights: Path) -> SpecialTokens:
    """EOS and PAD as `generate` sees them: generation_config.json first, then config.json."""
    merged = _read_json(weights / "config.json")
    if (weights / "generation_config.json").exists():
        merged |= {k: v for k, v in _read_json(weights / "generation_config.json").items() if v is not None}
    eos = merged.get("eos_token_id", 2)
    eos = eos[0] if isinstance(eos, list) else eos
    return SpecialTokens(eos=int(eos), pad=int(merged.get("pad_token_id", 3)))


def load_network(weights: Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Bloom:
    """The network on `device` in `dtype` (the official file is fp16; fp32 upcasts it exactly). Each tensor
    goes to the device as stored and is converted there: half the bytes over PCIe, and the GPU, not the host,
    upcasts (the host took seconds for SeqGPT-560M's 2.2 GB)."""
    config = read_config(weights)
    state = {k.removeprefix("transformer."): v for k, v in read_state_dict(weights, WEIGHT_FILES).items()}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)          # tied: the embedding matrix is the output layer
    with torch.device("meta"):
        network = Bloom(config)
    expected = {k: tuple(v.shape) for k, v in network.state_dict().items()}
    check_tensors(weights, state, expected, "BLOOM configuration")
    network.load_state_dict({k: _placed(v, dtype, device) for k, v in state.items()}, assign=True)
    return network.eval().requires_grad_(False)


def _placed(tensor: torch.Tensor, dtype: torch.dtype, device: str) -> torch.Tensor:
    out = tensor.to(device).to(dtype)
    # Never a parameter over the checkpoint's memory-mapped file (read_state_dict): a copy of its own.
    return out.clone() if out.data_ptr() == tensor.data_ptr() else out


def load_tokenizer(weights: Path):
    """The checkpoint's own fast tokenizer, padding and truncating on the left as the reference does."""
    missing = [name for name in TOKENIZER_FILES if not (weights / name).exists()]
    if missing:
        raise WeightsError(f"{weights}: tokenizer file(s) missing: {', '.join(missing)}")
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(weights), local_files_only=True)
    except Exception as e:                # noqa: BLE001
        raise WeightsError(f"{weights}: the tokenizer could not be loaded ({type(e).__name__}: {e})") from None
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    return tokenizer


def check_checkpoint(weights: Path) -> str:
    """What `load_network` and `load_tokenizer` would refuse, found without building the network in memory:
    the architecture, the tokenizer against the embedding and the special tokens, every tensor and its shape."""
    config = read_config(weights)
    tokenizer = load_tokenizer(weights)
    if len(tokenizer) > config.vocab_size:
        raise WeightsError(f"{weights}: the tokenizer has {len(tokenizer):,} tokens but config.json's vocab_size is "
                           f"{config.vocab_size:,}; tokenizer.json belongs to another model")
    special = read_special_tokens(weights)
    for name, wanted in (("eos", special.eos), ("pad", special.pad)):
        got = getattr(tokenizer, f"{name}_token_id")
        if got != wanted:
            raise WeightsError(f"{weights}: the tokenizer's {name} token is id {got}, config.json says {wanted}")
    state = {k.removeprefix("transformer."): v for k, v in read_state_dict(weights, WEIGHT_FILES).items()}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in Bloom(config).state_dict().items()}
    check_tensors(weights, state, expected, "BLOOM configuration")
    params = sum(state[k].numel() for k in expected)
    return (f"SeqGPT (BLOOM): {config.n_layer} layers, hidden {config.hidden_size}, tokenizer {len(tokenizer):,} "
            f"tokens, {params:,} parameters")
