#!/usr/bin/env python3
"""The one entry point. First run: make .venv/, install the pinned requirements, re-run inside it.

  python3 launcher.py                 start the workstation UI (http://127.0.0.1:8501)
  python3 launcher.py test            install test dependencies too, run the test suite
  python3 launcher.py extract ...     the command line (see --help)
  python3 launcher.py corpus ...      extraction over many files on Ray (installs Ray on first use)
"""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"


def inside_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def install(requirements: Path) -> None:
    """pip install -r once per content of the file (a stamp in .venv/ remembers it)."""
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = VENV / f".installed-{requirements.name}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    print(f"[launcher] installing {requirements.name} into {VENV} (first run only) ...", file=sys.stderr)
    subprocess.check_call([str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                           "-r", str(requirements)])
    stamp.write_text(digest)


def bootstrap(with_tests: bool) -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"Python 3.11 or newer is needed (this is {sys.version.split()[0]})")
    if not PYTHON.exists():
        print(f"[launcher] creating {VENV} ...", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "venv", str(VENV)])
    install(ROOT / "requirements.txt")
    if with_tests:
        install(ROOT / "requirements-dev.txt")
        install(ROOT / "requirements-corpus.txt")       # the corpus tests run Ray too


def main() -> int:
    args = sys.argv[1:]
    if not inside_venv():
        bootstrap(with_tests=bool(args) and args[0] == "test")
        os.execv(str(PYTHON), [str(PYTHON), str(Path(__file__).resolve()), *args])
    if args[:1] == ["corpus"]:
        install(ROOT / "requirements-corpus.txt")       # Ray: an optional dependency, on first use only
    sys.path.insert(0, str(ROOT))
    from workstation.cli import main as cli_main
    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
