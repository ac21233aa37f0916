"""The loader on the official layout and its variants; strict errors that name the tensor."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from contracts.domain import WeightsError
from plugins.seqgpt.loading import load_network, load_tokenizer, read_special_tokens

PROMPT = "输入: 杭州欢迎你。\n抽取: 地名\n输出: [GEN]"


@pytest.fixture(scope="module")
def reference_state(hf_checkpoint):
    return load_file(str(hf_checkpoint / "model.safetensors"))          # keys with `transformer.`, no lm_head


def variant(tmp_path, hf_checkpoint, state, as_bin=True, config_changes=None):
    """A checkpoint dir with the reference's config and tokenizer and the given tensors."""
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        shutil.copy(hf_checkpoint / name, tmp_path / name)
    if config_changes:
        config = json.loads((tmp_path / "config.json").read_text()) | config_changes
        (tmp_path / "config.json").write_text(json.dumps(config))
    if as_bin:
        torch.save(state, tmp_path / "pytorch_model.bin")
    else:
        save_file(state, str(tmp_path / "model.safetensors"))
    return tmp_path


def logits(network, tokenizer):
    batch = tokenizer([PROMPT], return_tensors="pt")
    with torch.no_grad():
        return network(batch["input_ids"], batch["attention_mask"], last_only=False)


def hf_logits(path, tokenizer):
    from transformers import BloomForCausalLM
    model = BloomForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(**tokenizer([PROMPT], return_tensors="pt")).logits


def test_official_layout_fp16_bin_without_prefix_loads_like_hugging_face(tmp_path, hf_checkpoint, reference_state,
                                                                           tokenizer):
    state = {k.removeprefix("transformer."): v.half() for k, v in reference_state.items()}
    path = variant(tmp_path, hf_checkpoint, state)
    assert torch.equal(logits(load_network(path), tokenizer), hf_logits(path, tokenizer))


def test_bin_with_prefix_and_a_tied_lm_head_loads_the_same(tmp_path, hf_checkpoint, reference_state, tokenizer):
    state = dict(reference_state, **{"lm_head.weight": reference_state["transformer.word_embeddings.weight"]})
    path = variant(tmp_path, hf_checkpoint, state)
    assert torch.equal(logits(load_network(path), tokenizer), logits(load_network(hf_checkpoint), tokenizer))


def test_safetensors_loads_like_hugging_face(hf_checkpoint, tokenizer):
    assert torch.equal(logits(load_network(hf_checkpoint), tokenizer), hf_logits(hf_checkpoint, tokenizer))


def test_an_untied_lm_head_is_used_when_the_config_says_so(tmp_path, hf_checkpoint, reference_state, tokenizer):
    own_head = torch.randn_like(reference_state["transformer.word_embeddings.weight"])
    path = variant(tmp_path, hf_checkpoint, dict(reference_state, **{"lm_head.weight": own_head}),
                   config_changes={"tie_word_embeddings": False})
    network = load_network(path)
    assert torch.equal(network.lm_head.weight, own_head)
    assert torch.equal(logits(network, tokenizer), hf_logits(path, tokenizer))


def test_an_untied_config_without_lm_head_is_an_error(tmp_path, hf_checkpoint, reference_state):
    path = variant(tmp_path, hf_checkpoint, reference_state, config_changes={"tie_word_embeddings": False})
    with pytest.raises(WeightsError, match="lm_head.weight"):
        load_network(path)


def test_a_missing_tensor_is_an_error_naming_it(tmp_path, hf_checkpoint, reference_state):
    state = {k: v for k, v in reference_state.items() if k != "transformer.h.1.mlp.dense_4h_to_h.bias"}
    with pytest.raises(WeightsError, match=r"missing.*h\.1\.mlp\.dense_4h_to_h\.bias"):
        load_network(variant(tmp_path, hf_checkpoint, state, as_bin=False))


def test_a_misshaped_tensor_is_an_error_naming_it_and_both_shapes(tmp_path, hf_checkpoint, reference_state):
    state = dict(reference_state, **{"transformer.h.0.self_attention.dense.weight": torch.zeros(128, 64)})
    with pytest.raises(WeightsError, match=r"h\.0\.self_attention\.dense\.weight has shape \(128, 64\).*\(128, 128\)"):
        load_network(variant(tmp_path, hf_checkpoint, state))


def test_an_unexpected_tensor_is_an_error(tmp_path, hf_checkpoint, reference_state):
    state = dict(reference_state, **{"transformer.h.2.input_layernorm.weight": torch.ones(128)})
    with pytest.raises(WeightsError, match=r"h\.2\.input_layernorm\.weight"):
        load_network(variant(tmp_path, hf_checkpoint, state))


def test_missing_files_are_errors_that_say_which(tmp_path, hf_checkpoint, reference_state):
    path = variant(tmp_path, hf_checkpoint, reference_state)
    (path / "pytorch_model.bin").unlink()
    with pytest.raises(WeightsError, match="pytorch_model.bin"):
        load_network(path)
    (path / "pytorch_model.bin").write_bytes(b"not a pickle")
    with pytest.raises(WeightsError, match="could not be read"):
        load_network(path)
    (path / "tokenizer.json").unlink()
    with pytest.raises(WeightsError, match="tokenizer.json"):
        load_tokenizer(path)
    (path / "config.json").unlink()
    with pytest.raises(WeightsError, match="config.json"):
        load_network(path)


def test_special_tokens_come_from_the_generation_config(hf_checkpoint):
    assert read_special_tokens(hf_checkpoint).eos == 2 and read_special_tokens(hf_checkpoint).pad == 3


def test_tokenizer_pads_and_truncates_on_the_left_and_gen_is_one_special_token(tokenizer):
    assert tokenizer.padding_side == tokenizer.truncation_side == "left"
    ids = tokenizer(PROMPT)["input_ids"]
    assert ids[-1] == tokenizer.convert_tokens_to_ids("[GEN]")
    assert tokenizer.decode(ids, skip_special_tokens=True) == PROMPT.removesuffix("[GEN]")


def test_loading_in_the_files_dtype_gives_parameters_of_their_own(hf_checkpoint):
    # The checkpoint is read memory-mapped; a parameter must never sit on that mapping.
    from plugins.seqgpt.loading import _placed
    stored = torch.arange(6, dtype=torch.float16)
    placed = _placed(stored, torch.float16, "cpu")
    assert torch.equal(placed, stored) and placed.data_ptr() != stored.data_ptr()
    assert _placed(stored, torch.float32, "cpu").dtype == torch.float32
    half = load_network(hf_checkpoint, torch.float16)
    full = load_network(hf_checkpoint)
    assert all(torch.equal(a, b.half()) for a, b in zip(half.state_dict().values(), full.state_dict().values()))
