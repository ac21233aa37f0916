"""The plugin author's commands: `plugins` (who registered what), `export --run ID --format NAME` (any
registered format, a plugin's too), `extract --help` naming the models, and `new-plugin` writing a distribution
that installs and passes its own tests as written."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from contracts import Document, Exporter, ExportReport, Result, RunReport, Span, hookimpl
from tests.registered import plugin_registered
from workstation.cli import main


@pytest.fixture
def history(tmp_path, monkeypatch, store):
    """settings.toml pointing at the `store` fixture's database, with one run of two documents recorded."""
    from workstation import settings
    path = tmp_path / "settings.toml"
    path.write_text(f'[storage]\ndatabase = "{tmp_path / "runs.db"}"\n', "utf-8")
    monkeypatch.setattr(settings, "DEFAULT_PATH", path)
    report = RunReport("rexuninlu", "w", False, "cpu", "fp32", "sdpa", {}, 1, {}, "2024-03-05T00:00:00+00:00",
                       documents=2, results=[Result("a", [[Span("城市", "杭州", (0, 2))]]), Result("b", [])])
    store.record_run(report, [Document("a", "杭州很美", {"城市": None}), Document("b", "无", {"城市": None})], "cli")
    return store


class Initials:
    """A throwaway plugin with an export format: each span's first character, one a line."""

    @staticmethod
    def write(runs, path):
        spans = [s.span[0] for run in runs for _, r in run.items for t in r.tuples for s in t]
        path.write_text("\n".join(spans) + "\n", encoding="utf-8")
        return ExportReport(documents=sum(len(run.items) for run in runs), spans=len(spans))

    @staticmethod
    @hookimpl
    def register_exporters(register):
        register(Exporter("initials", ".initials.txt", Initials.write, "First characters", "text/plain"))


@pytest.fixture
def initials():
    with plugin_registered(Initials, "initials-plugin"):
        yield


def test_export_writes_a_run_in_a_plugin_s_format_to_the_named_file(history, initials, tmp_path, capsys):
    assert main(["export", "--run", "1", "--format", "initials", "--output", str(tmp_path / "out.txt")]) == 0
    assert (tmp_path / "out.txt").read_text("utf-8") == "杭\n"
    assert "2 documents, 1 span; initials: " in capsys.readouterr().err


def test_export_without_output_names_the_file_after_the_run_and_the_format(history, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["export", "--run", "1", "--format", "jsonl"]) == 0
    lines = [json.loads(line) for line in (tmp_path / "run-1.jsonl").read_text("utf-8").splitlines()]
    assert [(line["id"], line["output"]) for line in lines] == [
        ("a", [[{"type": "城市", "span": "杭州", "offset": [0, 2]}]]), ("b", [])]


def test_an_unknown_format_exits_2_listing_the_available_ones(history, initials, tmp_path, capsys):
    assert main(["export", "--run", "1", "--format", "pdf", "--output", str(tmp_path / "x.pdf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown export format 'pdf'; available: jsonl, csv, excel") and "initials" in err
    assert not (tmp_path / "x.pdf").exists()


def test_an_unknown_run_exits_2_naming_it(history, tmp_path, capsys):
    assert main(["export", "--run", "7", "--format", "csv", "--output", str(tmp_path / "x.csv")]) == 2
    assert "--run 7: run 7 is not in the history" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()


def test_plugins_lists_each_plugin_with_its_distribution_and_what_it_registered(initials, capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "exporters  ie-workstation " in out and "exporters: jsonl, csv, excel, parquet, label-studio, doccano" in out
    assert "fused-attention  ie-workstation" in out and "optimizations: flash-attention" in out
    assert "initials-plugin  in-process" in out and "exporters: initials" in out
    assert main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["rexuninlu"]["registered"] == {"models": ["rexuninlu"]}
    assert (rows["rexuninlu"]["distribution"], rows["rexuninlu"]["source"]) == ("ie-workstation", "built-in")
    assert rows["initials-plugin"]["distribution"] is None and rows["initials-plugin"]["hooks"] == ["register_exporters"]


def test_extract_help_names_the_installed_models(capsys):
    with pytest.raises(SystemExit) as done:
        main(["extract", "--help"])
    assert done.value.code == 0
    assert "the model: rexuninlu, seqgpt" in " ".join(capsys.readouterr().out.split())


def test_new_plugin_refuses_a_folder_that_exists_and_a_name_already_registered(tmp_path, capsys):
    (tmp_path / "iew-taken").mkdir()
    assert main(["new-plugin", "iew-taken", "--dir", str(tmp_path)]) == 2
    assert "iew-taken already exists" in capsys.readouterr().err
    assert main(["new-plugin", "iew-seqgpt", "--dir", str(tmp_path)]) == 2
    assert "a model named 'seqgpt' is already registered" in capsys.readouterr().err
    assert main(["new-plugin", "1st plugin", "--dir", str(tmp_path)]) == 2
    assert "a distribution name is letters, digits" in capsys.readouterr().err


PREFIX = "iew-skeleton-check-"


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                          capture_output=True, text=True, timeout=300)


def test_new_plugin_skeletons_install_and_pass_their_own_tests_as_written(tmp_path):
    unique = uuid.uuid4().hex[:8]
    names = {"model": f"{PREFIX}m{unique}", "exporter": f"{PREFIX}e{unique}"}
    for kind, name in names.items():
        assert main(["new-plugin", name, "--kind", kind, "--dir", str(tmp_path)]) == 0
    folders = [str(tmp_path / name) for name in names.values()]
    # Offline, with the setuptools this environment has: no index, no build isolation, no dependencies to fetch.
    installed = pip("install", "--no-deps", "--no-build-isolation", "--no-index",
                    *[arg for folder in folders for arg in ("-e", folder)])
    try:
        assert installed.returncode == 0, installed.stderr
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "IEW_"))}
        tested = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *folders],
                                cwd=tmp_path, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                                timeout=600)
        assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
        assert "6 passed" in tested.stdout
    finally:
        removed = pip("uninstall", "-y", *names.values())
    assert removed.returncode == 0, removed.stderr
    from importlib.metadata import distributions
    assert not [d for d in distributions() if d.metadata["Name"] in names.values()]
