"""The repository documents itself: no comment or page points outside it, and every section it cites exists."""
from __future__ import annotations

import re
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
    found = []
    for path in ROOT.rglob("*"):
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
