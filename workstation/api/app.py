"""The HTTP API (FastAPI): routes over one ApiState. `create_app(settings)` builds it; `launcher.py serve`
runs it under uvicorn (workstation/api/server.py). docs/api.md describes every route.

Every error is JSON {"error": {"code", "message", "line"?}}: bad input is 400/404/409/413/422/429, never a
500; a 500 says only "internal error" (the traceback goes to the server log, not to the client).
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import tempfile
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from fastapi import Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.domain import InputError, WeightsError
from contracts.names import Reads
from storage.views import NotFound
from workstation import plugins
from workstation.api import label_studio, origins
from workstation.api.lanes import QueueFull
from workstation.api.schemas import ExportFormat, ExtractRequest, PredictRequest, SetupRequest, Source, WebhookRequest
from workstation.api.state import ApiState
from workstation.engine import Cancelled
from workstation.exports import export_bytes
from workstation.settings import Settings
from workstation.unicode_text import lone_surrogate

log = logging.getLogger(__name__)
MAX_ID = 2**63 - 1                                      # SQLite INTEGER: larger ids cannot exist
OPEN_PATHS = {"/health", "/ls", "/ls/", "/ls/health", "/docs", "/docs/oauth2-redirect", "/openapi.json"}
EXPORT_NAMES = {"xlsx": "excel"}                       # the API's format name -> the exporter's
UPLOAD_SUFFIXES = (".jsonl", ".json", ".csv", ".txt")
FORM_HEADER = {"name": "X-IEW-Request", "in": "header", "required": False, "schema": {"type": "string", "example": "1"},
               "description": "required with a multipart upload unless the token is sent: no form of another web "
                              "page can send it (docs/api.md, Security)"}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, line: int | None = None,
                 headers: dict[str, str] | None = None):
        self.status, self.code, self.message, self.line, self.headers = status, code, message, line, headers
        super().__init__(message)


def error_body(code: str, message: str, line: int | None = None) -> dict[str, Any]:
    # A lone surrogate that slipped into a message (a path, a key) must not make the answer unencodable.
    message = message[:2000].encode("utf-8", "backslashreplace").decode("utf-8")
    error: dict[str, Any] = {"code": code, "message": message}
    if line is not None:
        error["line"] = line
    return {"error": error}


def _json_error(status: int, code: str, message: str, line: int | None = None,
                headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message, line), status_code=status, headers=headers)


# ---- ASGI middleware: bearer token, origin and body limit, before any route reads the body --------------

class Guard:
    """Refuses a request without the token (401), a state-changing request another web page may have sent
    (403, origins.py) and a body over `max_body` bytes (413), in plain ASGI so the body is counted as it
    arrives and a refused request costs no parsing."""

    def __init__(self, app, max_body: int, token: str, cors_origins: tuple[str, ...] = ()):
        self.app, self.max_body, self.token, self.cors_origins = app, max_body, token, tuple(cors_origins)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.token and scope["path"] not in OPEN_PATHS and scope["method"] != "OPTIONS" \
                and not self._authorized(headers.get("authorization", "")):
            return await _json_error(401, "unauthorized", "send the API token as 'Authorization: Bearer TOKEN'",
                                     headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
        refused = origins.refusal(scope["method"], headers, scope.get("scheme", "http"), self.cors_origins,
                                  scope.get("server"), bool(self.token))
        if refused:
            return await _json_error(403, *refused)(scope, receive, send)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            return await self._too_large(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                return await self._too_large(scope, receive, send)
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def send_hardened(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [(b"x-content-type-options", b"nosniff")]
            await send(message)

        await self.app(scope, replay, send_hardened)

    def _authorized(self, header: str) -> bool:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            return hmac.compare_digest(value.strip().encode(), self.token.encode())
        if scheme.lower() == "basic":              # Label Studio's ML-backend auth: any user, the token as password
            try:
                _, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            return hmac.compare_digest(password.encode(), self.token.encode())
        return False

    async def _too_large(self, scope, receive, send):
        await _json_error(413, "body_too_large", f"the request body is over {self.max_body} bytes "
                                                 f"([api] max_body_bytes); send large inputs as a job upload in parts"
                          )(scope, receive, send)


# ---- the app ---------------------------------------------------------------------------------------------

def create_app(settings: Settings, state: ApiState | None = None, **state_args) -> FastAPI:
    state = state or ApiState(settings, **state_args)

    @asynccontextmanager
    async def lifespan(app):
        state.start()
        yield
        state.stop()

    app = FastAPI(title="IE Workstation API", version="1", lifespan=lifespan,
                  description="Zero-shot information extraction with RexUniNLU and SeqGPT; runs and jobs are "
                              "shared with the workstation UI. Errors: {\"error\": {\"code\", \"message\", \"line\"?}}.",
                  dependencies=[Depends(HTTPBearer(auto_error=False))])   # documents the token; Guard checks it
    app.state.api = state
    _handlers(app)
    app.add_middleware(Guard, max_body=settings.api.max_body_bytes, token=settings.api.token,
                       cors_origins=tuple(settings.api.cors_origins))
    if settings.api.cors_origins:                 # outermost, so a 401, 403 or 413 reaches the browser's script too
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.api.cors_origins),
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "X-IEW-Request"])
    _routes(app, state)
    _label_studio_routes(app, state)
    return app


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_, e: ApiError):
        return _json_error(e.status, e.code, e.message, e.line, e.headers)

    @app.exception_handler(InputError)
    async def input_error(_, e: InputError):
        return _json_error(400, "invalid_input", str(e), e.line)

    @app.exception_handler(NotFound)
    async def not_found(_, e: NotFound):
        return _json_error(404, "not_found", str(e))

    @app.exception_handler(QueueFull)
    async def queue_full(_, e: QueueFull):
        return _json_error(429, "queue_full", str(e), headers={"Retry-After": str(e.retry_after_s)})

    @app.exception_handler(WeightsError)
    async def weights_error(_, e: WeightsError):
        return _json_error(503, "weights", str(e))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_, e: RequestValidationError):
        return _json_error(422, "invalid_request", validation_message(e.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_, e: StarletteHTTPException):
        codes = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}
        return _json_error(e.status_code, codes.get(e.status_code, "http_error"), str(e.detail), headers=e.headers)

    @app.exception_handler(Exception)
    async def internal(_, e: Exception):
        log.exception("internal error")
        return _json_error(500, "internal", "internal error; the server log has the details")


def validation_message(errors) -> str:
    """pydantic's errors as one line, without echoing the input values back."""
    parts = []
    for err in list(errors)[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg", "invalid body"))
    return "; ".join(parts) or "invalid request"


async def _body_json(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (ValueError, RecursionError) as e:          # JSON syntax, invalid UTF-8, absurd nesting
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {type(e).__name__}") from None


def _run_in_thread(fn: Callable, *args):
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _routes(app: FastAPI, state: ApiState) -> None:
    @app.get("/health", tags=["service"])
    def health():
        return {"status": "ok", "models": list(state.families()), "loaded": state.loaded()}

    @app.get("/v1/models", tags=["models"])
    def models():
        loaded = state.loaded()
        out = []
        for name, fam in state.families().items():
            weights, demo = state.settings.weights_for(name, fam.needs_weights)
            ms = state.settings.model(name)
            out.append({"name": name, "title": fam.title, "reads": str(fam.reads), "weights": str(weights),
                        "demo": demo or (weights.exists() and fam.is_demo(weights)),
                        "tasks": [{"name": t.name, "title": t.title, "example": t.text, "schema": t.schema,
                                   "description": t.description} for t in fam.tasks.values()],
                        "options": dict(fam.options), "device": ms.device, "dtype": ms.dtype,
                        "batch_size": ms.batch_size, "loaded_devices": loaded.get(name, [])})
        return {"models": out}

    @app.get("/v1/optimizations", tags=["models"])
    def optimizations():
        """Each optimization and, per served model, whether it applies (this loads the model if needed)."""
        registry = plugins.optimizations()
        verdicts: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in registry}
        for name in state.families():
            try:
                # The model as loaded now (whatever its settings), else as settings.toml has it.
                key = next((k for k in state.shelf.loaded() if k[0] == name), None) or \
                    state.shelf_key(state.config(name, None, None, [], {}, None))
                with state.shelf.borrow(key) as model:
                    for opt_name, opt in registry.items():
                        ok, reason = opt.applies_to(model)
                        verdicts[opt_name][name] = {"applies": ok, "reason": reason}
            except (InputError, WeightsError, RuntimeError) as e:
                for opt_name in registry:
                    verdicts[opt_name][name] = {"applies": None, "reason": f"the model could not be loaded: {e}"}
        return {"optimizations": [{"name": n, "title": o.title, "description": o.description, "switch": o.switch,
                                   "lossless": o.lossless, "models": verdicts[n]} for n, o in registry.items()]}

    @app.post("/v1/extract", tags=["extract"])
    async def extract(body: ExtractRequest):
        """Run documents now; the response has the same result lines as `launcher.py extract`."""
        if len(body.documents) > state.settings.api.max_documents:
            raise ApiError(413, "too_many_documents", f"{len(body.documents)} documents; at most "
                           f"{state.settings.api.max_documents} per request ([api] max_documents): use /v1/jobs")
        config, documents = await _run_in_thread(_checked, state, body)     # a big body must not stall the loop
        request = state.submit(config, documents)
        try:
            extraction = await _wait(request, state.settings.api.timeout_s)
        except Cancelled:
            raise ApiError(409, "cancelled", "the run was cancelled") from None
        report = extraction.report
        run_id = await asyncio.wrap_future(extraction.recorded)          # in History before the answer goes out
        return {"run_id": run_id, "model": report.model, "device": report.device, "dtype": report.dtype,
                "demo": report.demo, "optimizations": report.optimizations, "shared_pass": extraction.shared_with,
                "wall_seconds": report.wall_seconds, "results": [r.to_json() for r in report.results]}

    @app.post("/v1/jobs", tags=["jobs"], status_code=202, openapi_extra={"parameters": [FORM_HEADER],
                                                                       "requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/ExtractRequest"}},
        "multipart/form-data": {"schema": {"type": "object", "required": ["file", "model"], "properties": {
            "file": {"type": "string", "format": "binary", "description": "JSONL, CSV (a text column) or TXT"},
            "model": {"type": "string"}, "schema": {"type": "string", "description": "JSON: the default schema"},
            "task": {"type": "string"}, "labels": {"type": "string", "description": "JSON list"},
            "optimizations": {"type": "string", "description": "comma-separated names"},
            "dtype": {"type": "string", "enum": ["fp32", "fp16", "bf16"]}, "device": {"type": "string"},
            "options": {"type": "string", "description": "JSON object"}}}}}}})
    async def create_job(request: Request):
        """Queue a background batch job (the UI's Batch page shows it): a JSON body as /v1/extract's, or a
        multipart upload of a JSONL/CSV/TXT file."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "multipart/form-data":
            config, documents, name = await _upload(state, request)
        elif kind in ("application/json", ""):
            try:
                body = ExtractRequest.model_validate(await _body_json(request))
            except ValidationError as e:
                raise ApiError(422, "invalid_request", validation_message(e.errors())) from None
            config, documents = await _run_in_thread(_checked, state, body, True)
            name = "api request"
        else:
            raise ApiError(415, "unsupported_media_type", "send application/json or multipart/form-data")
        job_id = await _run_in_thread(state.create_job, config, documents, name)
        return {"job_id": job_id, "status": "queued", "documents": len(documents)}

    @app.get("/v1/jobs", tags=["jobs"])
    def list_jobs(limit: int = Query(50, ge=1, le=500)):
        return {"jobs": [_job_json(j) for j in state.store.list_jobs(limit)]}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    def get_job(job_id: int = PathParam(ge=1, le=MAX_ID)):
        return _job_json(state.store.get_job(job_id))

    @app.get("/v1/jobs/{job_id}/results", tags=["jobs"], response_class=StreamingResponse)
    def job_results(job_id: int = PathParam(ge=1, le=MAX_ID)):
        """The results done so far as JSONL, in input order (a finished job: every document)."""
        state.store.get_job(job_id)                     # 404 before the stream starts

        def lines():
            for _, result in state.store.job_results(job_id):
                if result is not None:
                    yield result.to_json_line() + b"\n"
        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.delete("/v1/jobs/{job_id}", tags=["jobs"])
    def cancel_job(job_id: int = PathParam(ge=1, le=MAX_ID)):
        job = state.store.get_job(job_id)
        if not state.jobs.cancel(job_id):
            raise ApiError(409, "job_finished", f"job {job_id} is already {job.status}")
        return {"job_id": job_id, "status": "cancelled"}

    @app.get("/v1/runs", tags=["history"])
    def runs(q: str | None = Query(None, max_length=1000), model: str | None = Query(None, max_length=128),
             task: str | None = Query(None, max_length=128), source: Source | None = None,
             limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=10**9)):
        q = (q or "").replace("\x00", " ")
        found = state.store.search_runs(q, model, task, limit=limit, offset=offset, source=source)
        return {"total": state.store.count_runs(q, model, task, source=source),
                "runs": [_plain(asdict(r)) for r in found]}

    @app.get("/v1/runs/{run_id}", tags=["history"])
    def run(run_id: int = PathParam(ge=1, le=MAX_ID)):
        detail = state.store.get_run(run_id)
        return {**_plain(asdict(detail.summary)), "settings": detail.settings,
                "items": [{"document": {"id": d.id, "text": d.text, "schema": d.schema, "task": d.task,
                                        "labels": d.labels}, "result": r.to_json()} for d, r in detail.items]}

    @app.get("/v1/runs/{run_id}/export", tags=["history"], response_class=Response)
    def export(run_id: int = PathParam(ge=1, le=MAX_ID), format: ExportFormat = Query("jsonl")):
        state.store.get_run(run_id)
        data, name, _ = export_bytes(state.store, [run_id], EXPORT_NAMES.get(format, format))
        exporter = plugins.exporters()[EXPORT_NAMES.get(format, format)]
        return Response(data, media_type=exporter.mime, headers={"Content-Disposition": f'attachment; filename="{name}"'})

    @app.get("/v1/gpus", tags=["service"])
    def gpus():
        recorder = state.gpus
        snapshot = recorder.latest() if recorder else None
        if recorder is not None and snapshot is None and recorder.available:
            snapshot = recorder.record_once()
        return {"available": bool(recorder and recorder.available),
                "time": snapshot.time if snapshot else None,
                "gpus": [asdict(g) for g in snapshot.gpus] if snapshot else []}


async def _wait(request, timeout_s: float):
    try:
        outcome = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(request.future)), timeout_s)
    except asyncio.TimeoutError:
        request.abandon()
        raise ApiError(504, "timeout", f"no result within {timeout_s:g}s ([api] timeout_s); the server is busy: "
                                       "retry later, or send the documents as a job") from None
    return outcome


def _checked(state: ApiState, body: ExtractRequest, job: bool = False):
    """The request's settings and documents; a job's documents are checked now, before anything is queued
    (an extraction's are checked by engine.run, in its pass)."""
    config = state.config(body.model, body.device, body.dtype, body.optimizations, body.options, body.batch_size)
    return config, state.documents(body.model, body.document_dicts(), check=job)


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
        documents, _ = await _run_in_thread(read_valid_documents, path, fam, default, False, name, where)
    if not documents:
        raise ApiError(400, "invalid_upload", f"{name} has no documents")
    return config, documents, name


def _job_json(job) -> dict[str, Any]:
    return {**_plain(asdict(job)), "fraction": job.fraction, "finished": job.finished}


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in d.items()}


