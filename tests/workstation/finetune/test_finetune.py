"""Fine-tuning RexUniNLU: labels, loss, the training loop, checkpoints (tiny model, CPU)."""
import json
import shutil

import pytest
import torch

from contracts.domain import InputError
from plugins.rexuninlu.family import RexUniNLU
from plugins.rexuninlu.training import batch_loss, circle_loss, examples, gold_levels
from workstation.finetune import trainer as finetune

RE_SCHEMA = {"人物": {"工作地点(地理位置)": None}, "地理位置": None}
RE_TEXT = "张三在北京工作"
RE_GOLD = [[{"type": "人物", "span": "张三", "offset": [0, 2]},
            {"type": "工作地点(地理位置)", "span": "北京", "offset": [3, 5]}],
           [{"type": "地理位置", "span": "北京", "offset": [3, 5]}]]

NER_SCHEMA = {"人物": None, "地理位置": None}
NER_DOCS = [("张三在北京工作", [("人物", 0, 2), ("地理位置", 3, 5)]),
            ("李四去了上海", [("人物", 0, 2), ("地理位置", 4, 6)]),
            ("王五住在广州", [("人物", 0, 2), ("地理位置", 4, 6)]),
            ("赵六来自深圳", [("人物", 0, 2), ("地理位置", 4, 6)])]


def ner_lines():
    return [{"id": str(i), "text": t, "schema": NER_SCHEMA,
             "output": [[{"type": ty, "span": t[a:b], "offset": [a, b]}] for ty, a, b in spans]}
            for i, (t, spans) in enumerate(NER_DOCS)]


def write_jsonl(path, lines):
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), "utf-8")
    return path


@pytest.fixture
def rex(rex_tiny_no_dropout):
    # Fresh: training changes the weights. No dropout: the comparisons below are between runs that
    # would draw different masks.
    return RexUniNLU().load(rex_tiny_no_dropout)


def test_gold_levels_teach_the_next_level_with_gold_prefixes():
    levels = gold_levels(RE_SCHEMA, RE_GOLD)
    assert levels == [{(): {"人物": [(0, 2)], "地理位置": [(3, 5)]}},
                      {(("人物", "张三", (0, 2)),): {"工作地点(地理位置)": [(3, 5)]}}]


def test_label_matrix_links_head_tail_and_type_tokens(rex_model):
    p = rex_model.prompter
    level0, level1 = examples(p, RE_TEXT, RE_SCHEMA, RE_GOLD)
    tokens = [p.vocabulary.rust.id_to_token(i) for i in level0.window.ids]
    # [CLS] [PREFIX] [TYPE] 人 物 [TYPE] 地 理 位 置 [SEP] 张 三 在 北 京 工 作 [SEP]
    assert tokens[2] == tokens[5] == "[TYPE]" and tokens[11:16] == ["张", "三", "在", "北", "京"]
    assert level0.window.n_hint == 11
    person, place = 2, 5
    assert sorted(level0.positives) == sorted([(11, 12), (11, person), (person, 12),    # 张三: span, head, tail
                                               (14, 15), (14, place), (place, 15)])     # 北京
    tokens = [p.vocabulary.rust.id_to_token(i) for i in level1.window.ids]
    # level 1: [CLS] [PREFIX] 人 物 : 张 三 [TYPE] 工作地点(...) [SEP] 张 三 在 北 京 ...
    relation, nh = tokens.index("[TYPE]"), level1.window.n_hint
    assert tokens[nh + 3:nh + 5] == ["北", "京"]
    assert sorted(level1.positives) == sorted([(nh + 3, nh + 4), (nh + 3, relation), (relation, nh + 4)])


def test_circle_loss_matches_the_reference_formula_and_skips_padding():
    torch.manual_seed(0)
    logits, labels = torch.randn(2, 5, 5) * 3, (torch.rand(2, 5, 5) > 0.8).float()
    # The reference: y_pred=(1-2y)*x; logsumexp over [y_pred - y*1e12, 0] + over [y_pred - (1-y)*1e12, 0].
    y, x = labels.view(2, -1), logits.view(2, -1)
    s = (1 - 2 * y) * x
    zeros = torch.zeros(2, 1)
    ref = (torch.logsumexp(torch.cat([s - y * 1e12, zeros], -1), -1)
           + torch.logsumexp(torch.cat([s - (1 - y) * 1e12, zeros], -1), -1)).mean()
    all_cells = torch.ones(2, 5, 5, dtype=torch.bool)
    assert torch.allclose(circle_loss(logits, labels, all_cells), ref)
    cells = all_cells.clone()
    cells[:, 4, :] = cells[:, :, 4] = False                      # a padded token
    padded = logits.clone()
    padded[:, 4, :] = padded[:, :, 4] = 1e4
    assert torch.allclose(circle_loss(padded, labels, cells), circle_loss(logits, labels, cells))


