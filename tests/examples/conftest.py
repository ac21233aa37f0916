"""The example plugin (examples/gazetteer), installed as a plugin's user installs it.

`python3 launcher.py test` installs requirements-examples.txt (an editable install and pyahocorasick); a
plain `pytest` run installs it here the same way, once (launcher.install is stamped). In this process the
tests register the plugin module on the plugin manager, as docs/plugins.md shows, because tests load
installed plugins only when IEW_LOAD_PLUGINS names them; processes they start name it to go through the
entry point.
"""
from __future__ import annotations

import fcntl
import importlib.util
import site
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "iew-gazetteer"


def ensure_installed() -> None:
    import launcher
    with open(launcher.VENV / ".install-examples.lock", "w") as lock:     # pytest-xdist workers take turns
        fcntl.flock(lock, fcntl.LOCK_EX)
        launcher.install(ROOT / "requirements-examples.txt")
    if importlib.util.find_spec("iew_gazetteer") is None:
        # Installed after this process started: the editable install's .pth (its import hook) is read at start,
        # so read the venv's .pth files again as Python did then. site-packages is on sys.path already.
        site.addsitedir(sysconfig.get_path("purelib"))


ensure_installed()


@pytest.fixture
def gazetteer_plugin():
    """The gazetteer's plugin module, registered on the plugin manager for one test."""
    import iew_gazetteer

    from workstation import plugins
    plugins.load_plugins()
    if plugins.pm.is_registered(iew_gazetteer):                # IEW_LOAD_PLUGINS named it for this run
        yield iew_gazetteer
        return
    plugins.pm.register(iew_gazetteer, name="gazetteer")
    try:
        yield iew_gazetteer
    finally:
        plugins.pm.unregister(name="gazetteer")


@pytest.fixture(scope="session")
def gazetteer():
    """A loaded gazetteer with the built-in dictionaries only."""
    from iew_gazetteer.family import Gazetteer
    return Gazetteer().load(ROOT / "nowhere")
