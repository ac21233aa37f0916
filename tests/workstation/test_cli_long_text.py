"""`extract` names no model's switch: a long text is read whole through the model's own option (--option), and
the hint after a run that cut texts names the option the model declares (`ModelFamily.whole_text_option`).

The UI tests' fake model stands in: with the option read_last=N it reads only a text's last N characters,
unless long_text is "window"."""
import json

import pytest

from tests.registered import plugin_registered
from tests.workstation.ui.fake_plugin import FakeFamily
from workstation import cli

LINE = {"id": "1", "text": "Alice met Bob", "schema": {"Alice": None}}


@pytest.fixture
def fake_weights(tmp_path):
    from tests.workstation.ui.fake_plugin import FakePlugin
    with plugin_registered(FakePlugin(), "cli-long-text-fake") as plugin:
        yield plugin.family.write_demo_weights(tmp_path / "fake-weights")


def extract(tmp_path, weights, capsys, *extra) -> tuple[int, str]:
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps(LINE) + "\n", "utf-8")
    code = cli.main(["extract", "--model", "fakeie", "--weights", str(weights), "--input", str(inp),
                     "--output", str(tmp_path / "out.jsonl"), "--device", "cpu", "--no-record", *extra])
    return code, capsys.readouterr().err


def test_a_cut_run_hints_the_option_the_model_declares_and_that_option_reads_it_all(tmp_path, fake_weights, capsys):
    code, err = extract(tmp_path, fake_weights, capsys, "--option", "read_last=3")
    assert code == 0 and "1 of 1 document was cut (read partly) (--option long_text=window reads all of them)" in err
    code, err = extract(tmp_path, fake_weights, capsys, "--option", "read_last=3", "--option", "long_text=window")
    assert code == 0 and "0 of 1 document were cut (read partly)\n" in err


def test_the_hint_follows_the_declaration_not_an_option_name(tmp_path, fake_weights, capsys, monkeypatch):
    monkeypatch.setattr(FakeFamily, "whole_text_option", None)          # it has a long_text option, but says nothing
    code, err = extract(tmp_path, fake_weights, capsys, "--option", "read_last=3")
    assert code == 0 and "1 of 1 document was cut (read partly)\n" in err and "reads all" not in err
    monkeypatch.setattr(FakeFamily, "whole_text_option", ("read_last", 0))
    code, err = extract(tmp_path, fake_weights, capsys, "--option", "read_last=3")
    assert code == 0 and "(--option read_last=0 reads all of them)" in err


def test_the_long_text_flag_is_refused_pointing_to_the_model_option(tmp_path, fake_weights, capsys):
    code, err = extract(tmp_path, fake_weights, capsys, "--long-text", "window")
    assert code == 2 and "--option long_text=window" in err
    assert not (tmp_path / "out.jsonl").exists()
    with pytest.raises(SystemExit):
        cli.main(["extract", "--help"])
    assert "--option" in (help_text := capsys.readouterr().out) and "--long-text" not in help_text
