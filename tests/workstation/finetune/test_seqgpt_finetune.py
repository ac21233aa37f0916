"""Fine-tuning SeqGPT: answers in the reference output format, answer-only loss, the CLI end to end (tiny, CPU)."""
import json

import pytest
import torch
import torch.nn.functional as F

from contracts.domain import Document, InputError
from plugins.seqgpt.family import SeqGPT
from plugins.seqgpt.generation import EncodedPrompt, GenerationSettings, generate
from plugins.seqgpt.prompting import prompt_text
from plugins.seqgpt.training import IGNORE, answer_text, batch_loss, collate
from tests.workstation.finetune.conftest import with_dropout
from workstation.finetune import trainer as finetune


def ext(text, labels, spans):
    return {"text": text, "task": "ext", "labels": labels,
            "output": [[{"type": t, "span": text[a:b], "offset": [a, b]}] for t, a, b in spans]}


def cls(text, labels, chosen):
    return {"text": text, "task": "cls", "labels": labels,
            "output": [[{"type": c, "span": c, "offset": None}] for c in chosen]}


LINES = [ext("张三在北京工作", ["人物", "地点"], [("人物", 0, 2), ("地点", 3, 5)]),
         ext("李四去了上海和广州", ["人物", "地点"], [("地点", 7, 9), ("人物", 0, 2), ("地点", 4, 6)]),
         cls("这家餐厅的菜很好吃", ["正面", "负面"], ["正面"]),
         cls("快递太慢了", ["正面", "负面"], ["负面"])]


def write_jsonl(path, lines):
    path.write_text("".join(json.dumps({"id": str(i), **x}, ensure_ascii=False) + "\n" for i, x in enumerate(lines)),
                    "utf-8")
    return path


def doc(line, n=1):
    return Document(str(n), line["text"], task=line["task"], labels=line["labels"], line=n)


@pytest.fixture
def seqgpt(seqgpt_tiny):
    torch.set_num_threads(1)                   # a model this small only waits on a second thread
    return SeqGPT().load(seqgpt_tiny)          # fresh: training changes the weights


def all_examples(model, lines=LINES):
    training = model.training()
    return [ex for n, line in enumerate(lines, 1) for ex in training.examples(doc(line, n), line["output"])]


def test_answers_follow_the_output_format_the_parser_reads():
    two_places = LINES[1]
    assert answer_text("ext", ["人物", "地点"], two_places["output"]) == "人物: 李四\n地点: 上海，广州"   # text order
    assert answer_text("ext", ["时间", "人物"], two_places["output"]) == "时间: None\n人物: 李四"
    assert answer_text("cls", ["正面", "负面"], LINES[2]["output"]) == "正面"
    assert answer_text("cls", ["a", "b", "c"], [[{"type": t, "span": t, "offset": None}] for t in "ca"]) == "a，c"
    assert answer_text("cls", ["a", "b"], []) == "None"


def test_examples_are_the_inference_prompts_then_the_answer_and_eos(seqgpt):
    tok = seqgpt.tokenizer
    labels = ["人物", "地点", "组织", "时间", "职位", "公司", "学校"]                 # 7 labels: 2 chunks, 4 + 3
    line = ext("张三于2019年加入阿里巴巴", labels, [("人物", 0, 2), ("公司", 10, 14)])
    first, second = seqgpt.training().examples(doc(line), line["output"])
    assert list(first.prompt) == tok(prompt_text(line["text"], "ext", labels[:4]))["input_ids"]
    assert list(second.prompt) == tok(prompt_text(line["text"], "ext", labels[4:]))["input_ids"]
    assert first.answer_text == "人物: 张三\n地点: None\n组织: None\n时间: None"
    assert second.answer_text == "职位: None\n公司: 阿里巴巴\n学校: None"
    assert first.answer[-1] == second.answer[-1] == seqgpt.special.eos                # the model learns to stop
    assert tok.decode(first.answer, skip_special_tokens=True) == first.answer_text


def test_only_the_answer_tokens_are_scored(seqgpt):
    examples = all_examples(seqgpt)
    batch = collate(examples, seqgpt.special.pad, "cpu")
    for row, ex in enumerate(examples):
        scored = batch.labels[row] != IGNORE
        assert batch.labels[row][scored].tolist() == list(ex.answer)                  # the answer, EOS included
        assert scored.nonzero().squeeze(1).tolist() == list(range(batch.labels.shape[1] - len(ex.answer),
                                                                   batch.labels.shape[1]))
    # Other labels in the prompt condition the answer but are never targets themselves.
    other = all_examples(seqgpt, [{**LINES[2], "labels": ["好评", "差评"], "output": [[{"type": "好评", "span": "好评",
                                                                                      "offset": None}]]}])
    assert other[0].prompt != examples[2].prompt
    assert collate(other, 3, "cpu").labels[0][-len(other[0].answer):].tolist() == list(other[0].answer)
    # The loss is the cross-entropy of exactly those tokens, each predicted from the position before it.
    net = seqgpt.network
    for ex in examples:
        ids = torch.tensor([ex.prompt + ex.answer])
        with torch.no_grad():
            logits = net(ids, torch.ones_like(ids), last_only=False)[0]
            manual = F.cross_entropy(logits[len(ex.prompt) - 1:-1], torch.tensor(ex.answer))
            assert torch.allclose(batch_loss(net, [ex], seqgpt.special.pad, "eager"), manual, atol=1e-6)


def test_a_padded_batch_costs_the_mean_of_its_examples_alone(seqgpt):
    examples = all_examples(seqgpt)
    assert len({len(ex.prompt) + len(ex.answer) for ex in examples}) > 1                 # so rows are padded
    with torch.no_grad():
        for attention in ("eager", "sdpa"):
            together = batch_loss(seqgpt.network, examples, seqgpt.special.pad, attention)
            alone = torch.stack([batch_loss(seqgpt.network, [ex], seqgpt.special.pad, attention) for ex in examples])
            assert torch.allclose(together, alone.mean(), atol=1e-5, rtol=1e-5)


