"""A fetch started from the UI: `python -m workstation.weights fetch MODEL` in a process of its own (Cancel ends
it; what it downloaded stays in staging, and the next fetch resumes it), followed through the status file it
rewrites twice a second (fetch.Progress as JSON)."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from workstation.settings import ROOT


class BackgroundFetches:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._procs: dict[str, subprocess.Popen] = {}
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    def _status_file(self, model: str) -> Path:
        return self.folder / f"{model}.json"

    def running(self, model: str) -> bool:
        proc = self._procs.get(model)
        return proc is not None and proc.poll() is None

    def start(self, model: str, root: Path | None = None) -> None:
        with self._lock:
            if self.running(model):
                return
            self.folder.mkdir(parents=True, exist_ok=True)
            status = self._status_file(model)
            status.unlink(missing_ok=True)
            self._cancelled.discard(model)
            command = [sys.executable, "-m", "workstation.weights", "fetch", model, "--status-file", str(status)]
            if root is not None:
                command += ["--dir", str(root)]
            log = open(self.folder / f"{model}.log", "w", encoding="utf-8")
            self._procs[model] = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            log.close()

    def cancel(self, model: str) -> None:
        with self._lock:
            proc = self._procs.get(model)
            if proc is not None and proc.poll() is None:
                self._cancelled.add(model)
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()

    def status(self, model: str) -> dict | None:
        """The last progress the process wrote, with `stage` "cancelled" after Cancel, and "failed" with the
        last line it printed when it ended without saying why (killed, crashed). None: never started."""
        proc = self._procs.get(model)
        if proc is None:
            return None
        try:
            status = json.loads(self._status_file(model).read_text("utf-8"))
        except (OSError, ValueError):
            status = {"model": model, "stage": "starting", "done": 0, "total": 0, "rate": 0.0, "message": ""}
        if model in self._cancelled:
            status["stage"] = "cancelled"
        elif proc.poll() is not None and status["stage"] not in ("done", "failed"):
            lines = [ln for ln in (self.folder / f"{model}.log").read_text("utf-8", "replace").splitlines() if ln]
            status |= {"stage": "failed", "message": lines[-1] if lines else f"the fetch ended ({proc.returncode})"}
        return status
