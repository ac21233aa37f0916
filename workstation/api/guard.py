"""The ASGI middleware in front of every route: bearer token, origin and body limit, checked before any
route reads the body."""
from __future__ import annotations

import base64
import binascii
import hmac

from workstation.api import origins
from workstation.api.errors import json_error

OPEN_PATHS = {"/health", "/ls", "/ls/", "/ls/health", "/docs", "/docs/oauth2-redirect", "/openapi.json"}


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
            return await json_error(401, "unauthorized", "send the API token as 'Authorization: Bearer TOKEN'",
                                    headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
        refused = origins.refusal(scope["method"], headers, scope.get("scheme", "http"), self.cors_origins,
                                  scope.get("server"), bool(self.token))
        if refused:
            return await json_error(403, *refused)(scope, receive, send)
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
        await json_error(413, "body_too_large", f"the request body is over {self.max_body} bytes "
                                                f"([api] max_body_bytes); send large inputs as a job upload in parts"
                         )(scope, receive, send)
