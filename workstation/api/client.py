"""A small typed client for the workstation's HTTP API (`launcher.py serve`, docs/api.md).

    from workstation.api.client import Client
    with Client("http://127.0.0.1:8502") as api:
        answer = api.extract("rexuninlu", [{"text": "张三在北京大学读书"}], schema={"人物": None, "组织机构": None})
        for line in answer.results:
            print(line["id"], line["output"])

It needs only httpx. Errors come back as `ApiError` with the server's code, message and line; a full
queue (429) is retried after the server's Retry-After, `retries` times.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import httpx


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, line: int | None = None,
                 retry_after: float | None = None):
        self.status, self.code, self.message, self.line, self.retry_after = status, code, message, line, retry_after
        super().__init__(f"{status} {code}: {message}")


@dataclass(frozen=True)
class Extraction:
    run_id: int | None                   # the run in the workstation's History
    results: list[dict[str, Any]]        # the lines `launcher.py extract` writes: {"id", "output", ...}
    model: str
    device: str
    dtype: str
    demo: bool                           # random demo weights: outputs are meaningless
    shared_pass: int                     # requests that shared this request's forward pass
    wall_seconds: float


class Client:
    def __init__(self, base_url: str = "http://127.0.0.1:8502", token: str | None = None, timeout: float = 300.0,
                 retries: int = 3, transport: httpx.BaseTransport | None = None):
        # X-IEW-Request: what a form on another web page cannot send; the server wants it on uploads (docs/api.md).
        headers = {"X-IEW-Request": "1", **({"Authorization": f"Bearer {token}"} if token else {})}
        self.retries = retries
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ---- service --------------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return self._json("GET", "/health")

    def models(self) -> list[dict[str, Any]]:
        return self._json("GET", "/v1/models")["models"]

    def optimizations(self) -> list[dict[str, Any]]:
        return self._json("GET", "/v1/optimizations")["optimizations"]

    def gpus(self) -> dict[str, Any]:
        return self._json("GET", "/v1/gpus")

    # ---- extraction -----------------------------------------------------------------------------------

    def extract(self, model: str, documents: Sequence[dict[str, Any]], *, schema: dict | None = None,
                task: str | None = None, labels: Sequence[str] | None = None,
                optimizations: Sequence[str] | None = None, dtype: str | None = None, device: str | None = None,
                batch_size: int | None = None, options: dict[str, Any] | None = None) -> Extraction:
        body = _request_body(model, documents, schema, task, labels, optimizations, dtype, device, batch_size, options)
        d = self._json("POST", "/v1/extract", json=body)
        return Extraction(d["run_id"], d["results"], d["model"], d["device"], d["dtype"], d["demo"],
                          d["shared_pass"], d["wall_seconds"])

    # ---- jobs -----------------------------------------------------------------------------------------

    def submit_job(self, model: str, documents: Sequence[dict[str, Any]], **settings) -> int:
        body = _request_body(model, documents, settings.pop("schema", None), settings.pop("task", None),
                             settings.pop("labels", None), settings.pop("optimizations", None),
                             settings.pop("dtype", None), settings.pop("device", None),
                             settings.pop("batch_size", None), settings.pop("options", None))
        if settings:
            raise TypeError(f"unknown job settings: {', '.join(settings)}")
        return self._json("POST", "/v1/jobs", json=body)["job_id"]

    def upload_job(self, path: str | Path, model: str, *, schema: dict | None = None, task: str | None = None,
                   labels: Sequence[str] | None = None, optimizations: Sequence[str] | None = None,
                   dtype: str | None = None, device: str | None = None) -> int:
        import json
        path = Path(path)
        fields = {"model": model}
        for key, value in (("schema", schema), ("labels", labels)):
            if value is not None:
                fields[key] = json.dumps(value, ensure_ascii=False)
        for key, value in (("task", task), ("dtype", dtype), ("device", device)):
            if value is not None:
                fields[key] = value
        if optimizations is not None:
            fields["optimizations"] = ",".join(optimizations) or "none"
        with open(path, "rb") as f:
            return self._json("POST", "/v1/jobs", data=fields, files={"file": (path.name, f)})["job_id"]

    def job(self, job_id: int) -> dict[str, Any]:
        return self._json("GET", f"/v1/jobs/{job_id}")

    def wait_for_job(self, job_id: int, timeout: float = 3600.0, poll_s: float = 1.0) -> dict[str, Any]:
        """Poll until the job has finished (done, failed or cancelled); returns its last state."""
        end = time.monotonic() + timeout
        while True:
            state = self.job(job_id)
            if state["finished"] or time.monotonic() > end:
                return state
            time.sleep(poll_s)

    def job_results(self, job_id: int) -> Iterator[dict[str, Any]]:
        """The job's result lines, streamed (a finished job: one per document, in input order)."""
        import json
        with self._http.stream("GET", f"/v1/jobs/{job_id}/results") as response:
            if response.status_code >= 400:
                response.read()
                raise _error(response)
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)

    def cancel_job(self, job_id: int) -> None:
        self._json("DELETE", f"/v1/jobs/{job_id}")

    # ---- history --------------------------------------------------------------------------------------

    def runs(self, q: str | None = None, model: str | None = None, task: str | None = None,
             source: str | None = None, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        params = {k: v for k, v in (("q", q), ("model", model), ("task", task), ("source", source)) if v}
        return self._json("GET", "/v1/runs", params={**params, "limit": limit, "offset": offset})

    def run(self, run_id: int) -> dict[str, Any]:
        return self._json("GET", f"/v1/runs/{run_id}")

    def export(self, run_id: int, fmt: str = "jsonl") -> bytes:
        return self._send("GET", f"/v1/runs/{run_id}/export", params={"format": fmt}).content

    # ---- plumbing -------------------------------------------------------------------------------------

    def _json(self, method: str, url: str, **kwargs) -> Any:
        return self._send(method, url, **kwargs).json()

    def _send(self, method: str, url: str, **kwargs) -> httpx.Response:
        for attempt in range(self.retries + 1):
            response = self._http.request(method, url, **kwargs)
            if response.status_code == 429 and attempt < self.retries:
                time.sleep(float(response.headers.get("retry-after", "1")))
                continue
            if response.status_code >= 400:
                raise _error(response)
            return response
        raise AssertionError("unreachable")


def _request_body(model, documents, schema, task, labels, optimizations, dtype, device, batch_size, options):
    body: dict[str, Any] = {"model": model, "documents": list(documents)}
    for key, value in (("schema", schema), ("task", task), ("labels", list(labels) if labels is not None else None),
                       ("optimizations", list(optimizations) if optimizations is not None else None),
                       ("dtype", dtype), ("device", device), ("batch_size", batch_size), ("options", options)):
        if value is not None:
            body[key] = value
    return body


def _error(response: httpx.Response) -> ApiError:
    try:
        error = response.json()["error"]
        code, message, line = error["code"], error["message"], error.get("line")
    except (ValueError, KeyError, TypeError):
        code, message, line = "http_error", response.text[:500], None
    retry = response.headers.get("retry-after")
    return ApiError(response.status_code, code, message, line, float(retry) if retry else None)
