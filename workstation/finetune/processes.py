"""The trainer as a process: whether a recorded pid is still that trainer, and the end of its log."""
from __future__ import annotations

from pathlib import Path

import psutil

LOG_TAIL_LINES = 15


def pid_alive(pid: int, marker: str | None = None) -> bool:
    """Is `pid` running (not a zombie), and — where its command line can be read — is it the process whose
    arguments hold `marker` (a run's own events file), not another program that got the pid after it?"""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False                            # exited, waiting for its parent to collect it
        if marker and marker not in "\0".join(process.cmdline()):
            return False                            # the pid was reused by another program
    except psutil.NoSuchProcess:                    # gone (a zombie whose details cannot be read included)
        return False
    except psutil.AccessDenied:
        return True                                 # alive, run by another user; its arguments are private
    return True


def log_tail(path: str | Path | None, lines: int = LOG_TAIL_LINES) -> str:
    if not path:
        return ""
    try:
        text = Path(path).read_text("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
