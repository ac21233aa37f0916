"""Stopping `python3 launcher.py` (the UI) stops the server it started, which shuts down in its own way (not killed):
nothing is left holding the port (#28)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request

import psutil
import pytest

from tests.workstation.ui.test_browser_e2e import ROOT, write_server_settings


def port_is_free(port: int) -> bool:
    """A new server could listen there (SO_REUSEADDR, as servers set it: our own health checks leave
    connections in TIME_WAIT, which only a listening socket would block)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
            return True
        except OSError:
            return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_launcher_stops_the_ui_server_and_frees_its_port(tmp_path, sig):
    settings = write_server_settings(tmp_path)
    port = tomllib.loads(settings.read_text("utf-8"))["ui"]["port"]
    env = {**os.environ, "IEW_SETTINGS": str(settings), "CUDA_VISIBLE_DEVICES": "", "IEW_LOAD_PLUGINS": ""}
    log = open(tmp_path / "launcher.log", "w")
    launcher = subprocess.Popen([sys.executable, str(ROOT / "launcher.py")], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    children: list[psutil.Process] = []
    try:
        deadline = time.time() + 90
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).status == 200:
                    break
            except OSError:
                assert launcher.poll() is None and time.time() < deadline, (tmp_path / "launcher.log").read_text()
                time.sleep(0.3)
        children = psutil.Process(launcher.pid).children(recursive=True)
        assert children, "the launcher runs the server as a child"
        launcher.send_signal(sig)                        # to the launcher alone, as `kill PID` or a service manager
        launcher.wait(timeout=60)
        gone, alive = psutil.wait_procs(children, timeout=5)
        assert not alive, f"still running after the launcher ended: {[p.cmdline() for p in alive]}"
        assert port_is_free(port)
        log.flush()
        assert "Stopping..." in (tmp_path / "launcher.log").read_text()     # it stopped itself, not killed
    finally:
        for p in children:                               # only what this test started
            if p.is_running():
                p.kill()
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        log.close()
