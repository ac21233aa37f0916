"""What an optimization needs before CUDA starts is its own declaration (`Optimization.environment`): the
launcher sets it when settings.toml enables that optimization, whatever its name."""
from __future__ import annotations

import os

import pytest

from contracts.hookspecs import hookimpl
from contracts.optimization import Optimization
from tests.registered import plugin_registered
from workstation import cli, plugins
from workstation.settings import Settings

VARIABLE = "IEW_TEST_ALLOCATOR"


class NeedsEnvironment(Optimization):
    name = "needs-environment"
    title = "Needs an environment variable"
    description = "Declares a variable its library reads once, at start."
    environment = {VARIABLE: "grow"}

    def applies_to(self, model):
        return True, "any model"

    def enable(self, model, **params) -> str:
        return "on"

    def disable(self, model) -> None:
        pass


class Plugin:
    @hookimpl
    def register_optimizations(self, register):
        register(NeedsEnvironment())


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setenv(VARIABLE, "")            # recorded, so the test leaves the variable as it found it
    monkeypatch.delenv(VARIABLE)
    with plugin_registered(Plugin(), "needs-environment-plugin"):
        yield monkeypatch


def test_the_launcher_sets_what_an_enabled_optimization_declares(registered, tmp_path):
    registered.setattr(cli, "load_settings", lambda *a: Settings(optimizations=["needs-environment"]))
    assert cli.main(["extract", "--model", "nosuch", "--input", str(tmp_path / "in.jsonl"),
                     "--output", str(tmp_path / "out.jsonl")]) == 2          # any command: set before it runs
    assert os.environ[VARIABLE] == "grow"


def test_nothing_is_set_for_an_optimization_that_is_not_enabled_and_a_set_value_is_kept(registered):
    assert plugins.environment_for([]) == {} and plugins.environment_for(["precision", "nobody"]) == {}
    assert plugins.environment_for(["needs-environment"]) == {VARIABLE: "grow"}
    registered.setenv(VARIABLE, "mine")
    registered.setattr(cli, "load_settings", lambda *a: Settings(optimizations=["needs-environment"]))
    cli.main(["extract", "--model", "nosuch", "--input", "x", "--output", "y"])
    assert os.environ[VARIABLE] == "mine"


def test_the_memory_pool_declares_the_allocator_setting_it_needs():
    assert plugins.environment_for(["memory-pool"]) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
