"""IE Workstation: the host application (settings, plugins, engine, CLI, UI)."""

__version__ = "0.1.0"