def test_loss_decreases_over_a_few_steps(rex):
    exs = [ex for line in ner_lines() for ex in examples(rex.prompter, line["text"], NER_SCHEMA, line["output"])]
    net = rex.network
    opt = torch.optim.AdamW([q for q in net.parameters() if q.requires_grad], lr=3e-3)
    net.train()
    losses = []
    for _ in range(8):
        loss = batch_loss(rex.scorer, exs)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_the_end_of_training_drops_what_was_derived_from_the_old_weights(rex):
    # Captured graphs and the kept q·k·v concatenations would go on serving the weights from before training.
    attention = rex.network.plm.encoder.layer[0].attention.self
    training = rex.training()
    with torch.no_grad():
        attention.fused_projection()
    rex.scorer.graphs["a shape"] = "a graph captured before training"
    training.begin()
    training.end()
    assert rex.scorer.graphs == {} and attention._fused is None and not rex.network.training


@pytest.mark.parametrize("checkpointing, backend", [(True, "eager"), (False, "sdpa")])
def test_checkpointing_and_sdpa_give_the_same_loss_gradients(rex, checkpointing, backend):
    exs = examples(rex.prompter, RE_TEXT, RE_SCHEMA, RE_GOLD)
    net = rex.network
    net.train()

    def grads(checkpointing, backend):
        net.zero_grad()
        net.plm.encoder.checkpointing, net.attention_backend = checkpointing, backend
        batch_loss(rex.scorer, exs).backward()
        return {n: q.grad.clone() for n, q in net.named_parameters() if q.grad is not None}
    plain, other = grads(False, "eager"), grads(checkpointing, backend)
    assert plain.keys() == other.keys() and len(plain) > 10
    for name in plain:
        # SDPA sums in another order: compare relative to the gradient's size (entries reach ~10).
        assert (plain[name] - other[name]).norm() <= 1e-5 * plain[name].norm() + 1e-7, name


def test_batched_loss_equals_the_mean_of_single_window_losses(rex):
    exs = [ex for line in ner_lines()[:2] for ex in examples(rex.prompter, line["text"], NER_SCHEMA, line["output"])]
    exs += examples(rex.prompter, RE_TEXT, RE_SCHEMA, RE_GOLD)                   # different lengths: padding
    with torch.no_grad():
        together = batch_loss(rex.scorer, exs)
        alone = torch.stack([batch_loss(rex.scorer, [ex]) for ex in exs]).mean()
    assert torch.allclose(together, alone, atol=1e-4, rtol=1e-5)


def test_finetuned_model_reproduces_its_training_examples(rex_tiny_no_dropout, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ner_lines())
    out = tmp_path / "tuned"
    assert finetune.main(["--weights", str(rex_tiny_no_dropout), "--train", str(train), "--output", str(out),
                          "--epochs", "20", "--lr", "3e-3", "--device", "cpu"]) == 0
    report = json.loads((out / "evaluation.json").read_text("utf-8"))
    assert report["after"]["overall"]["f1"] == 1.0 > report["before"]["overall"]["f1"]
    assert set(report["after"]["per_type"]) == {"人物", "地理位置"}
    tuned = RexUniNLU().load(out)                                                # strict load
    doc, gold = finetune.read_gold(train, RexUniNLU())[0]
    result = next(tuned.extract([doc]))
    assert [[{"type": s.type, "span": s.span, "offset": list(s.offset)} for s in t] for t in result.tuples] == gold
    assert all(s.confidence > 0.5 for t in result.tuples for s in t)
    assert len(list((out / "checkpoints").iterdir())) == 2                     # older epochs pruned


