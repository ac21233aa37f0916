"""The Fine-tune page with a fake trainer process: start, live progress, cancel, resume, failures, results,
and "Use these weights" reaching Extract."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from contracts.domain import Document
from tests.workstation.ui.conftest import APP
from workstation.ui import state

PAGE = "screens/finetune.py"
FAKE = Path(__file__).resolve().parents[1] / "finetune" / "fake_trainer.py"


@pytest.fixture
def trainer(monkeypatch):
    monkeypatch.setattr(state, "trainer_command", [sys.executable, str(FAKE)])
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.01")
    return monkeypatch


def add_dataset(name: str = "people", n: int = 4) -> int:
    dataset_id, _ = state.store().add_gold_examples(name, "fakeie", [
        (Document(f"d{i}", "Alice met Bob", {"Alice": None}), [[{"type": "Alice", "span": "Alice", "offset": [0, 5]}]])
        for i in range(n)], "history")
    return dataset_id


def button(at, label):
    return next(b for b in at.button if b.label == label)


def wait(run_id: int, until, timeout: float = 30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        run, progress = state.training_launcher().poll(run_id)
        if until(run, progress):
            return run
        time.sleep(0.02)
    raise AssertionError(state.training_launcher().poll(run_id))


def start(app, clean: bool = True, **widgets):
    at = app.run()
    add_dataset()
    at.switch_page(PAGE).run()
    at.number_input(key="ft_batch").set_value(1)
    at.number_input(key="ft_epochs").set_value(2)
    for key, value in widgets.items():
        at.number_input(key=key).set_value(value)
    button(at, "Start fine-tuning").click().run()
    assert not at.exception and (not at.error or not clean)
    return at, at.session_state["ft_run"]


def test_without_a_dataset_the_page_says_where_to_get_one(app, trainer):
    at = app.run().switch_page(PAGE).run()
    assert not at.exception
    assert any("No fakeie dataset yet" in i.value for i in at.info)
    assert not any(b.label == "Start fine-tuning" for b in at.button)


def test_a_run_is_followed_to_the_end_and_its_weights_are_used_by_extract(app, trainer, ui_env):
    at, run_id = start(app)
    run = state.store().get_training_run(run_id)
    assert run.status in ("running", "completed") and run.args[run.args.index("--batch-size") + 1] == "1"
    assert Path(run.output_dir).parent == ui_env / "finetuned" and "people" in Path(run.output_dir).name
    run = wait(run_id, lambda r, p: r.finished)
    assert run.status == "completed"
    at.run()
    assert not at.exception
    assert any("step 8 / 8" in p.proto.text for p in at.get("progress"))
    table = next(d.value for d in at.dataframe if "ΔF1" in d.value.columns)
    assert list(table["type"]) == ["(overall)", "人物", "组织机构/创始人(人物)"]
    assert table["ΔF1"][0] == pytest.approx(0.6)
    assert len(at.get("vega_lite_chart")) >= 3                    # loss, F1 per epoch, GPU memory
    assert run.evaluation_epochs and run.loss[-1][0] == 8

    button(at, "Use these weights").click().run()
    assert at.session_state[state.weights_key("fakeie")] == run.output_dir
    # AppTest drops the sidebar after switch_page: a new session on the start page shows it
    fresh = AppTest.from_file(APP, default_timeout=60)
    fresh.session_state["model"] = "fakeie"
    fresh.session_state[state.weights_key("fakeie")] = run.output_dir
    weights = next(s for s in fresh.run().sidebar.selectbox if s.label == "Weights")
    assert weights.value == run.output_dir and weights.options[-1].startswith(f"fine-tune #{run_id} on people")
    assert not fresh.warning                                           # no demo banner: these are not demo weights
    at.switch_page("screens/extract.py").run()
    next(b for b in at.button if b.label == "Run").click().run()
    recorded = state.store().get_run(at.session_state["extract_run_id"])
    assert recorded.summary.weights == run.output_dir


def test_cancel_then_resume_from_the_page(app, trainer):
    trainer.setenv("FAKE_TRAINER_STEP_S", "5")         # slow steps: only the cancel ends this run early
    at, run_id = start(app)
    wait(run_id, lambda r, p: p.start is not None)      # in its first step
    at.run()
    button(at, "Cancel").click().run()
    assert state.store().get_training_run(run_id).status in ("cancelling", "cancelled")
    run = wait(run_id, lambda r, p: r.finished)
    assert run.status == "cancelled"
    at.run()
    trainer.setenv("FAKE_TRAINER_STEP_S", "0.01")
    button(at, "Resume").click().run()
    assert not at.exception
    run = wait(run_id, lambda r, p: r.finished)
    assert run.status == "completed" and run.step == 8


def test_a_trainer_that_dies_is_shown_failed_with_its_log(app, trainer):
    trainer.setenv("FAKE_TRAINER_MODE", "die-after:1")
    at, run_id = start(app, clean=False)                # it may be dead by the time the page is drawn
    wait(run_id, lambda r, p: r.finished)
    at.run()
    assert any("exited with exit code 3 without finishing" in e.value for e in at.error)
    assert any(b.label == "Resume" for b in at.button)


def test_an_output_directory_in_use_starts_nothing(app, trainer, ui_env):
    at = app.run()
    add_dataset()
    at.switch_page(PAGE).run()
    used = ui_env / "used"
    used.mkdir()
    (used / "x").write_text("x")
    next(t for t in at.text_input if t.label == "Output directory").input(str(used)).run()
    button(at, "Start fine-tuning").click().run()
    assert any("Nothing was started" in e.value and "is not empty" in e.value for e in at.error)
    assert state.store().list_training_runs() == []


def test_bf16_on_the_cpu_is_refused_before_starting(app, trainer):
    at = app.run()
    add_dataset()
    at.switch_page(PAGE).run()
    at.selectbox(key="ft_device").select("cpu")
    at.selectbox(key="ft_dtype").select("bf16").run()
    assert button(at, "Start fine-tuning").disabled
    assert any("bf16 training needs a CUDA device" in w.value for w in at.warning)


def test_a_cli_run_is_listed_with_its_before_and_after(app, trainer, ui_env):
    evaluation = {"overall": {"precision": 0.5, "recall": 0.5, "f1": 0.5}, "per_type": {}}
    run_id = state.store().create_training_run(
        "rexuninlu", "/base", str(ui_env / "tuned"), ["--model", "rexuninlu"], source="cli", status="completed",
        datasets={"train": {"path": "train.jsonl"}}, evaluation_before=evaluation,
        evaluation_after=json.loads(json.dumps(evaluation).replace("0.5", "0.75")), loss=[[1, 0.3]])
    at = app.run().switch_page(PAGE).run()
    assert not at.exception
    runs = next(d.value for d in at.dataframe if "F1 after" in d.value.columns)
    assert list(runs["run"]) == [run_id] and runs["F1 after"][0] == 0.75 and runs["source"][0] == "cli"
    table = next(d.value for d in at.dataframe if "ΔF1" in d.value.columns)
    assert table["ΔF1"][0] == pytest.approx(0.25)
    assert any("output directory" in w.value and "is gone" in w.value for w in at.warning)


def test_the_runs_table_and_the_panel_show_the_same_step_while_a_run_goes(app, trainer):
    trainer.setenv("FAKE_TRAINER_STEP_S", "0.3")
    at, run_id = start(app)
    wait(run_id, lambda r, p: p.step >= 2)
    at.run()
    table = at.dataframe[0].value
    step = int(table[table["run"] == run_id].iloc[0]["steps"].split(" / ")[0])
    [bar] = [p.proto.text for p in at.get("progress")]
    assert step >= 2 and bar.startswith(f"step {step:,} / ")
    state.training_launcher().cancel(run_id)


def test_the_optimizations_offered_are_those_that_declare_they_act_in_training(app, trainer):
    from tests.workstation.ui.fake_plugin import FakeOptimization
    trainer.setattr(FakeOptimization, "training", True)        # a plugin's optimization, not a built-in name
    at = app.run()
    add_dataset()
    at.switch_page(PAGE).run()
    offered = at.multiselect(key="ft_optimizations").options
    assert "fake-fast" in offered and "gradient-checkpointing" in offered
    assert "fake-never" not in offered and "precision" not in offered
