"""Fine-tuning never writes over what is not its own, and never writes non-finite weights (issue #28)."""
import json
import math

import pytest
import torch

from tests.workstation.finetune.test_finetune import ner_lines, write_jsonl
from workstation import cli
from workstation.finetune import trainer as finetune


def snapshot(folder):
    """Every file under a folder with its bytes: "nothing was touched" is this, unchanged."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def gold(tmp_path):
    return write_jsonl(tmp_path / "train.jsonl", ner_lines())


@pytest.fixture
def other_checkpoint(tmp_path):
    """A folder holding some other model's checkpoint, as a user's --output typo might point at."""
    folder = tmp_path / "seqgpt-560m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bloom"}), "utf-8")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02weights")
    return folder


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_a_new_run_refuses_a_non_empty_output_and_leaves_it_untouched(rex_tiny, gold, other_checkpoint, capsys):
    before = snapshot(other_checkpoint)
    code = cli.main(["finetune", "--weights", str(rex_tiny), "--train", str(gold),
                     "--output", str(other_checkpoint), "--device", "cpu", "--no-eval"])
    assert code == 2
    assert "is not empty" in one_line_error(capsys)
    assert snapshot(other_checkpoint) == before


def test_resume_refuses_a_folder_no_fine_tuning_run_wrote(rex_tiny, gold, other_checkpoint, capsys):
    before = snapshot(other_checkpoint)
    code = cli.main(["finetune", "--weights", str(rex_tiny), "--train", str(gold),
                     "--output", str(other_checkpoint), "--device", "cpu", "--no-eval", "--resume"])
    assert code == 2
    assert "holds no fine-tuning run" in one_line_error(capsys)
    assert snapshot(other_checkpoint) == before


def test_resume_continues_only_a_run_of_the_same_model_and_weights(rex_tiny, rex_tiny_no_dropout, seqgpt_tiny,
                                                                   gold, tmp_path, capsys):
    out = tmp_path / "tuned"
    common = ["--train", str(gold), "--output", str(out), "--epochs", "1", "--device", "cpu", "--no-eval"]
    assert finetune.main(["--weights", str(rex_tiny), *common]) == 0
    before = snapshot(out)
    seqgpt_gold = write_jsonl(tmp_path / "seqgpt.jsonl", [
        {"text": "张三在北京工作", "task": "ext", "labels": ["人物"], "output": [[{"type": "人物", "span": "张三", "offset": [0, 2]}]]}])
    assert cli.main(["finetune", "--model", "seqgpt", "--weights", str(seqgpt_tiny), "--train", str(seqgpt_gold),
                     "--output", str(out), "--epochs", "1", "--device", "cpu", "--no-eval", "--resume"]) == 2
    assert "holds a rexuninlu run, not seqgpt" in one_line_error(capsys)
    assert cli.main(["finetune", "--weights", str(rex_tiny_no_dropout), *common, "--resume"]) == 2
    assert "--weights differ" in one_line_error(capsys)
    assert snapshot(out) == before
    # The same run resumes (it has finished: nothing is left to train, the checkpoint is written again).
    assert finetune.main(["--weights", str(rex_tiny), *common, "--resume"]) == 0


@pytest.mark.parametrize("lr", ["inf", "nan", "-1", "0", "-inf", "1e39", "5"])
def test_a_learning_rate_that_is_not_a_positive_number_up_to_1_is_refused_up_front(rex_tiny, gold, tmp_path, capsys, lr):
    out = tmp_path / "tuned"
    assert cli.main(["finetune", "--weights", str(rex_tiny), "--train", str(gold), "--output", str(out),
                     "--device", "cpu", f"--lr={lr}"]) == 2
    assert "--lr must be a positive number up to 1" in one_line_error(capsys)
    assert not out.exists()


def test_a_run_whose_loss_becomes_nan_stops_at_that_step_and_writes_no_weights(rex_tiny_no_dropout, gold, tmp_path,
                                                                               monkeypatch, capsys):
    from plugins.rexuninlu import training as rex_training
    real, calls = rex_training.batch_loss, []

    def nan_from_the_third_micro_batch(scorer, rows, autocast_dtype=None):
        calls.append(len(rows))
        loss = real(scorer, rows, autocast_dtype)
        return loss * math.nan if len(calls) >= 3 else loss
    monkeypatch.setattr(rex_training, "batch_loss", nan_from_the_third_micro_batch)
    out = tmp_path / "tuned"
    # 4 documents, batch size 1: 4 steps an epoch; a checkpoint after every step.
    assert cli.main(["finetune", "--weights", str(rex_tiny_no_dropout), "--train", str(gold), "--output", str(out),
                     "--epochs", "2", "--batch-size", "1", "--save-every", "1", "--device", "cpu", "--no-eval"]) == 1
    err = capsys.readouterr().err
    assert "training diverged at step 3: the loss became nan" in err and "Traceback" not in err
    assert [c.name for c in finetune.checkpoints(out)] == ["step-1", "step-2"]        # written before, intact
    state = torch.load(out / "checkpoints" / "step-2" / "state.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in state["model"].values())
    assert not (out / "pytorch_model.bin").exists() and not (out / "evaluation.json").exists()
