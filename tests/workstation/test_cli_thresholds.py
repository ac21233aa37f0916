"""`launcher.py extract --thresholds saved|FILE`: opt-in, applied to the output, recorded with the run.

The UI tests' fake model stands in, for its one known confidence: it labels a `[CLASSIFY]` text with
the schema's first type at confidence 0.75. RexUniNLU's own span confidences through `--thresholds saved`:
tests/workstation/quality/test_rexuninlu_thresholds.py."""
import json

import pytest

from storage import open_store
from tests.registered import plugin_registered
from workstation import cli
from workstation.settings import Settings

LINE = {"id": "c", "text": "[CLASSIFY]很好看", "schema": {"正向": None, "负向": None}}


@pytest.fixture
def fake_weights(tmp_path):
    """The fake model registered for one test, and its weights."""
    from tests.workstation.ui.fake_plugin import FakePlugin
    with plugin_registered(FakePlugin(), "cli-thresholds-fake") as plugin:
        yield plugin.family.write_demo_weights(tmp_path / "fake-weights")


def run(tmp_path, weights, *extra):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps(LINE, ensure_ascii=False) + "\n", "utf-8")
    out = tmp_path / "out.jsonl"
    code = cli.main(["extract", "--model", "fakeie", "--weights", str(weights), "--input", str(inp),
                     "--output", str(out), "--device", "cpu", *extra])
    return code, [json.loads(l) for l in out.read_text("utf-8").splitlines()] if out.exists() else None


def test_a_threshold_file_leaves_out_labels_below_it(tmp_path, fake_weights):
    code, [plain] = run(tmp_path, fake_weights, "--no-record")
    [[label]] = plain["output"]
    assert code == 0 and label["confidence"] == 0.75
    below = tmp_path / "t.json"
    below.write_text(json.dumps({label["type"]: label["confidence"]}), "utf-8")
    assert run(tmp_path, fake_weights, "--no-record", "--thresholds", str(below))[1][0]["output"] == plain["output"]
    above = tmp_path / "t2.json"
    above.write_text(json.dumps({label["type"]: min(1.0, label["confidence"] + 1e-6)}), "utf-8")
    code, [strict] = run(tmp_path, fake_weights, "--no-record", "--thresholds", str(above))
    assert code == 0 and strict["output"] == [] and "confidence thresholds left out 1" in strict["warnings"][0]


def test_saved_thresholds_are_applied_and_recorded(tmp_path, fake_weights, monkeypatch):
    db = tmp_path / "runs.db"
    monkeypatch.setattr(cli, "load_settings", lambda: Settings(database=str(db)))
    store = open_store(db)
    store.save_thresholds("fakeie", fake_weights, {"正向": 0.5, "负向": 0.5}, {}, "gold")
    store.close()
    code, _ = run(tmp_path, fake_weights, "--thresholds", "saved")
    assert code == 0
    store = open_store(db)
    [summary] = store.search_runs()
    assert store.get_run(summary.id).settings["thresholds"] == {"正向": 0.5, "负向": 0.5}
    store.close()


def test_missing_or_bad_thresholds_are_clear_errors_and_write_nothing(tmp_path, fake_weights, monkeypatch, capsys):
    monkeypatch.setattr(cli, "load_settings", lambda: Settings(database=str(tmp_path / "runs.db")))
    assert run(tmp_path, fake_weights, "--no-record", "--thresholds", "saved") == (2, None)
    assert "no thresholds are saved" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"正向": 7}', "utf-8")
    assert run(tmp_path, fake_weights, "--no-record", "--thresholds", str(bad)) == (2, None)
    assert "from 0 to 1" in capsys.readouterr().err
    assert run(tmp_path, fake_weights, "--no-record", "--thresholds", str(tmp_path / "nope.json"))[0] == 2
