"""`launcher.py weights use | list | fetch` through the CLI's own entry point (workstation.cli.main)."""
from __future__ import annotations

import shutil

import pytest

from workstation.cli import main
from workstation.settings import load_settings


@pytest.fixture
def official_copy(tmp_path, tiny_checkpoints):
    """A checkpoint folder as a person might have downloaded it by hand (no demo marker)."""
    def copy(name: str):
        folder = tmp_path / f"{name}-by-hand"
        shutil.copytree(tiny_checkpoints[name], folder, ignore=shutil.ignore_patterns("RANDOM_DEMO_WEIGHTS.txt"))
        return folder
    return copy


def test_weights_use_checks_a_good_folder_and_points_settings_at_it(official_copy, settings_file, capsys):
    folder = official_copy("rexuninlu")
    assert main(["weights", "use", "rexuninlu", str(folder)]) == 0
    assert "2 layers" in capsys.readouterr().out
    text = settings_file.read_text("utf-8")
    assert "# the RexUniNLU checkpoint" in text and 'device = "cpu"        # stays' in text
    assert load_settings(settings_file).weights_for("rexuninlu") == (folder, False)


def test_weights_use_adds_a_model_table_settings_lacked(official_copy, settings_file):
    folder = official_copy("seqgpt")
    assert main(["weights", "use", "seqgpt", str(folder)]) == 0
    assert load_settings(settings_file).weights_for("seqgpt") == (folder, False)
    assert "# the RexUniNLU checkpoint" in settings_file.read_text("utf-8")


def _refused(args, settings_file, capsys) -> str:
    before = settings_file.read_text("utf-8")
    assert main(args) == 1
    assert settings_file.read_text("utf-8") == before, "a refused folder leaves settings.toml as it was"
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_weights_use_names_a_seqgpt_folder_given_for_rexuninlu(official_copy, settings_file, capsys):
    err = _refused(["weights", "use", "rexuninlu", str(official_copy("seqgpt"))], settings_file, capsys)
    assert "'bloom' model" in err and "not RexUniNLU's 'deberta-v2'" in err


def test_weights_use_names_a_rexuninlu_folder_given_for_seqgpt(official_copy, settings_file, capsys):
    err = _refused(["weights", "use", "seqgpt", str(official_copy("rexuninlu"))], settings_file, capsys)
    assert "'deberta-v2' model, not BLOOM" in err


def test_weights_use_refuses_a_half_downloaded_folder(official_copy, settings_file, capsys):
    folder = official_copy("seqgpt")
    (folder / "pytorch_model.bin").rename(folder / "pytorch_model.bin.incomplete")
    err = _refused(["weights", "use", "seqgpt", str(folder)], settings_file, capsys)
    assert "half-finished download (pytorch_model.bin.incomplete)" in err and "weights fetch seqgpt" in err


def test_weights_use_refuses_truncated_weights(official_copy, settings_file, capsys):
    folder = official_copy("rexuninlu")
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    err = _refused(["weights", "use", "rexuninlu", str(folder)], settings_file, capsys)
    assert "pytorch_model.bin could not be read" in err and "incomplete" in err


def test_weights_use_refuses_a_foreign_vocabulary(official_copy, settings_file, capsys):
    folder = official_copy("rexuninlu")
    lines = (folder / "vocab.txt").read_text("utf-8").splitlines()
    lines[1], lines[2] = lines[2], lines[1]                      # [CLS] and [SEP] swapped
    (folder / "vocab.txt").write_text("\n".join(lines) + "\n", "utf-8")
    err = _refused(["weights", "use", "rexuninlu", str(folder)], settings_file, capsys)
    assert "[CLS] is id 2 (expected 1)" in err


def test_weights_use_refuses_demo_weights(tiny_checkpoints, settings_file, capsys):
    err = _refused(["weights", "use", "seqgpt", str(tiny_checkpoints["seqgpt"])], settings_file, capsys)
    assert "random demo weights" in err


def test_weights_list_says_demo_source_and_whether_each_loads(official_copy, settings_file, tmp_path, capsys,
                                                             tiny_checkpoints):
    demo_root = tmp_path / "demo"
    shutil.copytree(tiny_checkpoints["seqgpt"], demo_root / "seqgpt-tiny")
    with open(settings_file, "a", encoding="utf-8") as f:                 # [storage] is the file's last table
        f.write(f'demo_weights_dir = "{demo_root.as_posix()}"\ndemo_size = "tiny"\n')
    folder = official_copy("rexuninlu")
    assert main(["weights", "use", "rexuninlu", str(folder)]) == 0
    capsys.readouterr()
    assert main(["weights", "list"]) == 0
    out = capsys.readouterr().out
    rex, seq = out.split("seqgpt:")
    assert str(folder) in rex and "real weights; source: a local folder" in rex and "loads: RexUniNLU" in rex
    assert "DEMO (random weights" in seq and "loads: SeqGPT" in seq and "weights fetch seqgpt" in seq


def test_weights_fetch_all_prints_one_line_per_failure_and_exits_non_zero(hub, settings_file, capsys):
    hub.repos.clear()
    assert main(["weights", "fetch", "all", "--dir", str(settings_file.parent / "w")]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 2 and all("(404)" in ln for ln in err)


def test_weights_fetch_prints_the_folder_and_the_switch(hub, settings_file, capsys):
    assert main(["weights", "fetch", "seqgpt", "--dir", str(settings_file.parent / "w")]) == 0
    out = capsys.readouterr()
    assert "settings.toml now uses it" in out.out and "seqgpt: [" in out.err     # the progress bar
