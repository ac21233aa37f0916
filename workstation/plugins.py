"""The plugin manager: every plugin, built-in or installed, comes from the entry-point group `ie_workstation`.

The built-ins are entry points of this distribution (pyproject.toml), so they are found exactly as a
third-party plugin is (docs/plugins.md). A source tree that was never installed (no distribution
metadata) reads the same table from pyproject.toml, so the built-ins never depend on how the code got here.

Environment switches:
  IEW_LOAD_PLUGINS=a,b   besides the built-ins, load only these installed distributions ("" = none; unset = all)
  IEW_TRACE_PLUGINS=1    print every hook call, its arguments and results to stderr (pluggy's tracing)
  IEW_BLOCK_PLUGINS=a,b  do not load these plugins (entry-point names), built-in ones included
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pluggy

from contracts import hookspecs
from contracts.domain import InputError
from contracts.hookspecs import PROJECT

ENTRY_POINT_GROUP = PROJECT
DISTRIBUTION = "ie-workstation"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

pm = pluggy.PluginManager(PROJECT)
pm.add_hookspecs(hookspecs)
_loaded = False


@dataclass(frozen=True)
class Source:
    """Where a plugin came from, for the Plugins page."""

    distribution: str
    version: str
    builtin: bool


_sources: dict[str, Source] = {}


def _entry_points() -> list[tuple[str, str, Source]]:
    """(name, module, source) of every plugin in the group: built-ins first, then installed ones by name."""
    found = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist else "?"
        version = ep.dist.version if ep.dist else "?"
        found.append((ep.name, ep.value, Source(dist, version, dist == DISTRIBUTION)))
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"] if PYPROJECT.is_file() else {}
    table = list(project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {}).items())
    if table and not any(src.builtin for _, _, src in found):
        found += [(name, value, Source(DISTRIBUTION, project["version"], True)) for name, value in table]
    # Built-ins in the order pyproject.toml lists them (models first: the UI's default is the first),
    # then installed plugins by distribution and name. Metadata alone keeps no order.
    order = {name: i for i, (name, _) in enumerate(table)}
    return sorted(found, key=lambda f: (not f[2].builtin, order.get(f[0], len(order)), f[2].distribution, f[0]))


def _wanted(source: Source) -> bool:
    if source.builtin:
        return True
    allow = os.environ.get("IEW_LOAD_PLUGINS")
    if allow is None:
        return True
    return source.distribution in {n.strip() for n in allow.split(",") if n.strip()}


def load_plugins() -> None:
    """Idempotent: import and register every wanted plugin, then check their hooks against the specs."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    blocked = {n.strip() for n in os.environ.get("IEW_BLOCK_PLUGINS", "").split(",") if n.strip()}
    if os.environ.get("IEW_TRACE_PLUGINS"):
        pm.add_hookcall_monitoring(_trace_before, _trace_after)
    for name, module_name, source in _entry_points():
        if name in blocked or module_name in blocked or not _wanted(source) or pm.has_plugin(name):
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            # A built-in whose optional dependency is missing is left out, not a crash; a broken third-party
            # plugin is reported by name.
            if source.builtin and e.name and not module_name.startswith(e.name):
                print(f"[plugins] built-in plugin {name!r} left out: {e}", file=sys.stderr)
                continue
            raise ImportError(f"plugin {name!r} from {source.distribution} could not be imported: {e}") from e
        if not pm.is_registered(module):
            pm.register(module, name=name)
            _sources[name] = source
    pm.check_pending()


def _trace(message: str) -> None:
    print(f"[plugins] {message}", file=sys.stderr, flush=True)


def _trace_before(hook_name, hook_impls, kwargs) -> None:
    _trace(f"call {hook_name}({', '.join(kwargs)}) -> {', '.join(i.plugin_name for i in hook_impls) or 'no plugin'}")


