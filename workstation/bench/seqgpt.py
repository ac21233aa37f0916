"""SeqGPT benchmarks: generation speed against Hugging Face `generate` on the same weights."""
from __future__ import annotations

import random
import time
from pathlib import Path

import torch

from workstation import engine
from workstation.bench.common import SENTENCES, demo_weights, environment, sync

def seqgpt_prompts(tokenizer, n: int, target_tokens: int = 256, seed: int = 0) -> list:
    """n extraction prompts of the reference format, each about `target_tokens` long."""
    from plugins.seqgpt.generation import EncodedPrompt
    from plugins.seqgpt.prompting import prompt_text
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        text = ""
        while len(tokenizer(prompt_text(text, "抽取", ["人物", "地点", "组织"]))["input_ids"]) < target_tokens:
            text += rng.choice(SENTENCES)
        ids = tokenizer(prompt_text(text, "抽取", ["人物", "地点", "组织"]))["input_ids"]
        prompts.append(EncodedPrompt(tuple(ids[-target_tokens:])))
    return prompts


def seqgpt_generate(args) -> dict:
    """New tokens/s: our generation vs Hugging Face `generate` on the same weights, same run."""
    from transformers import BloomForCausalLM
    from plugins.seqgpt.generation import Batch, GenerationSettings, generate
    device = engine.resolve_device(args.device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    weights = Path(args.weights) if args.weights else demo_weights(args, "seqgpt")
    ours = engine.load_model("seqgpt", weights, device, "fp32")
    ours.set_dtype(args.dtype)
    hf = BloomForCausalLM.from_pretrained(str(weights), dtype=dtype).to(device).eval()
    tok, special = ours.tokenizer, ours.special
    rows = []
    for label, batch, beams in [("greedy, batch 1", 1, 1), (f"greedy, batch {args.big_batch}", args.big_batch, 1),
                                ("4-beam, batch 8", 8, 4)]:
        prompts = seqgpt_prompts(tok, batch)
        s = GenerationSettings(num_beams=beams, max_new_tokens=args.new_tokens,
                               eos_token_id=special.eos, pad_token_id=special.pad)
        b = Batch.left_padded(prompts, special.pad, device)

        def run_hf():
            out = hf.generate(input_ids=b.input_ids, attention_mask=b.attention_mask, num_beams=beams,
                              do_sample=False, max_new_tokens=args.new_tokens, pad_token_id=special.pad,
                              eos_token_id=special.eos)
            return [[t for t in row.tolist() if t != special.pad][:] for row in out[:, b.input_ids.shape[1]:]]

        results = {}
        for name, fn in [("ours " + ours.knobs.attention, lambda: generate(ours.network, prompts, s, ours.knobs.attention).tokens),
                         ("transformers generate", run_hf)]:
            with torch.inference_mode():
                fn()                                              # warm-up
                sync(device)
                start = time.perf_counter()
                tokens = fn()
                sync(device)
            seconds = time.perf_counter() - start
            tokens = [t[:t.index(special.eos)] if special.eos in t else t for t in tokens]
            new = sum(len(t) for t in tokens)
            results[name] = tokens
            rows.append({"setting": label, "implementation": name, "seconds": round(seconds, 3),
                         "new_tokens": new, "new_tokens_per_s": round(new / seconds, 1)})
        a, h = results.values()
        same = sum(x == y for x, y in zip(a, h))
        rows[-2]["same_tokens_as_generate"] = f"{same}/{len(a)}"
        rows[-1]["same_tokens_as_generate"] = "-"
    return {"benchmark": "seqgpt-generate", "env": environment(device), "weights": str(weights),
            "dtype": args.dtype, "prompt_tokens": 256, "max_new_tokens": args.new_tokens, "rows": rows}


BENCHMARKS = {"seqgpt-generate": seqgpt_generate}
