"""Fine-tuning runs started from the UI, supervised: the trainer subprocess started, followed, cancelled and
resumed, and its row in the store kept up to date.

The trainer is `launcher.py finetune ... --events EVENTS.jsonl` in a process of its own (its own session,
so neither a UI restart nor a Ctrl-C in the UI's terminal stops it); it appends one JSON object per line
(the contract: workstation/finetune/events.py).

`TrainingLauncher` checks the request (request.py), writes the datasets as gold JSONL, starts the process,
reads the file incrementally and folds the events into a `TrainingProgress` (progress.py), and mirrors
status, progress, loss and evaluations into the `training_runs` table. Cancel sends SIGTERM (the trainer
finishes its step, saves a resumable checkpoint and exits "cancelled", code 130); resume starts the same
arguments again with --resume. A process that exits without a "done" event (processes.py tells a live
trainer from a reused pid) is marked failed with the end of its log.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from contracts.domain import InputError
from storage.datasets import export_dataset
from storage.views import NotFound, TrainingRun
from workstation.finetune.processes import log_tail, pid_alive
from workstation.finetune.progress import EventReader, TrainingProgress, evaluation_summary
from workstation.finetune.request import FinetuneRequest
from workstation.settings import ROOT

FOLLOW_S = 2.0                                  # how often a started run is polled in the background
log = logging.getLogger(__name__)


def default_command() -> list[str]:
    """The trainer: this Python (the repo's venv) running the repo's launcher."""
    return [sys.executable, str(ROOT / "launcher.py"), "finetune"]


def _now() -> datetime:
    return datetime.now(timezone.utc)


class TrainingLauncher:
    """Start, watch, cancel and resume fine-tuning processes; keep their rows in the store up to date.

    One per UI process (st.cache_resource). Any process can watch a run (the events file and the pid are
    in the row), so a restarted UI picks up a run that is still going.
    """

    def __init__(self, store, runs_dir: Path, command: Sequence[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.store = store
        self.runs_dir = Path(runs_dir)
        self.command = list(command) if command is not None else default_command()
        self.env = env
        self._processes: dict[int, subprocess.Popen] = {}
        self._progress: dict[int, tuple[EventReader, TrainingProgress]] = {}
        self._lock = threading.Lock()
        self._polling = threading.RLock()           # a page and the follower thread read the same events file
        self._followed: set[int] = set()

    # ---- start, cancel, resume ----------------------------------------------------------------------

    def start(self, request: FinetuneRequest) -> int:
        """Write the data, record the run, start the trainer. InputError: nothing was started."""
        request.check()
        train_set = self.store.get_dataset(request.train_dataset)
        if train_set.model != request.model:
            raise InputError(f"dataset {train_set.name!r} holds {train_set.model} examples, not {request.model}")
        if not train_set.examples:
            raise InputError(f"dataset {train_set.name!r} has no examples yet")
        eval_set = self.store.get_dataset(request.eval_dataset) if request.eval_dataset is not None else None
        if eval_set is not None and (eval_set.model != request.model or not eval_set.examples):
            raise InputError(f"evaluation dataset {eval_set.name!r} is empty or holds {eval_set.model} examples")
        datasets: dict[str, Any] = {"train": {"id": train_set.id, "name": train_set.name,
                                              "examples": train_set.examples}}
        run_id = self.store.create_training_run(
            request.model, str(request.weights), str(request.output), [], source="ui", datasets=datasets,
            train_dataset_id=train_set.id, eval_dataset_id=eval_set.id if eval_set else None)
        folder = self.runs_dir / str(run_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            exported = export_dataset(self.store, train_set.id, folder / "train.jsonl", folder / "dev.jsonl",
                                      request.dev_ratio, request.split_seed)
            datasets["train"]["examples"] = exported.train_examples
            evaluation = exported.dev
            if exported.dev is not None:
                datasets["eval"] = {"split_of": train_set.name, "share": request.dev_ratio,
                                    "seed": request.split_seed, "examples": exported.dev_examples}
            elif eval_set is not None:
                evaluation = export_dataset(self.store, eval_set.id, folder / "eval.jsonl").train
                datasets["eval"] = {"id": eval_set.id, "name": eval_set.name, "examples": eval_set.examples}
            else:
                datasets["eval"] = {"name": "(the training data)"}
            events = folder / "events.jsonl"
            args = request.argv(exported.train, evaluation, events)
        except BaseException as e:
            self.store.update_training_run(run_id, status="failed", error=f"could not prepare the data: {e}",
                                           finished_at=_now())
            raise
        self.store.update_training_run(run_id, args=args, datasets=datasets, events_path=str(events),
                                       log_path=str(folder / "trainer.log"), started_at=_now())
        self._spawn(run_id, args, folder / "trainer.log")
        return run_id

    def _spawn(self, run_id: int, args: list[str], log_path: Path) -> None:
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # --no-record: this launcher records the run itself (the CLI would record it a second time).
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen([*self.command, "--no-record", *args], stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, cwd=ROOT, env=env, start_new_session=True)
            except OSError as e:
                self.store.update_training_run(run_id, status="failed", finished_at=_now(),
                                               error=f"the trainer could not be started: {e}")
                raise InputError(f"the trainer could not be started: {e}") from None
        with self._lock:
            self._processes[run_id] = proc
        self.store.update_training_run(run_id, status="running", pid=proc.pid, host=socket.gethostname(),
                                       error=None, finished_at=None)
        self.follow(run_id)

    def follow(self, run_id: int) -> None:
        """Poll the run in a background thread until its final state is in the store, so that it is recorded
        even when no page is open, and retried when the store is busy."""
        with self._lock:
            if run_id in self._followed:
                return
            self._followed.add(run_id)
        threading.Thread(target=self._follow, args=(run_id,), name=f"training-run-{run_id}", daemon=True).start()

    def follow_unfinished(self) -> list[int]:
        """At start: follow the runs an earlier UI process left running (their trainers may still be going)."""
        unfinished = [r.id for r in self.store.list_training_runs(limit=1000) if not r.finished and r.source == "ui"]
        for run_id in unfinished:
            self.follow(run_id)
        return unfinished

    def _follow(self, run_id: int) -> None:
        pause = FOLLOW_S
        try:
            while True:
                time.sleep(pause)
                try:
                    if self.poll(run_id)[0].finished:
                        return
                    pause = FOLLOW_S
                except NotFound:
                    return                                   # forgotten meanwhile
                except Exception:                            # a busy store above all: keep trying, less often
                    log.warning("training run %s: could not record its progress; retrying", run_id, exc_info=True)
                    pause = min(pause * 2, 30.0)
        finally:
            with self._lock:
                self._followed.discard(run_id)

    def cancel(self, run_id: int) -> bool:
        """Ask the trainer to stop after its current step (it saves a checkpoint). False if it is not running."""
        run = self.store.get_training_run(run_id)
        if run.status != "running" or not run.pid:
            return False
        proc = self._processes.get(run_id)
        try:
            if proc is not None:
                if proc.poll() is not None:
                    return False
                proc.send_signal(signal.SIGTERM)
            elif run.host == socket.gethostname() and pid_alive(run.pid, run.events_path):
                os.kill(run.pid, signal.SIGTERM)
            else:
                return False
        except ProcessLookupError:
            return False
        self.store.update_training_run(run_id, status="cancelling")
        return True

    def resume(self, run_id: int) -> bool:
        """Start a cancelled (or failed) run again from its last checkpoint: the same arguments plus --resume."""
        run = self.store.get_training_run(run_id)
        if run.source != "ui" or run.status not in ("cancelled", "failed") or not run.args:
            return False
        self.poll(run_id)                            # read what the last session wrote
        if run.events_path:
            # Marks the end of the last session for every reader: its "done" no longer counts, even before
            # the new trainer has written its "start".
            with open(run.events_path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"event": "resume", "time": _now().isoformat(timespec="seconds")}) + "\n")
        log_path = Path(run.log_path) if run.log_path else self.runs_dir / str(run_id) / "trainer.log"
        self._spawn(run_id, [*run.args, "--resume"], log_path)
        return True

    def forget(self, run_id: int) -> bool:
        """Delete a finished run's record (its output directory stays)."""
        with self._lock:
            self._progress.pop(run_id, None)
            self._processes.pop(run_id, None)
        return self.store.delete_training_run(run_id)

    # ---- watching ------------------------------------------------------------------------------------

    def progress(self, run_id: int) -> TrainingProgress:
        return self._state(self.store.get_training_run(run_id))[1]

    def _state(self, run: TrainingRun) -> tuple[EventReader, TrainingProgress]:
        with self._lock:
            state = self._progress.get(run.id)
            if state is None and run.events_path:
                state = self._progress[run.id] = (EventReader(Path(run.events_path)), TrainingProgress())
            return state or (EventReader(Path(os.devnull)), TrainingProgress())

    def _exit_code(self, run: TrainingRun) -> tuple[bool, int | None]:
        """(exited, exit code if known). Checked before the events are read, so every event of a process
        that has exited is already in the file."""
        proc = self._processes.get(run.id)
        if proc is not None and proc.pid == run.pid:
            code = proc.poll()
            return code is not None, code
        if not run.pid or run.host not in (None, socket.gethostname()):
            return False, None                     # started elsewhere: trust its events
        return not pid_alive(run.pid, run.events_path), None

    def poll(self, run_id: int) -> tuple[TrainingRun, TrainingProgress]:
        """Read new events into the run's progress and store what changed; notice a dead trainer. The row it
        returns is what the store holds after this poll: the one source of the step every view shows. If the
        store is busy the events stay read and the changes are stored by the next poll."""
        with self._polling:
            return self._poll(run_id)

    def _poll(self, run_id: int) -> tuple[TrainingRun, TrainingProgress]:
        run = self.store.get_training_run(run_id)
        reader, progress = self._state(run)
        if run.finished:
            for event in reader.read():
                progress.feed(event)
            return run, progress
        exited, code = self._exit_code(run)
        for event in reader.read():
            progress.feed(event)
        changes: dict[str, Any] = {}
        if progress.total_steps is not None and progress.total_steps != run.total_steps:
            changes["total_steps"] = progress.total_steps
        if progress.steps and progress.step != run.step:
            changes["step"] = progress.step
            changes["loss"] = progress.loss()
        for phase, column in (("before", "evaluation_before"), ("after", "evaluation_after")):
            summary = evaluation_summary(progress.eval(phase))
            if summary is not None and summary != getattr(run, column):
                changes[column] = summary
        epochs = [evaluation_summary(e) for e in progress.epoch_evals()]
        if epochs != run.evaluation_epochs:
            changes["evaluation_epochs"] = epochs
        if progress.done is not None:
            changes.update(self._finish(run, progress.done))
        elif exited:
            changes.update(self._died(run, code))
        if changes:
            run = self.store.update_training_run(run_id, **changes)
        if run.finished:
            with self._lock:
                self._processes.pop(run_id, None)
        return run, progress

    def _finish(self, run: TrainingRun, done: dict[str, Any]) -> dict[str, Any]:
        status = done.get("status") if done.get("status") in ("completed", "cancelled", "failed") else "failed"
        changes: dict[str, Any] = {"status": status, "finished_at": _now(), "error": done.get("error")}
        report = _read_json(done.get("evaluation"))
        if report:                                  # the trainer's evaluation.json fills what events did not carry
            for key, column in (("before", "evaluation_before"), ("after", "evaluation_after")):
                if report.get(key) and not getattr(run, column):
                    changes[column] = report[key]
        if status == "failed" and not changes["error"]:
            changes["error"] = "the trainer reported a failure" + _with_log(run.log_path)
        return changes

    def _died(self, run: TrainingRun, code: int | None) -> dict[str, Any]:
        how = f"with exit code {code}" if code is not None and code >= 0 else \
            f"on signal {-code}" if code is not None else "(exit code unknown)"
        if run.status == "cancelling":
            return {"status": "cancelled", "finished_at": _now(),
                    "error": f"the trainer stopped {how} before it reported; it may not have saved a checkpoint"}
        return {"status": "failed", "finished_at": _now(),
                "error": f"the trainer exited {how} without finishing" + _with_log(run.log_path)}


def _with_log(path: str | None) -> str:
    tail = log_tail(path)
    return f". The end of its log ({path}):\n{tail}" if tail else ""


def _read_json(path: Any) -> dict[str, Any] | None:
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
