"""pyproject.toml declares ranges; requirements*.txt lock the whole tree with hashes (docs/dependencies.md), and the
launcher installs the locks with --require-hashes. These checks fail when a range is edited without re-locking."""
from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import launcher

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
LOCKS = ("requirements.txt", "requirements-corpus.txt", "requirements-dev.txt")        # agree with each other
# name[extras]==version, perhaps with an environment marker (uvloop: not on Windows), hashes on the lines below
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[\w,.-]+\])?==(\S+)(?: ; [^\\]+)? \\$")


def read_lock(name: str) -> dict[str, tuple[Version, list[str]]]:
    """{package: (version, its hashes)}; every requirement line must be an exact pin followed by its hashes."""
    lines = (ROOT / name).read_text("utf-8").splitlines()
    pins: dict[str, tuple[Version, list[str]]] = {}
    for i, line in enumerate(lines):
        if not line or line.startswith("#") or line.startswith(" "):
            continue
        pinned = PIN.match(line)
        assert pinned, f"{name}:{i + 1}: not an exact pin with hashes: {line!r}"
        hashes = []
        for following in lines[i + 1:]:
            found = re.match(r"^\s+--hash=sha256:([0-9a-f]{64})", following)
            if not found:
                break
            hashes.append(found.group(1))
        assert hashes, f"{name}:{i + 1}: {pinned.group(1)} has no hash"
        pins[canonicalize_name(pinned.group(1))] = (Version(pinned.group(2)), hashes)
    return pins


@pytest.mark.parametrize("lock", [*LOCKS, "requirements-labelstudio.txt"])
def test_every_package_of_a_lock_is_pinned_exactly_with_its_hashes(lock):
    assert len(read_lock(lock)) > 50


def fits(requirements: list[str], lock: str) -> list[str]:
    """The declared requirements the lock misses or pins outside their range."""
    pins = read_lock(lock)
    wrong = []
    for text in requirements:
        req = Requirement(text)
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None or not req.specifier.contains(pinned[0], prereleases=True):
            wrong.append(f"{text} (locked: {pinned[0] if pinned else 'absent'})")
    return wrong


def test_the_runtime_lock_holds_every_declared_dependency_within_its_range():
    assert fits(PROJECT["dependencies"], "requirements.txt") == []


def test_the_dev_and_corpus_locks_hold_their_extras_within_their_ranges():
    extras = PROJECT["optional-dependencies"]
    assert fits(PROJECT["dependencies"] + extras["dev"] + extras["examples"] + extras["corpus"],
                "requirements-dev.txt") == []
    assert fits(PROJECT["dependencies"] + extras["corpus"], "requirements-corpus.txt") == []


def test_the_locks_agree_on_every_version_they_share():
    runtime = read_lock("requirements.txt")
    for lock in LOCKS[1:]:
        assert {n: v for n, (v, _) in read_lock(lock).items() if n in runtime} == \
            {n: v for n, (v, _) in runtime.items()}, lock


def test_the_build_backend_is_locked_and_declared_only_as_a_build_requirement():
    assert "setuptools" in read_lock("requirements.txt")
    assert not [d for d in PROJECT["dependencies"] if canonicalize_name(Requirement(d).name) == "setuptools"]
    assert "dynamic" not in PROJECT        # the dependencies are declared, not read from a requirements file


def test_the_launcher_installs_a_lock_with_require_hashes_and_the_editable_plugin_without_dependencies(
        tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(launcher, "VENV", tmp_path)
    monkeypatch.setattr(subprocess, "check_call", lambda argv, **kw: calls.append(argv))
    launcher.install(ROOT / "requirements.txt")
    launcher.install(ROOT / "requirements-examples.txt")
    launcher.install(ROOT / "requirements.txt")                 # stamped: not again
    assert [argv[argv.index("install") + 1:] for argv in calls] == [
        ["--disable-pip-version-check", "-q", "--require-hashes", "-r", str(ROOT / "requirements.txt")],
        ["--disable-pip-version-check", "-q", "--no-deps", "--no-build-isolation", "-r",
         str(ROOT / "requirements-examples.txt")]]


def test_label_studios_lock_holds_the_extras_range_and_is_installed_with_require_hashes(tmp_path, monkeypatch):
    assert fits(PROJECT["optional-dependencies"]["label-studio"], "requirements-labelstudio.txt") == []
    ranges = [line for line in (ROOT / "requirements-labelstudio.in").read_text("utf-8").splitlines()
              if line and not line.startswith("#")]
    assert ranges == PROJECT["optional-dependencies"]["label-studio"]
    steps = []
    monkeypatch.setattr(launcher, "LABEL_STUDIO_VENV", tmp_path / "ls")
    monkeypatch.setattr(launcher, "LABEL_STUDIO_TEMPLATE", tmp_path / "ls" / "template")
    monkeypatch.setattr(launcher, "LABEL_STUDIO_FAILED", tmp_path / "failed")
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: steps.append(argv) or subprocess.CompletedProcess(argv, 0))
    (tmp_path / "ls").mkdir()
    assert launcher.install_label_studio() == ""
    pip = next(argv for argv in steps if "pip" in argv)
    assert pip[pip.index("install"):] == ["install", "--disable-pip-version-check", "-q", "--require-hashes",
                                          "--no-deps", "-r", str(ROOT / "requirements-labelstudio.txt")]
