import sys, time, shutil
from pathlib import Path
import torch
sys.path.insert(0, ".")
from transformers import BloomForCausalLM
from plugins.seqgpt import demo
from plugins.seqgpt.family import SeqGPT
from plugins.seqgpt.generation import GenerationSettings, generate
from plugins.seqgpt.pipeline import encode
from plugins.seqgpt.prompting import prompts_for
from workstation.domain import Document

torch.backends.cuda.matmul.allow_tf32 = False
docs = [
    Document("a", "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", task="ext", labels=["人物", "地理位置", "组织机构"]),
    Document("b", "童装红蜻蜓团体温州儿童用品有限公司是红蜻蜓团体旗下全资子公司，创立于2003年。", task="ext",
             labels=["饰演", "祖籍", "毕业院校", "创始人", "首都", "代言人", "总部地点"]),
    Document("c", "I want my checking balance.", task="cls", labels=["CheckBalance", "TransferMoney"]),
    Document("d", "李老板卖鱼，卖了三十框鱼\t李老板赚翻了", task="nli", labels=["entailment", "contradiction", "neutral"]),
    Document("e", "Apple released a new iPhone in California on Tuesday.", task="ext",
             labels=[f"L{i}" for i in range(13)]),
    Document("f", "7月28日，天津泰达在德比战中以0-1负于天津天海。", task="ext", labels=["时间", "胜者", "败者", "赛事名称"]),
]
root = Path("/tmp/seqgpt")
t = time.time(); full = demo.write(root / "full", "full"); print("write full", round(time.time() - t, 1), flush=True)
# a second full-size model with a wider init, so outputs depend on the input
wide = root / "wide"; wide.mkdir()
for f in full.iterdir():
    if f.name != "pytorch_model.bin":
        shutil.copy(f, wide / f.name)
cfg = demo.demo_config("full", 0)
from plugins.seqgpt.loading import load_tokenizer
n_tokens = len(load_tokenizer(full))
torch.save(demo.random_state_dict(cfg, 0.06, n_tokens, seed=1), wide / "pytorch_model.bin")

for path in (full, wide):
    model = SeqGPT().load(path, "cuda", "fp32")
    tok = model.tokenizer
    hf = BloomForCausalLM.from_pretrained(path, dtype=torch.float32).cuda().eval()
    for kw in (dict(num_beams=4, max_new_tokens=48, repetition_penalty=1.0),
               dict(num_beams=4, max_new_tokens=48, repetition_penalty=2.0),
               dict(num_beams=1, max_new_tokens=48, repetition_penalty=2.0)):
        same_tok = same_raw = 0
        t = time.time(); ours = [r.raw for r in model.extract(docs, batch_size=8, **kw)]; t_ours = time.time() - t
        t_hf = 0.0; lens = []
        for doc, raw in zip(docs, ours):
            texts = [p.text for p in prompts_for(doc)]
            b = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=1024).to("cuda")
            t = time.time()
            with torch.no_grad():
                out = hf.generate(**b, do_sample=False, **kw)
            t_hf += time.time() - t
            rows = out[:, b["input_ids"].shape[1]:].tolist()
            rows = [r[:r.index(2)] if 2 in r else [x for x in r] for r in rows]
            ref = tok.batch_decode(out[:, b["input_ids"].shape[1]:].tolist(), skip_special_tokens=True)
            mine = generate(model.network, encode(tok, prompts_for(doc))[0], GenerationSettings(
                num_beams=kw["num_beams"], max_new_tokens=48, repetition_penalty=kw["repetition_penalty"])).tokens
            same_tok += rows == mine
            same_raw += ref == raw
            lens += [len(r) for r in rows]
        print(path.name, kw, f"docs equal: tokens {same_tok}/6 raw {same_raw}/6", "lens", lens,
              f"ours {t_ours:.2f}s hf {t_hf:.2f}s", "distinct raws", len({tuple(r) for r in ours}), flush=True)
    base = [r.raw for r in model.extract(docs, batch_size=8, num_beams=4, max_new_tokens=48)]
    for dtype, attn in (("fp16", "eager"), ("fp16", "sdpa"), ("bf16", "sdpa"), ("fp32", "sdpa")):
        model.set_dtype(dtype); model.knobs.attention = attn
        got = [r.raw for r in model.extract(docs, batch_size=8, num_beams=4, max_new_tokens=48)]
        print(path.name, dtype, attn, "chunks equal to fp32 eager:",
              sum(a == b for x, y in zip(got, base) for a, b in zip(x, y)), "/", sum(len(x) for x in base), flush=True)
    model.set_dtype("fp32"); model.knobs.attention = "eager"
    del model, hf; torch.cuda.empty_cache()
print("peak GiB", torch.cuda.max_memory_allocated() / 2**30)
