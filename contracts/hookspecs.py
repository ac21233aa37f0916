"""The hooks a plugin may implement. Built-ins implement them exactly like third-party plugins.

A plugin module (or object) decorates its functions with `hookimpl` and is listed under the entry-point
group `ie_workstation` of its distribution (docs/plugins.md).
"""
from __future__ import annotations

from typing import Callable

import pluggy

PROJECT = "ie_workstation"          # the pluggy project name and the entry-point group

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_models(register: Callable) -> None:
    """Call ``register(family)`` for each `contracts.model.ModelFamily` the plugin provides."""


@hookspec
def register_optimizations(register: Callable) -> None:
    """Call ``register(optimization)`` for each `contracts.optimization.Optimization` the plugin provides."""


@hookspec
def register_exporters(register: Callable) -> None:
    """Call ``register(exporter)`` for each export format (`contracts.exporter.Exporter`)."""
