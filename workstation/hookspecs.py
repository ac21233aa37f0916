"""The hooks a plugin may implement. Built-ins implement them exactly like third-party plugins."""
from __future__ import annotations

from typing import Callable

import pluggy

hookspec = pluggy.HookspecMarker("ie_workstation")
hookimpl = pluggy.HookimplMarker("ie_workstation")


@hookspec
def register_models(register: Callable) -> None:
    """Call ``register(family)`` for each `workstation.models.ModelFamily` the plugin provides."""


@hookspec
def register_optimizations(register: Callable) -> None:
    """Call ``register(optimization)`` for each `workstation.optimizations.Optimization` the plugin provides."""


@hookspec
def register_exporters(register: Callable) -> None:
    """Call ``register(exporter)`` for each export format (`storage.exporters.Exporter`: name, suffix, write)."""
