"""Random-weight demo checkpoints of the real RexUniNLU architecture, in the official layout.

Outputs of these are meaningless; they exist so the workstation, the tests and the benchmarks run
where no real weights are configured. The directory carries RANDOM_DEMO_WEIGHTS.txt.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from contracts.model import DEMO_MARKER, DEMO_NOTICE
from plugins.rexuninlu.modeling import RexConfig, RexModel

SIZES = {
    "full": RexConfig(),                                   # 98.2 M parameters, the released config
    "tiny": RexConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2),
}
TOKENIZER_CONFIG = {"do_lower_case": True, "do_basic_tokenize": True, "never_split": None,
                    "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                    "mask_token": "[MASK]", "tokenize_chinese_chars": True, "strip_accents": None,
                    "tokenizer_class": "BertTokenizer"}
SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                  "mask_token": "[MASK]"}
# Share of read span logits > 0 on sample prompts, per size, so demo outputs stay readable
# (tuned by eye: a few NER spans, not thousands of relation pairs).
TARGET_POSITIVE_SHARE = {"full": 0.3, "tiny": 0.1}


def vocabulary(size: int = 12800) -> list[str]:
    """A Chinese-BERT-like WordPiece vocabulary: specials, ASCII, CJK punctuation, then CJK characters."""
    words = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"] + [f"[unused{i}]" for i in range(1, 100)]
    ascii_chars = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    words += ascii_chars + ["##" + c for c in ascii_chars if c.isalnum()]
    words += list("，。、：；？！“”‘’（）《》【】—…·￥％")
    cjk = 0x4E00
    while len(words) < size:
        words.append(chr(cjk))
        cjk += 1
    return words[:size]


def randomize(model: RexModel, seed: int) -> None:
    """Large enough weights that every path changes the output (init std scaled by fan-in)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("rotary_emb.freqs"):
                continue
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(0.2 * math.sqrt(64 / fan_in) * torch.randn(p.shape, generator=g))


def sparsify_head(model: RexModel, out_dir: Path, share: float) -> None:
    """Shift all span logits down by a^2 through the slowest RoPE pair (docs/models/rexuninlu.md §6.2).

    `a` is chosen on real prompts (the NER and relation presets, tokenized with the vocabulary just
    written) so that about `share` of the logits decoding reads are positive: random weights then
    give a readable number of spans instead of none or tens of thousands.
    """
    from contracts.model import Knobs
    from plugins.rexuninlu.loading import load_tokenizer
    from plugins.rexuninlu.pipeline import document_run
    from plugins.rexuninlu.prompting import Prompter, Vocabulary
    from plugins.rexuninlu.scoring import WindowScorer, isolation_mask
    samples = [("北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。中央电视台和中国电视剧制作中心摄制了红楼梦。",
                {"人物": None, "地理位置": None, "组织机构": None}),
               ("7月28日，天津泰达在德比战中以0-1负于天津天海。", {"胜负(事件触发词)": {"时间": None, "败者": None}})]
    tok = load_tokenizer(out_dir)
    prompter = Prompter(Vocabulary.of(tok))
    windows = [document_run(prompter, t, sch).send(None)[0] for t, sch in samples]
    p = WindowScorer(model, tok.pad_token_id, prompter.type_id, "cpu", Knobs()).pack([[w] for w in windows])
    with torch.no_grad():
        for head in (model.ffnq, model.ffnk):
            head.weight[-2:] = 0
            head.bias[-2:] = 0
        logits = model(p.ids, p.positions, isolation_mask(p), p.valid)
        read = (p.is_text[:, :, None] | p.is_text[:, None, :]) & p.valid[:, :, None] & p.valid[:, None, :]
        a = math.sqrt(max(torch.quantile(logits[read], 1 - share).item(), 0.0) + 1e-3)
        model.ffnq.bias[-2] = a
        model.ffnk.bias[-2] = -a


def write(out_dir: Path, size: str = "full", seed: int = 0, share: float | None = None) -> Path:
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose from {', '.join(SIZES)}")
    cfg = SIZES[size]
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = RexModel(cfg)
    randomize(model, seed)
    (out_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, ensure_ascii=False), "utf-8")
    (out_dir / "vocab.txt").write_text("\n".join(vocabulary(cfg.vocab_size)) + "\n", "utf-8")
    (out_dir / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2), "utf-8")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(SPECIAL_TOKENS), "utf-8")
    sparsify_head(model, out_dir, TARGET_POSITIVE_SHARE[size] if share is None else share)
    torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, out_dir / "pytorch_model.bin")
    params = sum(p.numel() for p in model.parameters())
    (out_dir / DEMO_MARKER).write_text(
        f"{DEMO_NOTICE}\nRexUniNLU architecture, size {size}, {params:,} parameters, seed {seed}.\n", "utf-8")
    return out_dir