def test_loss_decreases_over_a_few_steps(seqgpt):
    examples = all_examples(seqgpt)
    training = seqgpt.training()
    training.begin()
    opt = torch.optim.AdamW(training.network.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = training.loss(examples)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_block_checkpointing_gives_the_same_gradients(seqgpt_tiny, tmp_path, attention, monkeypatch):
    # With dropout on: checkpointing must replay the same masks when it recomputes a block.
    from plugins.seqgpt import modeling
    calls = []
    block_forward = modeling.Block.forward
    monkeypatch.setattr(modeling.Block, "forward", lambda self, *a, **k: calls.append(1) or block_forward(self, *a, **k))
    model = SeqGPT().load(with_dropout(seqgpt_tiny, tmp_path / "dropout", 0.1, 0.1))
    examples = all_examples(model)
    training = model.training()
    model.knobs.attention = attention

    def grads(checkpointing):
        model.knobs.checkpointing = checkpointing
        assert training.begin() == attention
        training.network.zero_grad()
        torch.manual_seed(0)
        calls.clear()
        training.loss(examples).backward()
        return {n: q.grad.clone() for n, q in training.network.named_parameters()}, len(calls)
    (plain, plain_calls), (ckpt, ckpt_calls) = grads(False), grads(True)
    layers = model.network.config.n_layer
    assert (plain_calls, ckpt_calls) == (layers, 2 * layers)          # every block really recomputed
    assert len(plain) > 10 and all(q.abs().sum() > 0 for q in plain.values())
    for name in plain:
        assert torch.allclose(plain[name], ckpt[name], atol=1e-6, rtol=1e-5), name


def test_finetuned_seqgpt_reproduces_its_training_examples(seqgpt_tiny, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", LINES)
    out = tmp_path / "tuned"
    torch.set_num_threads(1)
    assert finetune.main(["--model", "seqgpt", "--weights", str(seqgpt_tiny), "--train", str(train),
                          "--output", str(out), "--epochs", "30", "--batch-size", "4", "--lr", "3e-3",
                          "--device", "cpu", "--num-beams", "1", "--max-new-tokens", "24"]) == 0
    report = json.loads((out / "evaluation.json").read_text("utf-8"))
    assert report["after"]["overall"]["f1"] == 1.0 > report["before"]["overall"]["f1"]
    assert {"人物", "地点", "正面", "负面"} <= set(report["after"]["per_type"])
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "pytorch_model.bin", "RANDOM_DEMO_WEIGHTS.txt"):
        assert (out / name).is_file(), name
    state = torch.load(out / "pytorch_model.bin", weights_only=True)
    assert all(k.startswith("transformer.") for k in state) and "lm_head.weight" not in state   # tied, as official
    tuned = SeqGPT().load(out)                                                       # strict load
    assert tuned.network.state_dict().keys() == {k.removeprefix("transformer.") for k in state}
    # Generation writes exactly the gold answer, greedy and with the reference's 4 beams.
    examples = all_examples(tuned)
    for beams in (1, 4):
        settings = GenerationSettings(num_beams=beams, max_new_tokens=24)
        tokens = generate(tuned.network, [EncodedPrompt(ex.prompt) for ex in examples], settings).tokens
        assert [tuned.tokenizer.decode(t, skip_special_tokens=True) for t in tokens] == \
            [ex.answer_text for ex in examples]
    results = list(tuned.extract([doc(line, n) for n, line in enumerate(LINES, 1)], num_beams=4, max_new_tokens=24))
    assert [[(s.type, s.span, list(s.offset)) for s in t] for t in results[0].tuples] == \
        [[(e["type"], e["span"], e["offset"]) for e in t] for t in LINES[0]["output"]]


@pytest.mark.parametrize("output, message", [
    ([[{"type": "人物", "span": "张三", "offset": [0, 3]}]], "is not text"),
    ([[{"type": "组织", "span": "张三", "offset": [0, 2]}]], "not one of the labels"),
    ([[{"type": "人物", "span": "张三"}]], "without type/span/offset"),
    ([[{"type": "人物", "span": "张三", "offset": [0, 2]}, {"type": "地点", "span": "北京", "offset": [3, 5]}]],
     "one {type, span, offset}"),
    ([[{"type": "人物", "span": "张三，北京", "offset": None}]], "cannot be written"),
    ([[{"type": "人物", "span": "None", "offset": None}]], "cannot be written"),
    ([[{"type": "人物", "span": "张三", "offset": [0, 2]}]] * 2, r"repeats output\[0\]"),
    ({"人物": "张三"}, "must be a list"),
])
def test_bad_gold_lines_are_named(tmp_path, output, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [LINES[0], {**LINES[0], "output": output}])
    with pytest.raises(InputError, match=f"line 2: .*{message}"):
        finetune.read_gold(path, SeqGPT())


@pytest.mark.parametrize("line, message", [
    (cls("快递太慢了", ["正面", "负面"], []) | {"output": [[{"type": "负面", "span": "差", "offset": None}]]},
     "a classification answer is"),
    (cls("快递太慢了", ["正面", "负面"], []) | {"task": "ner"}, "unknown task"),
    (cls("快递太慢了", ["正面", "负面"], []) | {"labels": []}, "non-empty list"),
])
def test_bad_classification_gold_and_tasks_are_named(tmp_path, line, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [LINES[2], line])
    with pytest.raises(InputError, match=f"line 2: .*{message}"):
        finetune.read_gold(path, SeqGPT())
