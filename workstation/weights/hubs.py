"""The two hubs behind one shape: list a pinned revision's files (sizes and hashes) and download them into a
folder, each through the hub's own client (huggingface_hub, modelscope), which resumes a partial file itself.

Every failure becomes a FetchError of one line: what failed, where, and what to do.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from contracts.model import OfficialWeights


class FetchError(Exception):
    """A fetch that could not finish; the message is one line a person can act on."""


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int
    sha256: str | None            # None: the hub gives another hash (git's blob id)
    git_sha1: str | None = None


@dataclass(frozen=True)
class Listing:
    commit: str                   # what the revision resolved to (ModelScope: the revision as asked)
    files: tuple[HubFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def endpoint_for(hub: str, configured: str = "") -> str | None:
    """The server to ask: the environment first (HF_ENDPOINT; MODELSCOPE_ENDPOINT or the older
    MODELSCOPE_DOMAIN, a bare host name), then settings.toml's [weights], else the client's own default."""
    if hub == "huggingface":
        chosen = os.environ.get("HF_ENDPOINT") or configured
    else:
        chosen = os.environ.get("MODELSCOPE_ENDPOINT") or os.environ.get("MODELSCOPE_DOMAIN") or configured
    chosen = chosen.strip().rstrip("/")
    if chosen and "://" not in chosen:
        chosen = f"https://{chosen}"
    return chosen or None


def default_endpoint(hub: str) -> str:
    return "https://huggingface.co" if hub == "huggingface" else "https://modelscope.cn"


class Hub:
    """One hub's client: `listing` (what a revision holds) and `download` (those files into a folder)."""

    def __init__(self, official: OfficialWeights, endpoint: str | None):
        self.official = official
        self.endpoint = endpoint            # None: the client's own default

    def listing(self, revision: str) -> Listing:
        raise NotImplementedError

    def download(self, listing: Listing, revision: str, folder: Path) -> None:
        raise NotImplementedError

    def fail(self, e: BaseException, revision: str) -> FetchError:
        """The one line for an exception from a client: disk, damaged file, 404s, network, else its own words."""
        hub = self.endpoint or default_endpoint(self.official.hub)
        where = f"{self.official.repo_id}@{revision} on {hub}"
        # ModelScope gathers the files that failed (FileDownloadError.failed_files): the first one tells why.
        failed = getattr(e, "failed_files", None) or {}
        name, cause = next(iter(failed.items()), (None, e))
        errors = list(_chain(cause)) + list(_chain(e))
        text = " ".join(str(x) for x in errors).lower()
        kinds = " ".join(type(x).__name__ for x in errors)
        full = next((x for x in errors if isinstance(x, OSError) and x.errno == errno.ENOSPC), None)
        if full is not None or "not enough free disk space" in text:
            return FetchError(f"the disk is full while downloading {where}; free some space or choose another "
                              "folder with --dir")
        if "hash mismatch" in text or "Integrity" in kinds:
            return FetchError(f"{name or 'a file'} of {where} arrived damaged ({_first_line(cause)}); it was not "
                              "used: run the fetch again")
        if "RevisionNotFound" in kinds or "revision not found" in text or "revisionnotfound" in text:
            return FetchError(f"revision {revision!r} of {self.official.repo_id} does not exist on {hub}; "
                              "check --revision")
        if "RepositoryNotFound" in kinds or "model not found" in text or "reponotfound" in text:
            return FetchError(f"{self.official.repo_id} was not found on {hub} (404); check the endpoint or mirror")
        if "EntryNotFound" in kinds or " 404" in text:
            return FetchError(f"{name or 'a file'} of {where} was not found (404): {_first_line(cause)}")
        if any(k in kinds for k in ("ConnectError", "ConnectionError", "Timeout", "RemoteProtocolError", "ReadError",
                                    "ChunkedEncodingError", "ProtocolError", "NetworkError")) \
                or "connection" in text or "503" in text:
            return FetchError(f"could not download {where}: {_first_line(cause)}; check the network or set a mirror "
                              "(HF_ENDPOINT / MODELSCOPE_ENDPOINT, or [weights] in settings.toml), then run the "
                              "same command again: it resumes")
        return FetchError(f"could not download {where}: {(name + ': ') if name else ''}{type(cause).__name__}: "
                          f"{_first_line(cause)}")


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(e).__name__


