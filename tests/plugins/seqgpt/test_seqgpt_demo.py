"""Demo checkpoints: the official layout, readable by transformers, deterministic, the real full config."""
import json

import torch

from contracts.model import DEMO_MARKER
from plugins.seqgpt.demo import demo_config, write
from plugins.seqgpt.generation import EncodedPrompt, GenerationSettings, generate
from plugins.seqgpt.loading import load_network, load_tokenizer
from plugins.seqgpt.modeling import Bloom


def test_demo_checkpoint_has_the_official_layout(demo_tiny):
    names = {p.name for p in demo_tiny.iterdir()}
    assert names == {"config.json", "generation_config.json", "pytorch_model.bin", "tokenizer.json",
                     "tokenizer_config.json", "special_tokens_map.json", DEMO_MARKER}
    # the sizes of the official files, which is what transformers 4.28 writes for these contents
    assert (demo_tiny / "tokenizer_config.json").stat().st_size == 286
    assert (demo_tiny / "special_tokens_map.json").stat().st_size == 146
    assert "RANDOM" in (demo_tiny / DEMO_MARKER).read_text()
    state = torch.load(demo_tiny / "pytorch_model.bin", weights_only=True)
    assert all(k.startswith("transformer.") and v.dtype == torch.float16 for k, v in state.items())
    assert "lm_head.weight" not in state


def test_gen_is_one_special_token_after_blooms_four(demo_tiny):
    tokenizer = load_tokenizer(demo_tiny)
    assert [tokenizer.convert_tokens_to_ids(t) for t in ("<unk>", "<s>", "</s>", "<pad>")] == [0, 1, 2, 3]
    gen = tokenizer.convert_tokens_to_ids("[GEN]")
    assert tokenizer("抽取: 地名\n输出: [GEN]")["input_ids"][-1] == gen and gen in tokenizer.all_special_ids


def test_transformers_reads_the_demo_checkpoint_and_generates_what_we_generate(demo_tiny, reference_prompts):
    from transformers import BloomForCausalLM
    hf = BloomForCausalLM.from_pretrained(demo_tiny, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(demo_tiny)
    batch = tokenizer(reference_prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf.generate(**batch, do_sample=False, num_beams=4, max_new_tokens=12)
    expected = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    prompts = [EncodedPrompt(tuple(tokenizer(p)["input_ids"])) for p in reference_prompts]
    tokens = generate(load_network(demo_tiny), prompts, GenerationSettings(num_beams=4, max_new_tokens=12)).tokens
    assert tokenizer.batch_decode(tokens, skip_special_tokens=True) == expected


def test_demo_weights_are_deterministic(demo_tiny, tmp_path):
    again = write(tmp_path / "again", "tiny")
    for name in ("tokenizer.json", "config.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (again / name).read_bytes() == (demo_tiny / name).read_bytes()
    a = torch.load(demo_tiny / "pytorch_model.bin", weights_only=True)
    b = torch.load(again / "pytorch_model.bin", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_full_demo_is_the_real_bloom_560m_architecture(demo_tiny):
    config = demo_config("full", n_tokens=1000)
    assert (config.n_layer, config.hidden_size, config.n_head, config.vocab_size) == (24, 1024, 16, 250880)
    with torch.device("meta"):
        assert sum(p.numel() for p in Bloom(config).parameters()) == 559_214_592     # docs/models/seqgpt.md §2
    tiny = json.loads((demo_tiny / "config.json").read_text())
    assert tiny["model_type"] == "bloom" and tiny["n_layer"] == 2 and tiny["vocab_size"] % 64 == 0
