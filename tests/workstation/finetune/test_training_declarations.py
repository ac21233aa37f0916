"""Fine-tuning names no built-in plugin: the optimizations it takes are those that declare `training`, and
without --model it trains the first installed model (the UI's first choice)."""
from __future__ import annotations

import json

import pytest

from contracts.domain import InputError
from contracts.hookspecs import hookimpl
from contracts.optimization import Optimization
from tests.registered import plugin_registered
from workstation import cli, plugins
from workstation.finetune import trainer as finetune
from workstation.finetune.request import FinetuneRequest

GOLD = {"id": "1", "text": "张三在北京工作", "schema": {"人物": None},
        "output": [[{"type": "人物", "span": "张三", "offset": [0, 2]}]]}


class Recorded(Optimization):
    """A third-party optimization; `training` says whether it acts in fine-tuning."""

    title = "Recorded"
    description = "Records that it was switched on."

    def __init__(self, name: str, training: bool) -> None:
        self.name, self.training, self.enabled = name, training, []

    def applies_to(self, model):
        return True, "any model"

    def enable(self, model, **params) -> str:
        self.enabled.append(model.family.name)
        return "on"

    def disable(self, model) -> None:
        pass


class ThirdParty:
    def __init__(self) -> None:
        self.trains, self.infers = Recorded("third-party-trains", True), Recorded("third-party-infers", False)

    @hookimpl
    def register_optimizations(self, register):
        register(self.trains)
        register(self.infers)


@pytest.fixture
def third_party():
    with plugin_registered(ThirdParty(), "third-party-optimizations") as plugin:
        yield plugin


def gold_file(tmp_path, line=GOLD):
    path = tmp_path / "gold.jsonl"
    path.write_text(json.dumps(line, ensure_ascii=False) + "\n", "utf-8")
    return path


def test_the_built_in_training_optimizations_declare_it_and_the_others_do_not():
    usable = plugins.training_optimizations()
    assert {"gradient-checkpointing", "flash-attention"} <= set(usable)
    assert not {"precision", "sparse-mask", "memory-pool"} & set(usable)


def test_a_third_party_optimization_that_declares_training_is_offered_and_used_by_the_trainer(
        third_party, rex_tiny, tmp_path):
    assert "third-party-trains" in plugins.training_optimizations()
    assert "third-party-infers" not in plugins.training_optimizations()
    code = finetune.main(["--model", "rexuninlu", "--weights", str(rex_tiny), "--train", str(gold_file(tmp_path)),
                          "--output", str(tmp_path / "out"), "--epochs", "1", "--no-eval", "--device", "cpu",
                          "--optimizations", "third-party-trains"])
    assert code == 0 and third_party.trains.enabled == ["rexuninlu"]


def test_a_third_party_optimization_without_training_is_refused_naming_those_that_train(third_party, tmp_path,
                                                                                         capsys):
    assert cli.main(["finetune", "--model", "rexuninlu", "--weights", str(tmp_path / "w"),
                     "--train", str(gold_file(tmp_path)), "--output", str(tmp_path / "out"),
                     "--optimizations", "third-party-infers"]) == 2
    err = capsys.readouterr().err
    assert "third-party-infers do not apply to fine-tuning" in err and "third-party-trains" in err
    assert third_party.infers.enabled == []


def test_the_ui_request_takes_what_the_registry_says_acts_in_training(third_party, tmp_path):
    weights = tmp_path / "w"
    weights.mkdir()
    request = FinetuneRequest("rexuninlu", weights, 1, tmp_path / "out", optimizations=("third-party-trains",))
    request.check()
    request.optimizations = ("third-party-infers",)
    with pytest.raises(InputError, match="third-party-infers do not apply to fine-tuning"):
        request.check()


def test_without_model_the_trainer_takes_the_first_installed_model(monkeypatch, tmp_path, capsys):
    """Reordered as if another plugin came first: its reading rules now apply (a schema line is refused by a
    model that reads labels), where a hard-coded default would have gone on as RexUniNLU."""
    families = plugins.model_families()
    first = {"seqgpt": families["seqgpt"], **{k: v for k, v in families.items() if k != "seqgpt"}}
    monkeypatch.setattr(plugins, "model_families", lambda: first)
    assert plugins.default_model() == "seqgpt"
    assert finetune.parser().parse_args(["--weights", "w", "--train", "t", "--output", "o"]).model is None
    with pytest.raises(InputError, match="seqgpt reads"):
        finetune.run(finetune.parser().parse_args(["--weights", str(tmp_path / "w"), "--device", "cpu",
                                                   "--train", str(gold_file(tmp_path)),
                                                   "--output", str(tmp_path / "out")]),
                     finetune.TrainingEvents(None), finetune.StopRequest())


def test_a_cli_fine_tune_is_recorded_under_the_model_it_trained(tmp_path):
    from storage.repository import open_store
    from workstation.settings import Settings
    output = tmp_path / "out"
    output.mkdir()
    (output / "evaluation.json").write_text(json.dumps({"model": "seqgpt", "weights": "w"}), "utf-8")
    settings = Settings(database=str(tmp_path / "runs.db"))
    run_id = cli.record_finetune(settings, ["--weights", "w", "--train", "t.jsonl", "--output", str(output)])
    store = open_store(tmp_path / "runs.db")
    try:
        assert store.get_training_run(run_id).model == "seqgpt"
    finally:
        store.close()
