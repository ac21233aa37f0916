"""The repository documents itself: no comment or page points outside it, and every section it cites exists."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", ".venv-labelstudio", "data", "out", "node_modules", "__pycache__", ".pytest_cache",
             ".ruff_cache", "build"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".css"}
# Pointers at notes a user of the repository does not have: the research folder beside it, a spec or design
# brief cited by section, research notes.
OUTSIDE = re.compile(r"\.\./shared|shared/(?:specs|notes)|\bspecs?\s+§|design\.md|(?<![\w/])notes/|-anchors\.md")
CITATION = re.compile(r"((?:docs/)?[\w./-]+\.md) §(\d+(?:\.\d+)*)")


def text_files() -> list[Path]:
    """The repository's text files: what git tracks or would add (ignored folders, such as a venv or wheels
    kept for another machine, are not the repository), or, outside a git checkout, every file but SKIP_DIRS."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                                capture_output=True, check=True).stdout.decode().split("\0")
        paths = [ROOT / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):
        paths = list(ROOT.rglob("*"))
    found = []
    for path in paths:
        parts = set(path.relative_to(ROOT).parts)
        if path.is_file() and path.suffix in TEXT_SUFFIXES and not parts & SKIP_DIRS and not any(
                p.endswith(".egg-info") for p in parts):
            found.append(path)
    return found


def test_no_comment_or_page_points_outside_the_repository():
    me = Path(__file__).resolve()
    offending = []
    for path in text_files():
        if path.resolve() == me:
            continue
        for n, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), start=1):
            if OUTSIDE.search(line):
                offending.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not offending, "point at a page of docs/ instead:\n" + "\n".join(offending)


def test_every_cited_section_exists():
    headings: dict[Path, set[str]] = {}
    missing = []
    for path in text_files():
        for n, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), start=1):
            for doc, section in CITATION.findall(line):
                target = (ROOT / doc) if doc.startswith("docs/") or (ROOT / doc).exists() else path.parent / doc
                if target not in headings:
                    text = target.read_text("utf-8") if target.is_file() else ""
                    headings[target] = {m.group(1) for m in re.finditer(r"^#+\s+(\d+(?:\.\d+)*)\.?\s", text, re.M)}
                if section not in headings[target]:
                    missing.append(f"{path.relative_to(ROOT)}:{n}: {doc} §{section}")
    assert not missing, "cited sections that do not exist:\n" + "\n".join(missing)


def test_the_model_notes_cover_what_the_code_cites():
    cited = {m for path in text_files() for m in CITATION.findall(path.read_text("utf-8", errors="replace"))}
    assert {doc for doc, _ in cited} >= {"docs/models/rexuninlu.md", "docs/models/seqgpt.md"}


# ---- every backticked `module.symbol` in README.md and docs/ names something the code has ----------------

PACKAGES = ("workstation", "plugins", "contracts", "storage", "benchmarks")
CODE_REF = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
# `settings.toml`, `demo.py`, `review.png`: file names, not code
FILE_SUFFIXES = {"py", "md", "toml", "json", "jsonl", "txt", "csv", "png", "svg", "bin", "safetensors", "db", "lock",
                 "yml", "yaml", "cfg", "ini", "sh", "html", "css", "parquet", "xlsx", "log", "pt", "gz"}


def project_modules() -> list[str]:
    """Dotted names of every module of the project packages (found on disk, not imported)."""
    names = ["launcher"]
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def code_references() -> list[tuple[str, str]]:
    """(where, reference) of each backticked dotted name outside fenced blocks of README.md and docs/**.md."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        fenced = False
        for n, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced:
                found += [(f"{path.relative_to(ROOT)}:{n}", ref) for ref in CODE_REF.findall(line)
                          if ref.rsplit(".", 1)[1] not in FILE_SUFFIXES]
    return found


def resolves(module: str, attributes: list[str]) -> bool:
    import importlib
    try:
        target = importlib.import_module(module)
    except ImportError:
        return False
    for name in attributes:
        if name in getattr(target, "__dataclass_fields__", {}) and not hasattr(target, name):
            target = None                     # a field with a default factory: on instances only
        elif not hasattr(target, name):
            return False
        else:
            target = getattr(target, name)
    return True


def unresolved(reference: str, modules: list[str]) -> bool:
    """A reference names a project module by its full dotted name or by its last parts (`engine.run`,
    `rexuninlu.loading.read_config`), then attributes of it. One whose first name is no project module is some
    library's (`torch.where`, `st.session_state`) and is not checked, unless it starts with a project package.
    A name the `contracts` package exports stands for itself (`LoadedModel.clock`, `Knobs.extra`)."""
    import importlib.util

    import contracts
    parts = reference.split(".")
    if not any(m == parts[0] or m.endswith("." + parts[0]) for m in modules) and hasattr(contracts, parts[0]):
        return not resolves("contracts", parts)
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        candidates = [m for m in modules if m == head or m.endswith("." + head)]
        if candidates:
            if i == 1 and parts[0] not in PACKAGES and importlib.util.find_spec(parts[0]) is not None:
                return False                  # a library that shares a short name with one of ours (`torch`)
            return not any(resolves(m, parts[i:]) for m in candidates)
    return parts[0] in PACKAGES


def test_every_backticked_module_symbol_in_the_docs_exists():
    modules = project_modules()
    missing = [f"{where}: `{ref}`" for where, ref in code_references() if unresolved(ref, modules)]
    assert not missing, "names the docs give that the code does not have:\n" + "\n".join(missing)


def test_the_reference_check_knows_a_stale_name_from_a_live_one():
    modules = project_modules()
    assert unresolved("engine.load_for_run", modules) and unresolved("workstation.no_such_module", modules)
    assert not unresolved("engine.run", modules) and not unresolved("contracts.domain.Span", modules)
    assert not unresolved("workstation.engine.run", modules) and not unresolved("torch.where", modules)
    assert not unresolved("Knobs.extra", modules) and unresolved("LoadedModel.no_such_attribute", modules)
