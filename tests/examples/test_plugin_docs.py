"""docs/plugins.md, followed to the letter: its example distribution is built from the page's own code blocks,
pip-installed, run through its entry point in a child process, and uninstalled again.

The distribution gets a unique name, so parallel runs never share one, and it is uninstalled whatever happens.
While it is installed, other tests do not see it: in this process installed plugins are never loaded, and the
processes tests start load only what IEW_LOAD_PLUGINS names (tests/conftest.py); both are checked here.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

from tests.examples.conftest import ROOT

DOCS = ROOT / "docs" / "plugins.md"
BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```\w*\n(?P<body>.*?)\n```", re.DOTALL)
PREFIX = "iew-docs-check-"


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=300)


def write_distribution(folder: Path, name: str, module: str) -> Path:
    """The files the page shows, under the unique names."""
    blocks = list(BLOCK.finditer(DOCS.read_text("utf-8")))
    assert {b["path"] for b in blocks} == {"iew-extras/pyproject.toml", "iew-extras/iew_extras.py"}
    for block in blocks:
        path = folder / block["path"].replace("iew-extras", name).replace("iew_extras", module)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block["body"].replace("iew-extras", name).replace("iew_extras", module) + "\n", "utf-8")
    return folder / name


def remove_stale_copies() -> None:
    """Earlier runs killed before they could uninstall left a distribution whose folder is gone: remove it."""
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.startswith(PREFIX):
            url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
            if not Path(url.removeprefix("file://")).exists():
                pip("uninstall", "-y", name)


def child(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **env})


RUN = """
import json, sys
from storage import open_store
from workstation import plugins
from workstation.cli import main
from workstation.exports import export_runs
from workstation.settings import load_settings
folder = sys.argv[1]
code = main(["extract", "--model", "gazetteer", "--input", folder + "/in.jsonl", "--output", folder + "/out.jsonl",
             "--weights", folder + "/dictionaries", "--optimizations", "cpu-threads"])
s = load_settings()
store = open_store(s.path(s.database))
[run] = store.search_runs()
report = export_runs(store, [run.id], "tsv", folder + "/run.tsv")
print(json.dumps({"code": code, "optimizations": run.optimizations, "table": plugins.plugin_table(),
                  "report": [report.documents, report.spans, report.invalid, report.format]}))
"""
REGISTRIES = ("import json; from workstation import plugins; "
              "print(json.dumps([list(plugins.optimizations()), list(plugins.exporters())]))")


def test_the_example_distribution_of_the_plugin_guide_installs_and_runs_as_written(tmp_path):
    from workstation import plugins
    remove_stale_copies()
    unique = uuid.uuid4().hex[:10]
    name, module = PREFIX + unique, "iew_docs_check_" + unique
    source = write_distribution(tmp_path / "src", name, module)
    installed = pip("install", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-e", str(source))
    try:
        assert installed.returncode == 0, installed.stderr
        (tmp_path / "dictionaries").mkdir()
        (tmp_path / "dictionaries" / "formula.txt").write_text("=1+1\n", "utf-8")
        (tmp_path / "in.jsonl").write_text(json.dumps(
            {"id": "a", "text": "北京 and =1+1", "schema": {"城市": None, "formula": None}}, ensure_ascii=False) + "\n",
            "utf-8")
        (tmp_path / "settings.toml").write_text(f'[storage]\ndatabase = "{tmp_path / "runs.db"}"\n', "utf-8")
        done = child(RUN, str(tmp_path), IEW_LOAD_PLUGINS=f"iew-gazetteer,{name}",
                     IEW_SETTINGS=str(tmp_path / "settings.toml"), IEW_CPU_THREADS="1")
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.splitlines()[-1])
        assert seen["code"] == 0 and seen["optimizations"] == {"cpu-threads": "1 thread(s)"}
        assert seen["report"] == [1, 2, 0, "tsv"]
        assert (tmp_path / "run.tsv").read_text("utf-8").splitlines() == [
            "run\tdocument\ttype\tstart\tend\tspan", "1\ta\t城市\t0\t2\t北京", "1\ta\tformula\t7\t11\t'=1+1"]
        [row] = [r for r in seen["table"] if r["name"] == name]
        assert row == {"name": name, "version": "0.1.0", "source": f"installed ({name})",
                       "hooks": ["register_exporters", "register_optimizations"], "distribution": name,
                       "registered": {"optimizations": ["cpu-threads"], "exporters": ["tsv"]}}
        # Installed, yet nowhere else: not in this process, not in a process started without naming it.
        assert "cpu-threads" not in plugins.optimizations() and "tsv" not in plugins.exporters()
        unnamed = child(REGISTRIES)
        assert unnamed.returncode == 0 and json.loads(unnamed.stdout) == [list(plugins.optimizations()),
                                                                          list(plugins.exporters())]
    finally:
        removed = pip("uninstall", "-y", name)
    assert removed.returncode == 0, removed.stderr
    assert not [d for d in importlib.metadata.distributions() if d.metadata["Name"] == name]


def test_every_hook_and_every_member_of_the_contracts_is_in_the_guide():
    import dataclasses

    from contracts import (
        Capability,
        Exporter,
        ExportReport,
        FlatSchema,
        Kernel,
        Knobs,
        LoadedModel,
        ModelFamily,
        Optimization,
        Reads,
        RuleModel,
        hookspecs,
        testing,
    )
    text = DOCS.read_text("utf-8")
    hooks = [n for n, f in vars(hookspecs).items() if callable(f) and hasattr(f, "ie_workstation_spec")]
    members = [n for cls in (ModelFamily, LoadedModel, Optimization, RuleModel, FlatSchema) for n in vars(cls)
               if not n.startswith("_")]
    members += [n for n, f in vars(testing).items() if getattr(f, "__module__", "") == testing.__name__]
    fields = [f.name for cls in (Exporter, ExportReport, Knobs) for f in dataclasses.fields(cls)] + ["message"]
    constants = [f"{cls.__name__}.{m.name}" for cls in (Reads, Capability, Kernel) for m in cls]
    missing = [n for n in hooks + members + fields if f"`{n}" not in text] + [c for c in constants if c not in text]
    assert len(hooks) == 3 and not missing, missing
