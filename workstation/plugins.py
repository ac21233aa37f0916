"""The plugin manager: built-ins and installed plugins, registered the same way (the `llm`/`datasette` idiom).

Environment switches:
  IEW_LOAD_PLUGINS=a,b   load only these installed distributions' entry points ("" = none)
  IEW_TRACE_PLUGINS=1    print every hook call to stderr
  IEW_BLOCK_PLUGINS=a,b  do not load these plugins, built-in ones included (by name)
"""
from __future__ import annotations

import importlib
import os
import sys

import pluggy

from workstation import hookspecs

ENTRY_POINT_GROUP = "ie_workstation"

DEFAULT_PLUGINS = (
    "plugins.rexuninlu",
    "plugins.seqgpt",
    "plugins.optimizations.precision",
    "plugins.optimizations.fused_attention",
    "plugins.optimizations.sparse_mask",
    "plugins.optimizations.memory_pool",
    "plugins.optimizations.gradient_checkpointing",
    "storage.exporters",
)

pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
pm.add_hookspecs(hookspecs)
_loaded = False


def load_plugins() -> None:
    """Idempotent. Built-ins that are not installed yet (a module missing) are skipped silently."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    if not getattr(sys, "_called_from_test", False):
        allow = os.environ.get("IEW_LOAD_PLUGINS")
        if allow is None:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        else:
            for name in filter(None, (n.strip() for n in allow.split(","))):
                pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=name)
    for name in filter(None, (n.strip() for n in os.environ.get("IEW_BLOCK_PLUGINS", "").split(","))):
        pm.set_blocked(name)
    for module_name in DEFAULT_PLUGINS:
        if pm.is_blocked(module_name):
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and module_name.startswith(e.name):
                continue                      # a built-in not part of this build
            raise
        if not pm.is_registered(module):
            pm.register(module, name=module_name)
    pm.check_pending()
    if os.environ.get("IEW_TRACE_PLUGINS"):
        def before(hook_name, hook_impls, kwargs):
            print(f"[plugins] {hook_name} -> {[i.plugin_name for i in hook_impls]}", file=sys.stderr)

        def after(outcome, hook_name, hook_impls, kwargs):
            pass
        pm.add_hookcall_monitoring(before, after)


def _collect(hook) -> dict:
    load_plugins()
    found: dict = {}

    def register(item):
        if item.name in found:
            raise ValueError(f"two plugins register the name {item.name!r}")
        found[item.name] = item
    # pluggy calls the newest registration first; walk the implementations in registration order.
    for impl in hook.get_hookimpls():
        impl.function(**{name: register for name in impl.argnames if name == "register"})
    return found


def model_families() -> dict:
    """name -> ModelFamily, in registration order."""
    return _collect(pm.hook.register_models)


def optimizations() -> dict:
    """name -> Optimization, in registration order."""
    return _collect(pm.hook.register_optimizations)


def exporters() -> dict:
    """name -> Exporter, in registration order."""
    return _collect(pm.hook.register_exporters)


def plugin_table() -> list[dict]:
    """Every loaded plugin: name, version, where it came from, its hooks (for the Plugins page)."""
    load_plugins()
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    rows = []
    for name, plugin in pm.list_name_plugin():
        dist = dists.get(id(plugin))
        rows.append({
            "name": name,
            "version": dist.version if dist else _builtin_version(),
            "source": f"installed ({dist.metadata['Name']})" if dist else "built-in",
            "hooks": sorted(h.name for h in (pm.get_hookcallers(plugin) or [])),
        })
    return rows


def _builtin_version() -> str:
    from workstation import __version__
    return __version__
