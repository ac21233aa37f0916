"""A child process that stops with the launcher.

`python3 launcher.py` runs the UI server as a child. A SIGTERM or SIGINT sent to the launcher alone (a service
manager, `kill PID`, a supervisor's stop) would end the launcher and leave the server running, holding its port
and its batch jobs. So the launcher passes those signals on and waits for the server to stop.
"""
from __future__ import annotations

import signal
import subprocess
import time
from typing import Sequence

GRACE_S = 20.0                      # after a passed-on signal, the child's time to stop before it is killed
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_child(argv: Sequence[str], grace_s: float = GRACE_S, **popen) -> int:
    """Run `argv` to its end; return its exit status (128 + N for a child ended by signal N, as a shell says).

    SIGTERM, SIGINT and SIGHUP received meanwhile are sent on to the child, which then has `grace_s` seconds to
    stop before it is killed. The child has a process group of its own, so a terminal's Ctrl-C reaches it once
    (through us), not twice. Call from the main thread (Python's signal handlers live there)."""
    child = subprocess.Popen(list(argv), process_group=0, **popen)
    asked: list[float] = []

    def pass_on(signum, _frame) -> None:
        asked.append(time.monotonic())
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, pass_on) for s in PASSED_ON}
    try:
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if asked and time.monotonic() - asked[0] > grace_s:
                    child.kill()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if child.poll() is None:        # only after an error of ours: the child must not outlive it
            child.kill()
            child.wait()
    return 128 - code if code < 0 else code
