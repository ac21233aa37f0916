"""A model hub on loopback that speaks just enough of the Hugging Face Hub's and ModelScope's HTTP APIs for
their own clients (huggingface_hub's listing and file transfer, modelscope's snapshot_download) to fetch a repo.

What each client asks, read from their sources (huggingface_hub 1.33, modelscope-hub 0.5.1):
- Hugging Face: GET /api/models/{repo}/revision/{rev} (the commit), GET /api/models/{repo}/tree/{commit}
  (paths, sizes, git blob ids, LFS sha256), then per file GET /{repo}/resolve/{commit}/{file} with a Range when
  resuming (snapshot_download would also HEAD it for X-Repo-Commit and the ETag: served too).
- ModelScope: GET /api/v1/models/{repo}/repo/files?Revision=... (paths, sizes, sha256), then per file
  GET /api/v1/models/{repo}/repo?Revision=...&FilePath=... with a Range when resuming.

Faults a test can set: `cut` (a file's transfers break at byte N, for the next `times` requests),
`corrupt` (a file's bytes served differ from the hashes listed) and `slow` (a file trickles, so a progress
bar has time to show).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

LFS_SUFFIXES = (".bin", ".safetensors", "tokenizer.json")


@dataclass
class Repo:
    commit: str
    files: dict[str, bytes]
    refs: tuple[str, ...] = ()          # branch or tag names that resolve to `commit`


@dataclass
class Cut:
    after: int
    times: int


@dataclass
class FakeHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    cut: dict[str, Cut] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    slow: dict[str, float] = field(default_factory=dict)        # file -> seconds per 64 KiB sent (progress to see)
    requests: list[tuple[str, str, str]] = field(default_factory=list)      # (method, path, Range header)
    url: str = ""                                                           # set by start()

    def add(self, repo_id: str, folder: Path, commit: str, refs: tuple[str, ...] = (),
            skip: tuple[str, ...] = ("RANDOM_DEMO_WEIGHTS.txt",), extra: dict[str, bytes] | None = None) -> Repo:
        """A repo holding `folder`'s files (a demo checkpoint less its marker), a README and `extra`."""
        files = {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file() and p.name not in skip}
        files["README.md"] = f"# {repo_id}\nA tiny checkpoint served by the tests' fake hub.\n".encode()
        files |= extra or {}
        repo = self.repos[repo_id] = Repo(commit, files, refs)
        return repo

    def resumed(self, name: str) -> int:
        """How many requests for file `name` asked for a Range starting past 0 (a download picked up)."""
        return sum(1 for _, path, rng in self.requests if path.endswith(name) and re.match(r"bytes=[1-9]", rng))

    # --- lookups ----------------------------------------------------------------------------------------
    def resolve(self, repo_id: str, revision: str) -> Repo | None | str:
        repo = self.repos.get(repo_id)
        if repo is None:
            return None
        return repo if revision in (repo.commit, *repo.refs) else "revision"

    def body(self, name: str, data: bytes) -> bytes:
        if name in self.corrupt:
            return data[:-64] + bytes(b ^ 0xFF for b in data[-64:])
        return data

    def start(self) -> "RunningHub":
        return RunningHub(self)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class RunningHub:
    def __init__(self, hub: FakeHub):
        self.hub = hub
        handler = type("Handler", (_Handler,), {"hub": hub})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = hub.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:          # quiet
        pass

    def do_HEAD(self) -> None:
        self.route(head=True)

    def do_GET(self) -> None:
        self.route(head=False)

    def route(self, head: bool) -> None:
        url = urlparse(self.path)
        path, query = unquote(url.path), {k: v[0] for k, v in parse_qs(url.query).items()}
        self.hub.requests.append((self.command, self.path, self.headers.get("Range", "")))
        m = re.fullmatch(r"/api/models/(.+)/revision/([^/]+)", path)
        if m:
            return self.hf_info(m[1], m[2])
        m = re.fullmatch(r"/api/models/(.+)/tree/([^/]+)", path)
        if m:
            return self.hf_tree(m[1], m[2])
        m = re.fullmatch(r"/api/v1/models/(.+)/repo/files", path)
        if m:
            return self.ms_files(m[1], query.get("Revision", "master"))
        m = re.fullmatch(r"/api/v1/models/(.+)/repo", path)
        if m:
            return self.ms_file(m[1], query.get("Revision", "master"), query.get("FilePath", ""), head)
        m = re.fullmatch(r"/api/v1/models/(.+)", path)
        if m and m[1] in self.hub.repos:
            return self.send_json(200, {"Code": 200, "Success": True, "Data": {"Path": m[1]}})
        m = re.fullmatch(r"/(.+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self.hf_file(m[1], m[2], m[3], head)
        self.send_json(404, {"error": f"no such route: {path}"})

    # --- Hugging Face ----------------------------------------------------------------------------------
    def hf_missing(self, found) -> bool:
        if isinstance(found, Repo):
            return False
        code = "RepoNotFound" if found is None else "RevisionNotFound"
        self.send_json(404, {"error": code}, {"X-Error-Code": code, "X-Error-Message": code})
        return True

    def hf_info(self, repo_id: str, revision: str) -> None:
        repo = self.hub.resolve(repo_id, revision)
        if self.hf_missing(repo):
            return
        siblings = []
        for name, data in repo.files.items():
            s = {"rfilename": name, "size": len(data), "blobId": git_blob_sha1(data)}
            if name.endswith(LFS_SUFFIXES):
                s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            siblings.append(s)
        self.send_json(200, {"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                             "siblings": siblings, "tags": [], "downloads": 0, "likes": 0})

    def hf_tree(self, repo_id: str, revision: str) -> None:
        repo = self.hub.resolve(repo_id, revision)
        if self.hf_missing(repo):
            return
        entries = []
        for name, data in repo.files.items():
            e = {"type": "file", "path": name, "size": len(data), "oid": git_blob_sha1(data)}
            if name.endswith(LFS_SUFFIXES):
                e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries.append(e)
        self.send_json(200, entries)

    def hf_file(self, repo_id: str, revision: str, name: str, head: bool) -> None:
        repo = self.hub.resolve(repo_id, revision)
        if self.hf_missing(repo):
            return
        if name not in repo.files:
            return self.send_json(404, {"error": "EntryNotFound"}, {"X-Error-Code": "EntryNotFound"})
        data = repo.files[name]
        lfs = name.endswith(LFS_SUFFIXES)
        etag = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{etag}"'}
        if lfs:
            headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))}
        self.send_bytes(name, data, head, headers)

    # --- ModelScope ------------------------------------------------------------------------------------
    def ms_missing(self, found) -> bool:
        if isinstance(found, Repo):
            return False
        message = "model not found" if found is None else "revision not found"
        self.send_json(404, {"Code": 10010205001, "Success": False, "Message": message, "RequestId": "fake"})
        return True

    def ms_files(self, repo_id: str, revision: str) -> None:
        repo = self.hub.resolve(repo_id, revision)
        if self.ms_missing(repo):
            return
        files = [{"Name": name, "Path": name, "Type": "blob", "Size": len(data), "Revision": repo.commit,
                  "Sha256": hashlib.sha256(data).hexdigest(), "IsLFS": name.endswith(LFS_SUFFIXES)}
                 for name, data in repo.files.items()]
        self.send_json(200, {"Code": 200, "Success": True, "Data": {"Files": files}, "RequestId": "fake"})

    def ms_file(self, repo_id: str, revision: str, name: str, head: bool) -> None:
        repo = self.hub.resolve(repo_id, revision)
        if self.ms_missing(repo):
            return
        if name not in repo.files:
            return self.send_json(404, {"Code": 10010205001, "Success": False, "Message": "file not found"})
        self.send_bytes(name, repo.files[name], head, {})

    # --- responses -------------------------------------------------------------------------------------
    def send_json(self, status: int, body, headers: dict | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(raw)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    def send_bytes(self, name: str, data: bytes, head: bool, headers: dict) -> None:
        data = self.hub.body(name, data)
        start, end = 0, len(data) - 1
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m:
            start, end = int(m[1]), min(int(m[2]) if m[2] else len(data) - 1, len(data) - 1)
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        part = data[start:end + 1]
        self.send_response(206 if m else 200)
        base = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes", "Content-Length": str(len(part))}
        if m:
            base["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        for k, v in {**base, **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return
        cut = self.hub.cut.get(name)
        if cut and cut.times > 0 and end >= cut.after:
            # The transfer breaks at byte `after` of the file, however the client asks (a retry with a Range
            # past it gets nothing): an interruption its own retries cannot get over.
            cut.times -= 1
            self.wfile.write(part[:max(0, cut.after - start)])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        pause = self.hub.slow.get(name, 0.0)
        for at in range(0, len(part), 65536):
            self.wfile.write(part[at:at + 65536])
            if pause:
                time.sleep(pause)
