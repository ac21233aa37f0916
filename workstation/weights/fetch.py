"""`weights fetch`: download a model's pinned official checkpoint into a staging folder, check every file
against the hub's listing (size, sha256 or git blob id) and the model's strict load check, and only then move
it into place and point settings.toml at it. A partial or damaged download is never used: it stays in staging,
where running the fetch again resumes it (each FILE.incomplete is asked for the rest), and the weights in use
stay as they were until the new ones pass.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from contracts.domain import WeightsError
from contracts.model import ModelFamily
from workstation.settings import Settings
from workstation.weights import settings_file
from workstation.weights.folders import SOURCE_FILE, folder_size, human_bytes, read_source
from workstation.weights.hubs import FetchError, Listing, hub_for

STAGING = ".staging"


@dataclass
class Progress:
    model: str
    stage: str = "listing"         # listing | downloading | checking | done | failed
    done: int = 0                  # bytes on disk so far
    total: int = 0
    rate: float = 0.0              # bytes per second, smoothed
    message: str = ""
    path: str = ""

    def line(self) -> str:
        if self.stage in ("downloading", "checking") and self.total:
            share = min(1.0, self.done / self.total)
            bar = "#" * int(share * 30) + "-" * (30 - int(share * 30))
            return (f"{self.model}: [{bar}] {share:4.0%} {human_bytes(self.done)} of {human_bytes(self.total)}"
                    f" · {human_bytes(self.rate)}/s" + (" · checking" if self.stage == "checking" else ""))
        return f"{self.model}: {self.stage}{': ' + self.message if self.message else ''}"

    def as_dict(self) -> dict:
        return asdict(self)


def weights_root(settings: Settings) -> Path:
    """[weights] dir, else weights/ beside the history database."""
    return settings.path(settings.weights.dir) if settings.weights.dir else \
        settings.path(settings.database).parent / "weights"


def folder_name(model: str, commit: str) -> str:
    return f"{model}-{commit[:12]}"


class _Watcher(threading.Thread):
    """Counts the bytes under the staging folder twice a second: one measure for both clients, whatever
    their own progress hooks offer."""

    def __init__(self, folder: Path, progress: Progress, report: Callable[[Progress], None]):
        super().__init__(daemon=True)
        self.folder, self.progress, self.report = folder, progress, report
        self.halt = threading.Event()

    def run(self) -> None:
        last, last_t = self.progress.done, time.monotonic()
        while not self.halt.wait(0.5):
            now = time.monotonic()
            self.progress.done = min(self.progress.total, folder_size(self.folder))
            speed = (self.progress.done - last) / max(now - last_t, 1e-6)
            self.progress.rate = speed if not self.progress.rate else 0.7 * self.progress.rate + 0.3 * speed
            last, last_t = self.progress.done, now
            self.report(self.progress)


def verify_files(folder: Path, listing: Listing) -> None:
    """Every listed file is there with the hub's size and hash; a damaged one is removed (so the next fetch
    downloads it again) and named."""
    for f in listing.files:
        path = folder / f.name
        if not path.is_file():
            raise FetchError(f"{f.name} is missing after the download; run the fetch again")
        size = path.stat().st_size
        problem = None
        if size != f.size:
            problem = f"is {size:,} bytes, the hub lists {f.size:,}"
        elif f.sha256 or f.git_sha1:
            digest = hashlib.sha256() if f.sha256 else hashlib.sha1(b"blob %d\0" % size)
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            want = f.sha256 or f.git_sha1
            if digest.hexdigest() != want:
                problem = f"has {'sha256' if f.sha256 else 'git blob id'} {digest.hexdigest()[:16]}…, the hub lists {want[:16]}…"
        if problem:
            path.unlink()
            raise FetchError(f"{f.name} {problem}: the download is damaged and was removed; run the fetch again")


def fetch(family: ModelFamily, settings: Settings, root: Path | None = None, revision: str | None = None,
          report: Callable[[Progress], None] = lambda p: None, use: bool = True) -> tuple[Path, str]:
    """Download, verify and (with `use`) switch to `family`'s official weights. Returns (folder, description)."""
    official = family.official
    if official is None:
        raise FetchError(f"{family.name} publishes no official weights to fetch")
    progress = Progress(family.name)
    try:
        folder, description = _fetch(family, settings, Path(root) if root else weights_root(settings),
                                     revision or official.revision, progress, report)
    except FetchError as e:
        progress.stage, progress.message = "failed", str(e)
        report(progress)
        raise
    if use:
        settings_file.set_weights(settings.source or _default_settings_file(), family.name, folder)
    progress.stage, progress.message, progress.path = "done", description, str(folder)
    report(progress)
    return folder, description


def _default_settings_file() -> Path:
    from workstation.settings import DEFAULT_PATH
    return DEFAULT_PATH


def _fetch(family: ModelFamily, settings: Settings, root: Path, revision: str, progress: Progress,
           report: Callable[[Progress], None]) -> tuple[Path, str]:
    official = family.official
    hub = hub_for(official, getattr(settings.weights, f"{official.hub}_endpoint"))
    report(progress)
    listing = hub.listing(revision)
    missing = sorted(set(official.files) - {f.name for f in listing.files} - {"README.md"})
    if missing:
        raise FetchError(f"{official.repo_id}@{revision} has no {', '.join(missing)}: not the checkpoint this "
                         "workstation reads; check the revision")
    progress.total = listing.size
    final = root / folder_name(family.name, listing.commit)
    known = read_source(final)
    if known and known.get("commit") == listing.commit and folder_size(final) >= listing.size:
        return final, _check(family, final)                  # fetched before: nothing to download
    staging = root / STAGING / final.name
    try:
        staging.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create {staging}: {e.strerror}; choose another folder with --dir") from None
    need = listing.size - folder_size(staging)
    free = shutil.disk_usage(staging).free
    if need > free:
        raise FetchError(f"the disk is full: {human_bytes(need)} more are needed in {root}, {human_bytes(free)} "
                         "are free; free some space or choose another folder with --dir")
    progress.stage = "downloading"
    report(progress)
    watcher = _Watcher(staging, progress, report)
    watcher.start()
    try:
        hub.download(listing, revision, staging)
    finally:
        watcher.halt.set()
        watcher.join()
    progress.stage, progress.done = "checking", listing.size
    report(progress)
    verify_files(staging, listing)
    shutil.rmtree(staging / ".cache", ignore_errors=True)      # huggingface_hub's bookkeeping, not the model's
    try:
        description = _check(family, staging)
    except FetchError:
        shutil.rmtree(staging, ignore_errors=True)            # hashes matched: downloading again cannot help
        raise
    (staging / SOURCE_FILE).write_text(json.dumps({
        "hub": official.hub, "repo_id": official.repo_id, "revision": revision, "commit": listing.commit,
        "endpoint": hub.endpoint or "", "fetched": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "files": {f.name: {"size": f.size, "sha256": f.sha256, "git_sha1": f.git_sha1} for f in listing.files},
    }, indent=2) + "\n", "utf-8")
    if final.exists():
        shutil.rmtree(final)                 # an earlier copy that no longer matched its listing
    staging.replace(final)
    return final, description


def _check(family: ModelFamily, folder: Path) -> str:
    try:
        return family.check_weights(folder)
    except WeightsError as e:
        raise FetchError(f"the downloaded checkpoint does not load: {e}") from None
