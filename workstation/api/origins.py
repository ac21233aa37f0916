"""Which requests may change something: no web page of another origin may queue a job or a run.

A browser sends a cross-origin POST of a form, plain text or a bare blob ("simple" requests) without asking
first (no CORS preflight): the page cannot read the answer, but the job would run and land in History.
Two checks stop that, each enough alone for today's browsers:

- A state-changing request whose `Origin` is neither this server nor one of `[api] cors_origins` is refused,
  as is one a browser marks `Sec-Fetch-Site: cross-site`/`same-site` without such an origin.
- A POST whose body a form or a no-cors fetch could have sent (no Content-Type, multipart, urlencoded, plain
  text) must carry `X-IEW-Request` or `Authorization`: headers a page can only add after a preflight, which
  only the listed origins pass. Our own client (workstation/api/client.py) sends `X-IEW-Request: 1`.
"""
from __future__ import annotations

from typing import Iterable

from workstation.api.server import is_loopback

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
REQUEST_HEADER = "x-iew-request"
FORM_TYPES = {"", "multipart/form-data", "application/x-www-form-urlencoded", "text/plain"}
DEFAULT_PORTS = {"http": "80", "https": "443"}


def normalized(origin: str) -> str:
    """scheme://host[:port], lower case, without a default port or a trailing slash."""
    origin = origin.strip().rstrip("/").lower()
    scheme, sep, rest = origin.partition("://")
    port = DEFAULT_PORTS.get(scheme)
    if sep and port and rest.endswith(f":{port}"):
        rest = rest[: -len(port) - 1]
    return f"{scheme}{sep}{rest}"


def split_origin(origin: str) -> tuple[str, str, str]:
    """(scheme, host, port) of a normalized origin; the port filled in from the scheme where omitted."""
    scheme, _, rest = origin.partition("://")
    host, port = rest, ""
    if rest.startswith("["):                                   # [::1]:8502
        host, _, tail = rest.partition("]")
        host, port = host + "]", tail.lstrip(":")
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    return scheme, host, port or DEFAULT_PORTS.get(scheme, "")


def is_own(origin: str, scheme: str, host_header: str, server: tuple[str, int] | None, token: bool) -> bool:
    """Is `origin` this server? Its port must be the one the request came in on and its host a loopback name
    or the address the request came in on. The Host header alone is not trusted without a token: a page of
    evil.example whose name is re-pointed at 127.0.0.1 (DNS rebinding) sends a matching Host and Origin."""
    origin = normalized(origin)
    if token and origin == normalized(f"{scheme}://{host_header}"):
        return True                       # behind a proxy, under a name; the token keeps pages out anyway
    if server is None:
        return False
    o_scheme, host, port = split_origin(origin)
    server_host, server_port = server
    return o_scheme == scheme and port == str(server_port) and (is_loopback(host) or host == str(server_host).lower())


def refusal(method: str, headers: dict[str, str], scheme: str, allowed: Iterable[str],
            server: tuple[str, int] | None = None, token: bool = False) -> tuple[str, str] | None:
    """(code, message) when this request may not change anything here; None when it may. `headers` are
    lower-cased names; `allowed` are the configured CORS origins; `server` is the (host, port) the request
    came in on (ASGI's scope["server"]); `token`: the server requires one."""
    if method.upper() in SAFE_METHODS:
        return None
    origin = headers.get("origin")
    trusted = origin is not None and (is_own(origin, scheme, headers.get("host", ""), server, token)
                                      or normalized(origin) in {normalized(o) for o in allowed})
    if origin is not None and not trusted:
        return "cross_origin", ("refused: the request comes from a web page of another origin; only this server's "
                                "own pages and the origins in [api] cors_origins may change anything")
    if not trusted and headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
        return "cross_origin", ("refused: the browser says the request comes from another site; only this server's "
                                "own pages and the origins in [api] cors_origins may change anything")
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    if method.upper() == "POST" and kind in FORM_TYPES and not headers.get(REQUEST_HEADER) \
            and not headers.get("authorization"):
        return "request_header_missing", ("a POST with this body type (a form, an upload, plain text or none) must "
                                          "carry the header 'X-IEW-Request: 1' (or the API token): a web page of "
                                          "another site cannot add it")
    return None
