"""`launcher.py weights fetch | list | use` (README.md, "Real weights")."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from contracts.domain import WeightsError
from workstation import plugins
from workstation.settings import DEFAULT_PATH, load_settings
from workstation.weights import settings_file
from workstation.weights.fetch import Progress, fetch
from workstation.weights.folders import check_folder, human_bytes, weights_in_use
from workstation.weights.hubs import FetchError


def add_parser(sub) -> None:
    w = sub.add_parser("weights", help="fetch, list and switch model weights (the official checkpoints)")
    ws = w.add_subparsers(dest="weights_command", required=True)
    f = ws.add_parser("fetch", help="download a model's official checkpoint, check it loads, and use it")
    f.add_argument("model", help="a model name, or 'all'")
    f.add_argument("--dir", type=Path, default=None, help="where (default: [weights] dir, else beside the database)")
    f.add_argument("--revision", default=None, help="another revision than the pinned one (a commit or tag)")
    f.add_argument("--no-use", action="store_true", help="download and check only; leave settings.toml as it is")
    f.add_argument("--status-file", type=Path, default=None, help=argparse.SUPPRESS)   # the UI follows this
    ws.add_parser("list", help="the weights each model uses: demo or not, source, size, revision, loads")
    u = ws.add_parser("use", help="check a checkpoint folder and point settings.toml at it")
    u.add_argument("model")
    u.add_argument("folder", type=Path)


def run(args) -> int:
    if args.weights_command == "list":
        return list_weights()
    if args.weights_command == "use":
        return use(args.model, args.folder)
    return fetch_models(args.model, args.dir, args.revision, not args.no_use, args.status_file)


def _families(name: str) -> list:
    fams = plugins.model_families()
    if name == "all":
        return [f for f in fams.values() if f.official is not None]
    if name not in fams:
        raise WeightsError(f"unknown model {name!r}; installed: {', '.join(fams)}")
    return [fams[name]]


def fetch_models(name: str, root: Path | None, revision: str | None, use_them: bool, status_file: Path | None) -> int:
    settings = load_settings()
    failed = 0
    for fam in _families(name):
        show = _Shown(status_file)
        try:
            folder, description = fetch(fam, settings, root, revision, show, use_them)
        except FetchError as e:
            show.end()
            print(f"error: {fam.name}: {e}", file=sys.stderr)
            failed += 1
            continue
        except KeyboardInterrupt:
            show.end()
            print(f"{fam.name}: interrupted; run the same command again to resume", file=sys.stderr)
            return 130
        show.end()
        print(f"{fam.name}: {description}\n  in {folder}" +
              (f"\n  settings.toml now uses it ({_settings_file(settings)})" if use_them else ""))
    return 1 if failed else 0


def _settings_file(settings) -> Path:
    return settings.source or DEFAULT_PATH


class _Shown:
    """The progress line on a terminal (redrawn in place), a line per change elsewhere, and the status file the UI
    reads."""

    def __init__(self, status_file: Path | None):
        self.status_file, self.tty, self.last, self.drawn = status_file, sys.stderr.isatty(), "", False

    def __call__(self, p: Progress) -> None:
        line = p.line()
        if p.stage not in ("done", "failed") and line != self.last:
            print(("\r" + line.ljust(100)) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr,
                  flush=True)
            self.drawn, self.last = True, line
        if self.status_file:
            fd, tmp = tempfile.mkstemp(dir=self.status_file.parent, prefix=".status-")
            with os.fdopen(fd, "w") as f:
                json.dump(p.as_dict(), f)
            os.replace(tmp, self.status_file)

    def end(self) -> None:
        if self.drawn and self.tty:
            print(file=sys.stderr)


def list_weights() -> int:
    settings = load_settings()
    for fam in plugins.model_families().values():
        if not fam.needs_weights:
            continue
        w = weights_in_use(fam, settings)
        print(f"{fam.name}: {w.path}\n"
              f"  {'DEMO (random weights: outputs are meaningless)' if w.demo else 'real weights'}; source: {w.source}"
              + (f"; revision {w.revision}" if w.revision else "") + f"; {human_bytes(w.size)}\n"
              f"  {'loads' if w.loads else 'does NOT load'}: {w.detail}")
        if w.demo and fam.official:
            print(f"  get the official weights: python3 launcher.py weights fetch {fam.name}")
    return 0


def use(name: str, folder: Path) -> int:
    fam = _families(name)[0]
    folder = folder.expanduser().resolve()
    description = check_folder(fam, folder)          # WeightsError: the CLI prints it, settings stay untouched
    settings = load_settings()
    settings_file.set_weights(_settings_file(settings), fam.name, folder)
    print(f"{fam.name}: {description}\n  settings.toml ({_settings_file(settings)}) now uses {folder}")
    return 0