def _trace_after(outcome, hook_name, hook_impls, kwargs) -> None:
    error = outcome.exception
    _trace(f"done {hook_name}" + (f": {type(error).__name__}: {error}" if error else ""))


def _collect(hook_name: str, owners: dict[str, list[str]] | None = None) -> dict:
    """Call a `register_*` hook through pluggy, one plugin after the other in load order (pluggy itself
    calls the newest plugin first), and return name -> registered item. `owners` receives plugin name ->
    the names that plugin registered."""
    load_plugins()
    found: dict = {}

    def register(item):
        if item.name in found:
            raise ValueError(f"two plugins register the name {item.name!r}")
        found[item.name] = item
        if os.environ.get("IEW_TRACE_PLUGINS"):
            _trace(f"  registered {type(item).__name__} {item.name!r}")
    everyone = [plugin for _, plugin in pm.list_name_plugin()]
    for plugin in everyone:
        if not pm.get_hookcallers(plugin) or hook_name not in {h.name for h in pm.get_hookcallers(plugin)}:
            continue
        others = [p for p in everyone if p is not plugin]
        before = len(found)
        pm.subset_hook_caller(hook_name, remove_plugins=others)(register=register)
        if owners is not None:
            owners[pm.get_name(plugin)] = list(found)[before:]
    return found


def model_families() -> dict:
    """name -> ModelFamily, in load order."""
    return _collect("register_models")


def optimizations() -> dict:
    """name -> Optimization, in load order."""
    return _collect("register_optimizations")


def exporters() -> dict:
    """name -> Exporter, in load order."""
    return _collect("register_exporters")


def default_model() -> str:
    """The model a command runs when none is named: the first installed family in load order (the built-ins
    as pyproject.toml lists them, then installed plugins), which is also the UI's first choice."""
    families = model_families()
    if not families:
        raise InputError("no model plugin is installed (docs/plugins.md says how to add one)")
    return next(iter(families))


def environment_for(names) -> dict[str, str]:
    """The environment variables the named optimizations declare (`Optimization.environment`), for the launcher
    to set before CUDA starts; a name nobody registered adds nothing (the run names it). No names: no plugin load."""
    if not names:
        return {}
    registered = optimizations()
    return {key: value for name in names if name in registered for key, value in registered[name].environment.items()}


def training_optimizations() -> dict:
    """name -> Optimization that acts in fine-tuning (it declares `training`), in load order."""
    return {name: o for name, o in optimizations().items() if o.training}


# What each register_* hook adds, by the word `launcher.py plugins` and the Plugins page use.
REGISTRIES = {"models": "register_models", "optimizations": "register_optimizations",
              "exporters": "register_exporters"}


def plugin_table() -> list[dict]:
    """Every loaded plugin: name, version, where it came from (and its distribution), its hooks, and what it
    registered: {"models": [...], "optimizations": [...], "exporters": [...]}, the kinds it has none of left out
    (the Plugins page and `launcher.py plugins`)."""
    load_plugins()
    owners: dict[str, dict[str, list[str]]] = {}
    for kind, hook_name in REGISTRIES.items():
        by_plugin: dict[str, list[str]] = {}
        _collect(hook_name, by_plugin)
        for name, registered in by_plugin.items():
            if registered:
                owners.setdefault(name, {})[kind] = registered
    rows = []
    for name, plugin in pm.list_name_plugin():
        source = _sources.get(name)
        if source is None:          # registered by code at run time (a notebook, a script), not from an entry point
            where, version = "in-process", str(getattr(plugin, "__version__", "?"))
        else:
            where = "built-in" if source.builtin else f"installed ({source.distribution})"
            version = source.version
        rows.append({
            "name": name,
            "version": version,
            "source": where,
            "hooks": sorted(h.name for h in (pm.get_hookcallers(plugin) or [])),
            "distribution": source.distribution if source else None,
            "registered": owners.get(name, {}),
        })
    return rows
