"""`launcher.py finetune` records a finished run in the history, unless --no-record (which the trainer never sees)."""
from __future__ import annotations

import json

import pytest

from storage import open_store
from workstation import cli
from workstation.finetune import trainer as finetune
from workstation.settings import Settings


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    """The trainer replaced by one that writes an evaluation.json like the real one and remembers its argv."""
    seen = []

    def fake_main(argv):
        seen.append(list(argv))
        out = tmp_path / "tuned"
        out.mkdir(exist_ok=True)
        (out / "evaluation.json").write_text(json.dumps({
            "weights": "/base", "train": "train.jsonl", "eval": "dev.jsonl",
            "before": {"overall": {"f1": 0.1}, "per_type": {"人物": {"f1": 0.1}}},
            "after": {"overall": {"f1": 0.7}, "per_type": {"人物": {"f1": 0.7}}},
            "training": {"steps": 3, "loss_per_step": [0.9, 0.5, 0.2]}}, ensure_ascii=False), "utf-8")
        return 0
    monkeypatch.setattr(finetune, "main", fake_main)
    monkeypatch.setattr(cli, "load_settings", lambda: Settings(database=str(tmp_path / "runs.db")))
    return seen


ARGS = ["--model", "rexuninlu", "--weights", "/base", "--train", "train.jsonl", "--eval", "dev.jsonl"]


def test_a_finished_cli_finetune_is_recorded_with_its_evaluation(trainer, tmp_path):
    assert cli.main(["finetune", *ARGS, "--output", str(tmp_path / "tuned"), "--epochs", "1"]) == 0
    [run] = open_store(tmp_path / "runs.db").list_training_runs()
    assert (run.source, run.status, run.model, run.base_weights) == ("cli", "completed", "rexuninlu", "/base")
    assert run.output_dir == str(tmp_path / "tuned") and run.args[-2:] == ["--epochs", "1"]
    assert run.evaluation_before["overall"]["f1"] == 0.1 and run.evaluation_after["per_type"]["人物"]["f1"] == 0.7
    assert run.loss == [[1, 0.9], [2, 0.5], [3, 0.2]] and run.step == 3
    assert run.datasets == {"train": {"path": "train.jsonl"}, "eval": {"path": "dev.jsonl"}}


def test_no_record_is_stripped_before_the_trainer_and_records_nothing(trainer, tmp_path):
    assert cli.main(["finetune", "--no-record", *ARGS, "--output", str(tmp_path / "tuned")]) == 0
    assert "--no-record" not in trainer[0]
    assert not (tmp_path / "runs.db").exists() or open_store(tmp_path / "runs.db").list_training_runs() == []
