"""Is a process still the one we started? (psutil: the pid exists and is no zombie, and is not a reused pid.)"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import psutil

from workstation.finetune.processes import pid_alive
from workstation.jobs import owner_is_dead

SLEEP = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"]


def started(args: list[str]) -> subprocess.Popen:
    """A child that has begun to run its own program (until then its command line is still its parent's)."""
    child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    return child


def test_a_run_process_is_alive_only_while_it_runs_and_holds_its_marker(tmp_path):
    events = str(tmp_path / "events.jsonl")
    child = started([*SLEEP, "--events", events])
    try:
        assert pid_alive(child.pid) and pid_alive(child.pid, events)
        assert not pid_alive(child.pid, str(tmp_path / "another-run.jsonl"))     # the pid went to another program
        child.kill()
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(child.pid, events)                                  # exited, not yet collected
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid, events)


def test_a_job_owner_whose_pid_went_to_a_younger_process_is_dead():
    host = socket.gethostname()
    child = started(SLEEP)
    try:
        born = datetime.fromtimestamp(psutil.Process(child.pid).create_time(), timezone.utc)
        assert not owner_is_dead(f"{host}:{child.pid}:x", born + timedelta(seconds=1), 3600)
        assert owner_is_dead(f"{host}:{child.pid}:x", born - timedelta(seconds=60), 3600)   # reused pid
    finally:
        child.kill()
        child.wait()
    assert not owner_is_dead(f"{host}:{os.getpid()}:x", datetime.now(timezone.utc), 60)
