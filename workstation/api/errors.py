"""The API's one error shape, {"error": {"code", "message", "line"?}}, and the handlers that give every
failure that shape: bad input is 400/404/409/413/422/429, never a 500; a 500 says only "internal error"
(the traceback goes to the server log, not to the client)."""
from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.domain import InputError, WeightsError
from storage.views import NotFound
from workstation.api.lanes import QueueFull

log = logging.getLogger(__name__)


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


def json_error(status: int, code: str, message: str, line: int | None = None,
               headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message, line), status_code=status, headers=headers)


def validation_message(errors) -> str:
    """pydantic's errors as one line, without echoing the input values back."""
    parts = []
    for err in list(errors)[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg", "invalid body"))
    return "; ".join(parts) or "invalid request"


async def body_json(request: Request) -> Any:
    """The request body parsed as JSON, or a 400 naming why not (for a route that reads its body itself)."""
    try:
        return json.loads(await request.body())
    except (ValueError, RecursionError) as e:          # JSON syntax, invalid UTF-8, absurd nesting
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {type(e).__name__}") from None


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_, e: ApiError):
        return json_error(e.status, e.code, e.message, e.line, e.headers)

    @app.exception_handler(InputError)
    async def input_error(_, e: InputError):
        return json_error(400, "invalid_input", str(e), e.line)

    @app.exception_handler(NotFound)
    async def not_found(_, e: NotFound):
        return json_error(404, "not_found", str(e))

    @app.exception_handler(QueueFull)
    async def queue_full(_, e: QueueFull):
        return json_error(429, "queue_full", str(e), headers={"Retry-After": str(e.retry_after_s)})

    @app.exception_handler(WeightsError)
    async def weights_error(_, e: WeightsError):
        return json_error(503, "weights", str(e))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_, e: RequestValidationError):
        return json_error(422, "invalid_request", validation_message(e.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_, e: StarletteHTTPException):
        codes = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}
        return json_error(e.status_code, codes.get(e.status_code, "http_error"), str(e.detail), headers=e.headers)

    @app.exception_handler(Exception)
    async def internal(_, e: Exception):
        log.exception("internal error")
        return json_error(500, "internal", "internal error; the server log has the details")