class HuggingFace(Hub):
    def listing(self, revision: str) -> Listing:
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile
        try:
            api = HfApi(endpoint=self.endpoint)
            commit = api.model_info(self.official.repo_id, revision=revision).sha
            entries = [f for f in api.list_repo_tree(self.official.repo_id, revision=commit, recursive=True)
                       if isinstance(f, RepoFile)]
        except Exception as e:     # noqa: BLE001 - the client's errors, named in one line
            raise self.fail(e, revision) from None
        files = tuple(HubFile(f.path, int(f.size), f.lfs.sha256 if f.lfs else None, None if f.lfs else f.blob_id)
                      for f in entries if f.path in self.official.files)
        return Listing(commit or revision, files)

    def download(self, listing: Listing, revision: str, folder: Path) -> None:
        """File by file through huggingface_hub's own transfer (`http_get`, which retries and resumes within a
        call). Not snapshot_download: from 1.x it writes each file to a temporary name of its own and deletes
        it on failure (file_download._download_to_tmp_and_move), so an interrupted fetch would start over.
        Here the partial file keeps one name, FILE.incomplete, and the next fetch asks for the rest (a Range)."""
        from huggingface_hub import constants, hf_hub_url
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils import build_hf_headers, disable_progress_bars
        disable_progress_bars()                 # our own bar counts the bytes on disk (fetch.Progress)
        # Bytes reach the file a chunk at a time (10 MiB by default): at 1 MiB, as ModelScope's client writes,
        # the bar moves steadily and an interruption loses at most 1 MiB.
        constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, 1 << 20)
        try:
            for f in listing.files:
                target = folder / f.name
                if target.is_file() and target.stat().st_size == f.size:
                    continue                    # finished by an earlier fetch; verify_files checks its hash
                part = target.with_name(target.name + ".incomplete")
                url = hf_hub_url(self.official.repo_id, f.name, revision=listing.commit, endpoint=self.endpoint)
                with open(part, "ab") as fh:
                    http_get(url, fh, resume_size=fh.tell(), headers=build_hf_headers(), expected_size=f.size,
                             displayed_filename=f.name)
                part.replace(target)
        except Exception as e:     # noqa: BLE001
            raise self.fail(e, revision) from None


class _Quiet:
    """A ModelScope progress callback that shows nothing: our own bar counts the bytes on disk."""

    def __init__(self, filename: str, file_size: int):
        pass

    def update(self, size: int) -> None:
        pass

    def end(self) -> None:
        pass


class ModelScope(Hub):
    def listing(self, revision: str) -> Listing:
        from modelscope_hub.api import HubApi
        try:
            entries = HubApi(endpoint=self.endpoint).list_repo_files(self.official.repo_id, "model", revision=revision)
        except Exception as e:     # noqa: BLE001
            raise self.fail(e, revision) from None
        files = tuple(HubFile(f.path, int(f.size), f.sha256) for f in entries
                      if f.path in self.official.files and not f.is_dir)
        return Listing(revision, files)

    def download(self, listing: Listing, revision: str, folder: Path) -> None:
        import functools
        import logging

        import modelscope_hub._download as transfer
        from modelscope.hub.snapshot_download import snapshot_download
        # Its bars are drawn whatever the callbacks (tqdm is called directly): silenced, since our own bar counts
        # the bytes on disk, as is its log line per repo.
        transfer.tqdm = functools.partial(transfer.tqdm, disable=True) if not isinstance(
            transfer.tqdm, functools.partial) else transfer.tqdm
        logging.getLogger("modelscope_hub").setLevel(logging.WARNING)
        try:
            snapshot_download(self.official.repo_id, revision=revision, local_dir=str(folder),
                              allow_patterns=[f.name for f in listing.files], endpoint=self.endpoint,
                              progress_callbacks=[_Quiet], max_workers=4)
        except Exception as e:     # noqa: BLE001
            raise self.fail(e, revision) from None


HUBS = {"huggingface": HuggingFace, "modelscope": ModelScope}


def hub_for(official: OfficialWeights, configured_endpoint: str = "") -> Hub:
    return HUBS[official.hub](official, endpoint_for(official.hub, configured_endpoint))
