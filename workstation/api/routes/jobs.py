"""/v1/jobs: background batch jobs (the UI's Batch page shows them), queued from a JSON body or an uploaded
JSONL/CSV/TXT file, listed, read back as JSONL and cancelled."""
from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from contracts.names import Reads
from workstation.api.errors import ApiError, body_json, validation_message
from workstation.api.routes import RowId, State, in_thread, plain
from workstation.api.routes.extract import checked
from workstation.api.schemas import ExtractRequest
from workstation.api.state import ApiState
from workstation.unicode_text import lone_surrogate

router = APIRouter()
UPLOAD_SUFFIXES = (".jsonl", ".json", ".csv", ".txt")
FORM_HEADER = {"name": "X-IEW-Request", "in": "header", "required": False, "schema": {"type": "string", "example": "1"},
               "description": "required with a multipart upload unless the token is sent: no form of another web "
                              "page can send it (docs/api.md, Security)"}


@router.post("/v1/jobs", tags=["jobs"], status_code=202, openapi_extra={"parameters": [FORM_HEADER],
                                                                          "requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/ExtractRequest"}},
    "multipart/form-data": {"schema": {"type": "object", "required": ["file", "model"], "properties": {
        "file": {"type": "string", "format": "binary", "description": "JSONL, CSV (a text column) or TXT"},
        "model": {"type": "string"}, "schema": {"type": "string", "description": "JSON: the default schema"},
        "task": {"type": "string"}, "labels": {"type": "string", "description": "JSON list"},
        "optimizations": {"type": "string", "description": "comma-separated names"},
        "dtype": {"type": "string", "enum": ["fp32", "fp16", "bf16"]}, "device": {"type": "string"},
        "options": {"type": "string", "description": "JSON object"}}}}}}})
async def create_job(request: Request, state: State):
    """Queue a background batch job (the UI's Batch page shows it): a JSON body as /v1/extract's, or a
    multipart upload of a JSONL/CSV/TXT file."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        config, documents, name = await _upload(state, request)
    elif kind in ("application/json", ""):
        try:
            body = ExtractRequest.model_validate(await body_json(request))
        except ValidationError as e:
            raise ApiError(422, "invalid_request", validation_message(e.errors())) from None
        config, documents = await in_thread(checked, state, body, True)
        name = "api request"
    else:
        raise ApiError(415, "unsupported_media_type", "send application/json or multipart/form-data")
    job_id = await in_thread(state.create_job, config, documents, name)
    return {"job_id": job_id, "status": "queued", "documents": len(documents)}


@router.get("/v1/jobs", tags=["jobs"])
def list_jobs(state: State, limit: int = Query(50, ge=1, le=500)):
    return {"jobs": [_job_json(j) for j in state.store.list_jobs(limit)]}


@router.get("/v1/jobs/{job_id}", tags=["jobs"])
def get_job(job_id: RowId, state: State):
    return _job_json(state.store.get_job(job_id))


@router.get("/v1/jobs/{job_id}/results", tags=["jobs"], response_class=StreamingResponse)
def job_results(job_id: RowId, state: State):
    """The results done so far as JSONL, in input order (a finished job: every document)."""
    state.store.get_job(job_id)                     # 404 before the stream starts

    def lines():
        for _, result in state.store.job_results(job_id):
            if result is not None:
                yield result.to_json_line() + b"\n"
    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.delete("/v1/jobs/{job_id}", tags=["jobs"])
def cancel_job(job_id: RowId, state: State):
    job = state.store.get_job(job_id)
    if not state.jobs.cancel(job_id):
        raise ApiError(409, "job_finished", f"job {job_id} is already {job.status}")
    return {"job_id": job_id, "status": "cancelled"}


def _job_json(job) -> dict[str, Any]:
    return {**plain(asdict(job)), "fraction": job.fraction, "finished": job.finished}


async def _upload(state: ApiState, request: Request):
    from workstation.inputs import read_valid_documents
    try:
        form = await request.form()
    except Exception as e:                               # noqa: BLE001 - a malformed multipart body
        raise ApiError(400, "invalid_upload", f"the multipart body cannot be read: {type(e).__name__}") from None
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise ApiError(422, "invalid_request", "file: a JSONL, CSV or TXT file is required")
    name = Path(upload.filename or "upload.jsonl").name
    suffix = Path(name).suffix.lower()
    if suffix not in UPLOAD_SUFFIXES:
        raise ApiError(400, "invalid_upload", f"{name}: use a .jsonl, .csv or .txt file")
    fields = {k: v for k, v in form.items() if isinstance(v, str)}

    def field_json(key: str):
        if not fields.get(key):
            return None
        try:
            value = json.loads(fields[key])
        except (ValueError, RecursionError):
            raise ApiError(400, "invalid_input", f"{key}: not valid JSON") from None
        problem = lone_surrogate(value, key)
        if problem:
            raise ApiError(400, "invalid_input", problem)
        return value

    model = fields.get("model") or ""
    schema, labels, options = field_json("schema"), field_json("labels"), field_json("options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "invalid_input", "options: a JSON object is required")
    names = None if "optimizations" not in fields else [
        n.strip() for n in fields["optimizations"].split(",") if n.strip() and n.strip() != "none"]
    config = state.config(model, fields.get("device") or None, fields.get("dtype") or None, names, options, None)
    fam = state.family(model)
    # The default for lines without their own, as the model reads it; the other kind is named as an error.
    # A task without labels is kept too: lines that give no labels are then told that labels are missing.
    if fam.reads == Reads.LABELS and (labels is not None or fields.get("task")):
        default, where = {"task": fields.get("task") or "ext", "labels": labels}, "labels"
    else:
        default, where = (schema, "schema") if schema is not None else (labels, "labels")
    data = await upload.read()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"upload{suffix}"
        path.write_bytes(data)
        # Messages name the file as it was sent, not the temporary copy.
        documents, _ = await in_thread(read_valid_documents, path, fam, default, False, name, where)
    if not documents:
        raise ApiError(400, "invalid_upload", f"{name} has no documents")
    return config, documents, name
