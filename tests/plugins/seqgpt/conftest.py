"""Tiny SeqGPT checkpoints built by the tests: one written by Hugging Face's own BloomForCausalLM (the
reference we compare against) and one by our demo writer. Session-scoped: built once per run."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

# Flat enough logits that beams, the repetition penalty and its PAD rule change outputs; EOS and PAD
# rows scaled up so that some beams end early, some run to the limit, and PAD is sometimes a candidate.
EMBEDDING_STD, EOS_SCALE, PAD_SCALE = 0.05, 3.0, 3.0

TEXTS = {
    "ner_zh": "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。",
    "melbourne": "MELBOURNE 1996-12-06",
    "bank": "I want my checking balance.",
    "pair": "李老板卖鱼，卖了三十框鱼\t李老板赚翻了",
    "moon": "The Moon's orbit around Earth has",
}


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    """Models this small gain nothing from intra-op threads, and on a busy 2-core machine the second
    thread's spin-waits made single LayerNorm calls take ~10 ms. Restored after each module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def reference_prompts() -> list[str]:
    """Prompt strings of different lengths, so a batch of them is left-padded."""
    from plugins.seqgpt.prompting import prompt_text
    return [prompt_text(TEXTS["ner_zh"], "ext", ["人物", "地理位置", "组织机构"]),
            prompt_text(TEXTS["melbourne"], "ext", ["LOC", "PER"]),
            prompt_text("我", "cls", ["a", "b"]),
            prompt_text(TEXTS["moon"], "cls", ["pos", "neg"]),
            prompt_text(TEXTS["pair"], "cls", ["entailment", "contradiction"])]


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory) -> Path:
    """A 2-layer BLOOM saved by transformers (model.safetensors, fp32) with our demo tokenizer.

    Every parameter is random (LayerNorms and biases too, so a wrongly mapped tensor shows), with a
    spread large enough that outputs depend on the prompt, and the EOS row scaled so that some
    beams end early and some run to the length limit."""
    from transformers import BloomConfig, BloomForCausalLM

    from plugins.seqgpt.demo import write_tokenizer
    out = tmp_path_factory.mktemp("seqgpt") / "hf-tiny"
    out.mkdir()
    n_tokens = write_tokenizer(out)
    config = BloomConfig(vocab_size=-(-n_tokens // 64) * 64, hidden_size=128, n_layer=2, n_head=16,
                         bos_token_id=1, eos_token_id=2, pad_token_id=3, unk_token_id=0)
    torch.manual_seed(0)
    model = BloomForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
            elif name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
        embeddings = model.transformer.word_embeddings.weight
        embeddings.mul_(EMBEDDING_STD / 0.3)
        embeddings[2] *= EOS_SCALE
        embeddings[3] *= PAD_SCALE
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def hf_model(hf_checkpoint):
    from transformers import BloomForCausalLM
    return BloomForCausalLM.from_pretrained(hf_checkpoint, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tokenizer(hf_checkpoint):
    from plugins.seqgpt.loading import load_tokenizer
    return load_tokenizer(hf_checkpoint)


@pytest.fixture(scope="session")
def network(hf_checkpoint):
    from plugins.seqgpt.loading import load_network
    return load_network(hf_checkpoint)


@pytest.fixture
def loaded(hf_checkpoint):
    """A fresh LoadedSeqGPT (function scope: tests may turn its knobs)."""
    from plugins.seqgpt.family import SeqGPT
    return SeqGPT().load(hf_checkpoint)


@pytest.fixture(scope="session")
def demo_tiny(tmp_path_factory) -> Path:
    from plugins.seqgpt.demo import write
    return write(tmp_path_factory.mktemp("seqgpt") / "seqgpt-tiny", "tiny")


@pytest.fixture(scope="session")
def hf_generate(hf_model, tokenizer):
    """The reference call of inference.py: one left-padded batch, decoded without special tokens."""
    def run(prompts: list[str], **settings) -> list[str]:
        batch = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True, max_length=1024)
        with torch.no_grad():
            out = hf_model.generate(**batch, do_sample=False, **settings)
        return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:].tolist(), skip_special_tokens=True)
    return run