def _label_studio_routes(app: FastAPI, state: ApiState) -> None:
    model_name = "rexuninlu"

    def version() -> str:
        weights, demo = state.settings.weights_for(model_name)
        return f"{model_name}:{weights.name}{' (random demo weights)' if demo else ''}"

    @app.get("/ls", tags=["label-studio"])
    @app.get("/ls/health", tags=["label-studio"])
    def ls_health():
        return {"status": "UP", "model_class": "IE Workstation RexUniNLU", "model_version": version()}

    @app.post("/ls/setup", tags=["label-studio"])
    def ls_setup(body: SetupRequest):
        config = label_studio.parse_label_config(body.schema_ or "")
        if body.project is not None:
            state.label_studio_projects[str(body.project).split(".")[0]] = config
        return {"model_version": version()}

    @app.post("/ls/predict", tags=["label-studio"])
    async def ls_predict(body: PredictRequest):
        if model_name not in state.families():
            raise ApiError(409, "model_not_served", f"the Label Studio backend needs {model_name}; "
                                                    "add it to [api] models")
        project = str(body.project).split(".")[0] if body.project is not None else None
        if body.label_config:
            config = label_studio.parse_label_config(body.label_config)
        elif project in state.label_studio_projects:
            config = state.label_studio_projects[project]
        else:
            raise ApiError(400, "no_label_config", "send label_config, or connect the project (POST /ls/setup) first")
        if not body.tasks:
            return {"results": [], "model_version": version()}
        texts = [label_studio.task_text(t, config) for t in body.tasks]
        items = [{"id": f"task-{t.get('id', i)}-entities", "text": text, "schema": config.ner_schema()}
                 for i, (t, text) in enumerate(zip(body.tasks, texts), start=1)]
        relation_schema = config.relation_schema()
        if relation_schema:
            items += [{"id": f"task-{t.get('id', i)}-relations", "text": text, "schema": relation_schema}
                      for i, (t, text) in enumerate(zip(body.tasks, texts), start=1)]
        documents = state.documents(model_name, items)
        run_config = state.config(model_name, None, None, None, {}, None)
        extraction = await _wait(state.submit(run_config, documents), state.settings.api.timeout_s)
        results = extraction.report.results
        n = len(texts)
        return {"results": [label_studio.prediction(config, text, results[i], results[n + i] if relation_schema else None,
                                                    version()) for i, text in enumerate(texts)],
                "model_version": version()}

    @app.post("/ls/webhook", tags=["label-studio"])
    def ls_webhook(body: WebhookRequest):
        """Label Studio's events (training starts, project changes): acknowledged; this backend does not train
        from Label Studio (fine-tune with `launcher.py finetune` on an export instead)."""
        return {"status": "ok", "action": body.action[:128]}
