"""A plugin registered for one test: the host's own plugins loaded first (so the built-ins stay where they
are), then this one, unregistered afterwards whatever the test did."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, TypeVar

P = TypeVar("P")


@contextmanager
def plugin_registered(plugin: P, name: str) -> Iterator[P]:
    from workstation import plugins
    plugins.load_plugins()
    plugins.pm.register(plugin, name=name)
    try:
        yield plugin
    finally:
        plugins.pm.unregister(name=name)
