"""The architecture, checked: layers that import one way, built-ins found as entry points, hooks traced."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_the_packages_import_one_way_down_the_layers_without_cycles():
    # import-linter reads the layers from pyproject.toml: contracts < storage | plugins < workstation < benchmarks.
    done = subprocess.run([str(BIN / "lint-imports"), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_contracts_layer_imports_nothing_of_ours(tmp_path):
    # A plugin author's view: only `contracts` on the path (no workstation, storage or plugins next to it).
    (tmp_path / "contracts").symlink_to(ROOT / "contracts")
    code = ("import sys, contracts, contracts.exporter, contracts.report, contracts.torch.checkpoints, contracts.batching;"
            "ours = {'workstation', 'storage', 'plugins', 'benchmarks'};"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ours))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_built_in_plugin_is_an_entry_point_of_the_installed_distribution():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["ie_workstation"]
    assert {"rexuninlu", "seqgpt", "precision", "exporters"} <= set(declared)
    installed = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="ie_workstation")
                 if ep.dist and ep.dist.name == "ie-workstation"}
    assert installed == declared, "the workstation is not installed from this pyproject.toml (launcher.py does it)"
    from workstation import plugins
    plugins.load_plugins()
    loaded = {name for name, _ in plugins.pm.list_name_plugin()}
    assert set(declared) <= loaded


def test_tracing_prints_every_hook_call(tmp_path):
    env = {**os.environ, "IEW_TRACE_PLUGINS": "1", "CUDA_VISIBLE_DEVICES": "", "IEW_LOAD_PLUGINS": ""}
    code = "from workstation import plugins; plugins.model_families(); plugins.optimizations(); plugins.exporters()"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr
    for hook, plugin in (("register_models", "rexuninlu"), ("register_optimizations", "precision"),
                         ("register_exporters", "exporters")):
        assert f"call {hook}(register) -> {plugin}" in done.stderr, done.stderr[-2000:]
        assert f"done {hook}" in done.stderr
    assert "registered RexUniNLU 'rexuninlu'" in done.stderr
