#!/usr/bin/env python3
"""The one entry point. First run: make .venv/, install the locked requirements, re-run inside it.

  python3 launcher.py                 start the workstation UI (http://127.0.0.1:8501)
  python3 launcher.py test            install test dependencies (and Label Studio, in its own venv), run the tests
  python3 launcher.py extract ...     the command line (see --help)
  python3 launcher.py corpus ...      extraction over many files on Ray (installs Ray on first use)
  python3 launcher.py bench ...       the benchmark suite (docs/benchmarks.md)
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
    """pip install -r once per content of the file (a stamp in .venv/ remembers it). A lock (compiled by
    .ci/lock: every package of the tree, pinned, with its hashes) is installed with --require-hashes, so nothing
    unpinned or altered comes in. A file of editable installs (-e PATH; what they need is in a lock) is installed
    without dependencies and stamped with this folder too, since the venv then runs code from this checkout;
    paths in it are relative to this folder."""
    content = requirements.read_bytes()
    editable = b"\n-e " in b"\n" + content
    if editable:
        content += str(ROOT).encode()
    digest = hashlib.sha256(content).hexdigest()
    stamp = VENV / f".installed-{requirements.name}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    print(f"[launcher] installing {requirements.name} into {VENV} (first run only) ...", file=sys.stderr)
    how = ["--no-deps", "--no-build-isolation"] if editable else ["--require-hashes"]
    subprocess.check_call([str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q", *how,
                           "-r", str(requirements)], cwd=ROOT)
    stamp.write_text(digest)


LABEL_STUDIO_VENV = ROOT / ".venv-labelstudio"
LABEL_STUDIO_TEMPLATE = LABEL_STUDIO_VENV / "template-data"      # a migrated, empty Label Studio database
LABEL_STUDIO_FAILED = ROOT / ".venv-labelstudio.failed"          # why the last set-up failed (read by the test)


def install_label_studio() -> str:
    """The real Label Studio for the ML-backend test, in its own venv (its pins clash with ours), from its own
    hashed lock, with an empty database migrated once (migrating takes minutes; the test copies it). Stamped per
    content of requirements-labelstudio.txt like install(). Returns "" when ready, else why not (also kept in
    LABEL_STUDIO_FAILED for the test to report)."""
    requirements = ROOT / "requirements-labelstudio.txt"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = LABEL_STUDIO_VENV / ".installed"
    if stamp.exists() and stamp.read_text() == digest and (LABEL_STUDIO_TEMPLATE / "label_studio.sqlite3").exists():
        return ""
    python = LABEL_STUDIO_VENV / "bin" / "python"
    print(f"[launcher] installing Label Studio into {LABEL_STUDIO_VENV} for its test (first run only) ...",
          file=sys.stderr)
    env = {**os.environ, "LABEL_STUDIO_BASE_DATA_DIR": str(LABEL_STUDIO_TEMPLATE)}
    steps = [[sys.executable, "-m", "venv", str(LABEL_STUDIO_VENV)] if not python.exists() else None,
             # --no-deps: the lock is the whole tree, and pip 23's hash mode takes lxml, asked for with and
             # without an extra by two packages, for an unpinned second requirement.
             [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--require-hashes", "--no-deps",
              "-r", str(requirements)],
             [str(LABEL_STUDIO_VENV / "bin" / "label-studio"), "version", "--data-dir", str(LABEL_STUDIO_TEMPLATE)]]
    for step in filter(None, steps):
        try:
            done = subprocess.run(step, capture_output=True, text=True, env=env, timeout=3600)
        except (OSError, subprocess.TimeoutExpired) as e:
            done = subprocess.CompletedProcess(step, 1, "", f"{type(e).__name__}: {e}")
        if done.returncode != 0:
            reason = f"`{' '.join(step[:4])} ...` failed:\n" + (done.stderr or done.stdout)[-3000:]
            LABEL_STUDIO_FAILED.write_text(reason, encoding="utf-8")
            print(f"[launcher] Label Studio could not be set up; its test will say why:\n{reason}", file=sys.stderr)
            return reason
    stamp.write_text(digest)
    LABEL_STUDIO_FAILED.unlink(missing_ok=True)
    return ""


def install_workstation() -> None:
    """The workstation itself, editable, so its built-in plugins are entry points like any installed plugin's
    (pyproject.toml). Once per content of pyproject.toml. Its dependencies came from the lock, and so did its
    build backend (setuptools): nothing is resolved or fetched here."""
    pyproject = ROOT / "pyproject.toml"
    digest = hashlib.sha256(pyproject.read_bytes()).hexdigest()
    stamp = VENV / ".installed-pyproject.toml"
    if stamp.exists() and stamp.read_text() == digest:
        return
    subprocess.check_call([str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                           "--no-deps", "--no-build-isolation", "-e", str(ROOT)])
    stamp.write_text(digest)


def bootstrap(with_tests: bool) -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"Python 3.11 or newer is needed (this is {sys.version.split()[0]})")
    if not PYTHON.exists():
        print(f"[launcher] creating {VENV} ...", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "venv", str(VENV)])
    install(ROOT / "requirements.txt")
    install_workstation()
    if with_tests:
        install(ROOT / "requirements-dev.txt")
        install(ROOT / "requirements-examples.txt")     # the example plugin (docs/plugins.md), for its tests
        install_label_studio()
        install(ROOT / "requirements-corpus.txt")       # the corpus tests run Ray too


def point_compile_caches() -> None:
    """Triton's, Inductor's and the plugins' on-disk caches in cache/ beside the history database (data/cache/ by default), set
    before torch or triton is imported, so that a kernel one process compiled is found by the next instead of
    being compiled again. IEW_CACHE_DIR moves the folder (`bench cli-e2e` gives a cold run an empty one); a
    TRITON_CACHE_DIR or TORCHINDUCTOR_CACHE_DIR set by the user wins."""
    import tomllib
    root = os.environ.get("IEW_CACHE_DIR")
    if not root:
        database = "data/runs.db"                   # workstation/settings.py's default
        settings = Path(os.environ.get("IEW_SETTINGS", ROOT / "settings.toml"))
        try:
            database = tomllib.loads(settings.read_text("utf-8")).get("storage", {}).get("database", database)
        except (OSError, tomllib.TOMLDecodeError, AttributeError):
            pass                                    # the settings' own loading reports a bad file
        database = os.environ.get("IEW_STORAGE__DATABASE", database)      # as workstation/settings.py reads it
        path = Path(str(database)).expanduser()
        root = (path if path.is_absolute() else settings.resolve().parent / path).parent / "cache"
    os.environ.setdefault("TRITON_CACHE_DIR", str(Path(root) / "triton"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(root) / "inductor"))
    os.environ["IEW_CACHE_DIR"] = str(root)         # the plugins' own caches (RexUniNLU's tokenizer) go here too


def main() -> int:
    args = sys.argv[1:]
    if not inside_venv():
        bootstrap(with_tests=bool(args) and args[0] == "test")
        os.execv(str(PYTHON), [str(PYTHON), str(Path(__file__).resolve()), *args])
    if args[:1] == ["corpus"]:
        install(ROOT / "requirements-corpus.txt")       # Ray: an optional dependency, on first use only
    sys.path.insert(0, str(ROOT))
    point_compile_caches()
    if args[:1] == ["bench"]:
        # The benchmarks sit above the application (they compare its variants), so the CLI does not import them.
        from benchmarks import main as bench_main
        return bench_main(args[1:])
    from workstation.cli import main as cli_main
    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
