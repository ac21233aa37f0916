"""The local Ray runtime a corpus driver starts ends with that driver, however the driver ends.

Ray ties its head processes (GCS, raylet, monitors) to the driver that started them, but the raylet's agents
(`ray::DashboardAgent`, `ray::RuntimeEnvAgent`) outlive a driver killed with SIGKILL for a minute or more and
ignore SIGTERM (Ray 2.60 on Linux). So a driver that starts a local runtime also starts a watchdog: a small
process in its own session that waits for the driver's end (the pipe between them closes, whichever way the
driver ends) and then stops every process of that Ray session, SIGKILL for those that ignore SIGTERM. A note
in RUNTIMES names the session, the driver and the watchdog; the next local start stops the processes of a
noted session whose driver and watchdog are both gone (killed together, as a process group can be).

A process belongs to a session when its command line or one of its open files is in the session's directory
(/tmp/ray/session_*): Ray's workers rename themselves (`ray::IDLE`) but keep their log files open there.
This module imports no Ray at the top: the watchdog runs it as `python -m workstation.corpus.runtime`.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNTIMES = Path(tempfile.gettempdir()) / "iew-ray-runtimes"       # one note per local runtime started
GRACE_SECONDS = 2.0                                                # SIGTERM, then SIGKILL for what is left
ROOT = Path(__file__).resolve().parents[2]

_watch: dict | None = None                                         # this driver's watchdog, while it has one


def start(init) -> None:
    """Clean what dead drivers left, start the runtime (`init()`: ray.init for a local runtime), watch it."""
    clean_stale()
    init()
    import ray
    try:
        watch(ray._private.worker._global_node.get_session_dir_path())   # no public API names it (Ray 2.60)
    except Exception as e:                     # noqa: BLE001 - the job can run unwatched; say so
        print(f"warning: no watchdog for the local Ray runtime ({type(e).__name__}: {e}); if this command is "
              "killed, its Ray processes may outlive it", file=sys.stderr)


def stop() -> None:
    """Shut the runtime down and let the watchdog sweep what survived ray.shutdown()."""
    global _watch
    import ray
    ray.shutdown()
    if _watch is None:
        return
    w, _watch = _watch, None
    os.close(w["pipe"])
    try:
        w["process"].wait(timeout=GRACE_SECONDS + 8)
    except subprocess.TimeoutExpired:
        pass


def watch(session: str) -> None:
    """Start the watchdog of this driver's session and note it."""
    global _watch
    read, write = os.pipe()                                        # both ends non-inheritable (PEP 446)
    log = open(Path(session) / "logs" / "iew-watchdog.log", "ab")
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "workstation.corpus.runtime", session, str(os.getpid())],
            stdin=read, stdout=log, stderr=log, start_new_session=True, cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                                             if p)})
    finally:
        os.close(read)
        log.close()
    RUNTIMES.mkdir(parents=True, exist_ok=True)
    note = {"session": session, "driver": _identity(os.getpid()), "watchdog": _identity(process.pid)}
    tmp = RUNTIMES / f".{os.getpid()}.tmp"
    tmp.write_text(json.dumps(note), "utf-8")
    os.replace(tmp, note_path(os.getpid()))
    _watch = {"pipe": write, "process": process}


def note_path(driver: int) -> Path:
    return RUNTIMES / f"{driver}.json"


def clean_stale() -> list[int]:
    """Stop the processes of noted sessions whose driver and watchdog are both gone. Returns their pids."""
    stopped = []
    for path in sorted(RUNTIMES.glob("*.json")) if RUNTIMES.is_dir() else []:
        try:
            note = json.loads(path.read_text("utf-8"))
            if _alive(*note["driver"]) or _alive(*note["watchdog"]):
                continue
            stopped += stop_session(note["session"])
        except (OSError, ValueError, KeyError, TypeError):
            pass                                                   # a torn note: nothing we can act on
        path.unlink(missing_ok=True)
    return stopped


def stop_session(session: str, spare: set[int] = frozenset()) -> list[int]:
    """SIGTERM every live process of the session (but `spare` and this one), SIGKILL those still there."""
    stopped: list[int] = []
    for _ in range(3):                     # a dying raylet may still have started a worker: look again
        pids = session_processes(session, spare)
        if not pids:
            break
        stopped += pids
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + GRACE_SECONDS
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.05)
            pids = [p for p in pids if _alive(p)]
            if not pids:
                break
    return stopped


def session_processes(session: str, spare: set[int] = frozenset()) -> list[int]:
    """Live processes whose command line or open files are in the session's directory."""
    if not os.path.isdir("/proc"):                                 # Linux only; elsewhere Ray cleans up alone
        return []
    folder = os.path.normpath(session)
    in_folder = re.compile(re.escape(folder.encode()) + rb"(?:/|\x00|\s|$)")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spare or int(entry) == os.getpid() or not _alive(int(entry)):
            continue
        try:
            if in_folder.search(Path(f"/proc/{entry}/cmdline").read_bytes()):
                found.append(int(entry))
                continue
            for fd in os.listdir(f"/proc/{entry}/fd"):
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
                if target == folder or target.startswith(folder + "/"):
                    found.append(int(entry))
                    break
        except OSError:                                            # gone meanwhile, or not ours to read
            continue
    return found


def _identity(pid: int) -> list:
    """(pid, start time): a pid alone may name another process once the first is gone."""
    return [pid, _start_time(pid)]


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])                # field 22: starttime, in clock ticks


def _alive(pid: int, started: int | None = None) -> bool:
    """Running (a zombie has ended), and the same process if its start time is given."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] not in ("Z", "X") and (started is None or int(fields[19]) == started)


def _watchdog(session: str, driver: int) -> None:
    """Wait for the driver's end (its end of the pipe on our stdin closes), then stop the session."""
    while sys.stdin.buffer.read(65536):
        pass
    stopped = stop_session(session, spare={driver})
    if stopped:
        print(f"stopped {len(stopped)} process(es) of {session} left by driver {driver}: {stopped}", flush=True)
    note_path(driver).unlink(missing_ok=True)


if __name__ == "__main__":
    _watchdog(sys.argv[1], int(sys.argv[2]))