def test_saved_checkpoint_reloads_strictly_in_the_official_layout(rex_tiny, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ner_lines()[:1])
    out = tmp_path / "tuned"
    finetune.main(["--weights", str(rex_tiny), "--train", str(train), "--output", str(out),
                   "--epochs", "1", "--no-eval", "--device", "cpu"])
    for name in ("config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "pytorch_model.bin"):
        assert (out / name).is_file(), name
    state = torch.load(out / "pytorch_model.bin", weights_only=True)
    assert all(k.startswith(("plm.", "ffnq.", "ffnk.", "rotary_emb.")) for k in state)
    assert any(k.startswith("plm.encoder.layer.") for k in state)
    tuned = RexUniNLU().load(out)
    assert tuned.network.state_dict().keys() == state.keys()
    assert finetune.last_checkpoint(out).name == "step-1"


def test_resume_continues_exactly_like_an_uninterrupted_run(rex_tiny, tmp_path):
    # rex_tiny trains with dropout 0.1: the RNG state must travel in the checkpoint too.
    train = write_jsonl(tmp_path / "train.jsonl", ner_lines())
    common = ["--weights", str(rex_tiny), "--train", str(train), "--epochs", "2", "--batch-size", "3",
              "--grad-accum", "1", "--lr", "1e-3", "--seed", "3", "--no-eval", "--device", "cpu"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    finetune.main(common + ["--output", str(full)])
    steps = sorted((full / "checkpoints").iterdir(), key=lambda d: int(d.name.split("-")[1]))
    assert len(steps) == 2
    shutil.copytree(steps[0], resumed / "checkpoints" / steps[0].name)            # as if stopped after epoch 1
    finetune.main(common + ["--output", str(resumed), "--resume"])
    a = torch.load(full / "pytorch_model.bin", weights_only=True)
    b = torch.load(resumed / "pytorch_model.bin", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(InputError, match="--lr differ"):
        finetune.main([x if x != "1e-3" else "2e-3" for x in common] + ["--output", str(resumed), "--resume"])


def test_gradient_accumulation_matches_one_larger_batch(rex_tiny_no_dropout, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ner_lines())
    common = ["--weights", str(rex_tiny_no_dropout), "--train", str(train), "--epochs", "1", "--lr", "1e-3",
              "--no-eval", "--device", "cpu"]
    finetune.main(common + ["--output", str(tmp_path / "big"), "--batch-size", "4"])
    finetune.main(common + ["--output", str(tmp_path / "acc"), "--batch-size", "2", "--grad-accum", "2"])
    a = torch.load(tmp_path / "big" / "pytorch_model.bin", weights_only=True)
    b = torch.load(tmp_path / "acc" / "pytorch_model.bin", weights_only=True)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.parametrize("output, message", [
    ([[{"type": "人物", "span": "张三", "offset": [0, 3]}]], "is not text"),
    ([[{"type": "组织", "span": "张三", "offset": [0, 2]}]], "not in the schema"),
    ([[{"type": "人物", "span": "张三"}]], "without type/span/offset"),
    ({"人物": "张三"}, "must be a list"),
])
def test_bad_gold_lines_are_named(tmp_path, output, message):
    good = ner_lines()[0]
    path = write_jsonl(tmp_path / "bad.jsonl", [good, {**good, "output": output}])
    with pytest.raises(InputError, match=f"line 2: .*{message}"):
        finetune.read_gold(path, RexUniNLU())


def test_cli_reports_bad_input_with_its_line(rex_tiny, tmp_path, capsys):
    from workstation import cli
    path = write_jsonl(tmp_path / "bad.jsonl", ner_lines()[:1])
    with open(path, "a", encoding="utf-8") as f:
        f.write("{not json\n")
    args = ["finetune", "--weights", str(rex_tiny), "--train", str(path), "--output", str(tmp_path / "o")]
    assert cli.main(args) == 2
    assert "line 2: " in capsys.readouterr().err
    assert cli.main(args[:-2] + ["--output", str(tmp_path / "o"), "--optimizations", "memory-pool"]) == 2
    assert "do not apply to fine-tuning" in capsys.readouterr().err


def test_optimizations_take_commas_as_extract_does(rex_tiny, tmp_path, capsys):
    from workstation import cli
    path = write_jsonl(tmp_path / "gold.jsonl", ner_lines()[:1])
    args = ["finetune", "--weights", str(rex_tiny), "--train", str(path), "--output", str(tmp_path / "o"),
            "--optimizations", "gradient-checkpointing,precision"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "precision do not apply" in err and "gradient-checkpointing," not in err


def test_a_step_out_of_gpu_memory_runs_again_in_slices_with_the_same_gradient(rex_tiny_no_dropout, tmp_path,
                                                                              monkeypatch, capsys):
    from plugins.rexuninlu import training as rex_training
    train = write_jsonl(tmp_path / "train.jsonl", ner_lines())
    common = ["--weights", str(rex_tiny_no_dropout), "--train", str(train), "--epochs", "1", "--lr", "1e-3",
              "--no-eval", "--device", "cpu", "--batch-size", "4"]
    finetune.main(common + ["--output", str(tmp_path / "whole")])
    real, sizes = rex_training.batch_loss, []

    def small_memory(scorer, rows, autocast_dtype=None):
        sizes.append(len(rows))
        if len(rows) > 1:             # as a 24 GB card might, part-way through a step's micro-batches
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(scorer, rows, autocast_dtype)
    monkeypatch.setattr(rex_training, "batch_loss", small_memory)
    capsys.readouterr()
    assert finetune.main(common + ["--output", str(tmp_path / "sliced")]) == 0
    said = capsys.readouterr().out
    assert "out of GPU memory at step 1: micro-batches of 4 examples now run in slices of 2" in said
    assert "now run in slices of 1" in said and max(sizes[sizes.index(1):]) == 1     # and stays sliced
    a = torch.load(tmp_path / "whole" / "pytorch_model.bin", weights_only=True)
    b = torch.load(tmp_path / "sliced" / "pytorch_model.bin", weights_only=True)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
