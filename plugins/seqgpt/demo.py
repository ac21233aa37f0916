"""Random-weight demo checkpoints in the official SeqGPT-560M layout (docs/models/seqgpt.md §2 and §5).

"full" is the real bloom-560m architecture (24 layers, hidden 1024, 16 heads, vocab 250,880) stored as
an fp16 `pytorch_model.bin` like the official file; "tiny" is 2 layers of width 128 for tests and
CPU demos. No BLOOM tokenizer ships on PyPI, so both get a byte-level BPE trained here with the
`tokenizers` library on the small corpus below, with BLOOM's pre-tokenizer and special ids
(<unk>=0, <s>=1, </s>=2, <pad>=3) and `[GEN]` as an added special token. Everything is seeded:
the same call writes the same files.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from contracts.model import DEMO_MARKER, DEMO_NOTICE
from plugins.seqgpt.modeling import Bloom, BloomConfig
from plugins.seqgpt.prompting import GEN_TOKEN

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]        # ids 0-3, as in BLOOM
BLOOM_SPLIT = " ?[^(\\s|[.,!?…。，、।۔،])]+"              # BLOOM's pre-tokenizer regex (docs/models/seqgpt.md §1.3)

SIZES = {
    "full": dict(hidden_size=1024, n_layer=24, n_head=16, vocab_size=250880, std=0.02),
    # tiny: a larger init spread, else every prompt yields the same tokens (docs/models/seqgpt.md §5 "gotcha")
    "tiny": dict(hidden_size=128, n_layer=2, n_head=16, vocab_size=None, std=0.3),
}

# Prompt-shaped Chinese and English lines so the merges cover the template, labels and answers.
CORPUS = [
    "输入: 杭州欢迎你。\n抽取: 地名\n输出: 地名: 杭州",
    "输入: MELBOURNE 1996-12-06\n抽取: LOC，PER，ORG，MISC\n输出: LOC: MELBOURNE\nPER: None",
    "输入: I want my checking balance.\n分类: CheckBalance，TransferMoney\n输出: CheckBalance",
    "输入: The Moon's orbit around Earth has\n分类: pos，neg\n输出: pos",
    "输入: 李老板卖鱼，卖了三十框鱼\t李老板赚翻了\n分类: entailment，contradiction，neutral\n输出: neutral",
    "输入: The smooth Borealis basin in the Northern Hemisphere covers 40%\n抽取: 百分比，方向\n输出: 百分比: 40%\n方向: Northern",
    "输入: 北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。\n抽取: 人物，地理位置，组织机构\n输出: 人物: None\n地理位置: 西班牙，巴塞罗那\n组织机构: 北大西洋议会",
    "输入: 7月28日，天津泰达在德比战中以0-1负于天津天海。\n抽取: 时间，胜者，败者，赛事名称\n输出: 时间: 7月28日\n胜者: 天津天海\n败者: 天津泰达\n赛事名称: 德比战",
    "输入: 这家餐厅的菜很好吃，服务也很周到。\n分类: 正面，负面\n输出: 正面",
    "输入: 快递太慢了，包装也破了。\n分类: 正面，负面\n输出: 负面",
    "输入: 张三于2019年加入阿里巴巴，担任工程师。\n抽取: 人物，公司，时间，职位\n输出: 人物: 张三\n公司: 阿里巴巴\n时间: 2019年\n职位: 工程师",
    "输入: 上海和北京是中国最大的两座城市。\n抽取: 城市，国家\n输出: 城市: 上海，北京\n国家: 中国",
    "输入: Apple released a new iPhone in California on Tuesday.\n抽取: ORG，LOC，PRODUCT，DATE\n输出: ORG: Apple\nLOC: California\nPRODUCT: iPhone\nDATE: Tuesday",
    "输入: Barack Obama was born in Hawaii.\n抽取: PER，LOC\n输出: PER: Barack Obama\nLOC: Hawaii",
    "输入: The central bank raised interest rates by 0.5 percent.\n分类: economy，sports，politics\n输出: economy",
    "输入: The team won the championship after a long season.\n分类: economy，sports，politics\n输出: sports",
    "输入: 明天上午十点在会议室开会。\n抽取: 时间，地点，事件\n输出: 时间: 明天上午十点\n地点: 会议室\n事件: 开会",
    "输入: 他的手机昨天在地铁上丢了。\n抽取: 物品，地点，时间\n输出: 物品: 手机\n地点: 地铁上\n时间: 昨天",
    "输入: 我想把五百元转到我妈妈的账户。\n分类: 查询余额，转账，挂失\n输出: 转账",
    "输入: 红蜻蜓集团旗下的温州儿童用品有限公司创立于2003年。\n抽取: 创始人，总部地点，成立时间\n输出: 创始人: None\n总部地点: 温州\n成立时间: 2003年",
    "输入: Please transfer 200 dollars to my savings account.\n分类: CheckBalance，TransferMoney\n输出: TransferMoney",
    "输入: The flight from London to Paris was delayed by two hours.\n抽取: origin，destination，duration\n输出: origin: London\ndestination: Paris\nduration: two hours",
    "输入: 今天天气很好，我们去公园散步吧。\n分类: 天气，运动，购物\n输出: 天气",
    "输入: 小明在北京大学读计算机专业。\n抽取: 人物，学校，专业\n输出: 人物: 小明\n学校: 北京大学\n专业: 计算机",
    "输入: 该药物可以缓解头痛和发热等症状。\n抽取: 药物，症状\n输出: 药物: None\n症状: 头痛，发热",
    "输入: Microsoft and OpenAI announced a partnership in Seattle.\n抽取: ORG，LOC\n输出: ORG: Microsoft，OpenAI\nLOC: Seattle",
    "输入: 电影的剧情太拖沓了，演员表演却很出色。\n分类: 正面，负面，中性\n输出: 中性",
    "输入: 长江是亚洲最长的河流。\n抽取: 河流，大洲\n输出: 河流: 长江\n大洲: 亚洲",
    "输入: The price of the laptop is 1,299 dollars.\n抽取: product，price\n输出: product: laptop\nprice: 1,299 dollars",
    "输入: 王经理下周三去深圳出差。\n抽取: 人物，职位，时间，地点\n输出: 人物: 王经理\n职位: 经理\n时间: 下周三\n地点: 深圳",
]


def build_tokenizer(vocab_size: int = 2000):
    """A byte-level BPE with BLOOM's pre-tokenizer and special ids, plus [GEN] (a `tokenizers.Tokenizer`)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(BLOOM_SPLIT), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.add_special_tokens([AddedToken(GEN_TOKEN, special=True, normalized=False)])
    return tokenizer


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_tokenizer(out_dir: Path) -> int:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json as the official checkpoint has
    them (its 286-byte and 146-byte files are what transformers 4.28 wrote for these contents).
    Returns the number of tokens."""
    tokenizer = build_tokenizer()
    tokenizer.save(str(out_dir / "tokenizer.json"))
    named = dict(zip(("unk_token", "bos_token", "eos_token", "pad_token"), SPECIAL_TOKENS))
    _write_json(out_dir / "tokenizer_config.json", {
        "add_prefix_space": False, "bos_token": named["bos_token"], "clean_up_tokenization_spaces": False,
        "eos_token": named["eos_token"], "model_max_length": 1000000000000000019884624838656,
        "pad_token": named["pad_token"], "padding_side": "left", "tokenizer_class": "BloomTokenizer",
        "unk_token": named["unk_token"]})
    _write_json(out_dir / "special_tokens_map.json", {"additional_special_tokens": [GEN_TOKEN], **dict(sorted(
        named.items()))})
    return tokenizer.get_vocab_size(with_added_tokens=True)


def demo_config(size: str, n_tokens: int) -> BloomConfig:
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; use 'full' or 'tiny'")
    spec = SIZES[size]
    vocab = spec["vocab_size"] or -(-n_tokens // 64) * 64          # tiny: round up like 250,680 -> 250,880
    return BloomConfig(vocab_size=vocab, hidden_size=spec["hidden_size"], n_layer=spec["n_layer"],
                       n_head=spec["n_head"])


def random_state_dict(config: BloomConfig, std: float, n_tokens: int, seed: int) -> dict[str, torch.Tensor]:
    """BLOOM's init (normal weights, zero biases, unit LayerNorms), fp16, keys with `transformer.`.

    Embedding rows past the demo tokenizer's vocabulary (they decode to nothing) are scaled down ten
    times, so the random model mostly emits tokens that show up as text."""
    generator = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in Bloom(config).state_dict().items()}
    state = {}
    for key, shape in shapes.items():
        if key.endswith("layernorm.weight") or key == "ln_f.weight":
            tensor = torch.ones(shape)
        elif key.endswith("bias"):
            tensor = torch.zeros(shape)
        else:
            tensor = torch.empty(shape).normal_(0.0, std, generator=generator)
        if key == "word_embeddings.weight":
            tensor[n_tokens:] *= 0.1
        state[f"transformer.{key}"] = tensor.half()
    return state


def hf_config(config: BloomConfig) -> dict:
    """config.json in the shape of bloom-560m's (legacy Megatron keys included; HF ignores them)."""
    c = asdict(config)
    return {
        "apply_residual_connection_post_layernorm": c["apply_residual_connection_post_layernorm"],
        "architectures": ["BloomForCausalLM"], "attention_dropout": 0.0, "attention_softmax_in_fp32": True,
        "bias_dropout_fusion": True, "bos_token_id": 1, "eos_token_id": 2, "hidden_dropout": 0.0,
        "hidden_size": c["hidden_size"], "initializer_range": 0.02, "layer_norm_epsilon": c["layer_norm_epsilon"],
        "masked_softmax_fusion": True, "model_type": "bloom", "n_head": c["n_head"], "n_inner": None,
        "n_layer": c["n_layer"], "offset_alibi": 100, "pad_token_id": 3, "pretraining_tp": 1,
        "seq_length": 2048, "skip_bias_add": True, "skip_bias_add_qkv": False, "slow_but_exact": False,
        "tie_word_embeddings": c["tie_word_embeddings"], "torch_dtype": "float16", "unk_token_id": 0,
        "use_cache": True, "vocab_size": c["vocab_size"],
    }


def write(out_dir: Path, size: str = "full", seed: int = 0) -> Path:
    """Write a demo checkpoint into out_dir (created if needed) and return it."""
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; use 'full' or 'tiny'")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_tokens = write_tokenizer(out_dir)
    config = demo_config(size, n_tokens)
    _write_json(out_dir / "config.json", hf_config(config))
    _write_json(out_dir / "generation_config.json",
                {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3})
    torch.save(random_state_dict(config, SIZES[size]["std"], n_tokens, seed), out_dir / "pytorch_model.bin")
    (out_dir / DEMO_MARKER).write_text(DEMO_NOTICE + f"\nSeqGPT-560M architecture, size {size!r}, seed {seed}.\n",
                                       encoding="utf-8")
    return out_dir
