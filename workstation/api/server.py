"""`launcher.py serve`: the API under uvicorn, on loopback unless told otherwise (and then only with a token)."""
from __future__ import annotations

import ipaddress

from workstation.settings import Settings


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False                     # a host name: it may resolve to anything


MIN_TOKEN_CHARS = 16            # off loopback anyone on the network may guess; spaces are no secret


def token_strength(token: str) -> int:
    """The characters of a token that are not white space."""
    return len("".join(token.split()))


def check_exposure(host: str, token: str) -> None:
    """Refuse to listen beyond this machine without a bearer token of real strength."""
    if is_loopback(host):
        return
    if not token:
        raise SystemExit(f"refusing to serve on {host}: off loopback the API needs a bearer token; set [api] token "
                         "in settings.toml or IEW_API_TOKEN (or serve on 127.0.0.1)")
    if token_strength(token) < MIN_TOKEN_CHARS:
        raise SystemExit(f"refusing to serve on {host}: the API token has {token_strength(token)} characters besides "
                         f"spaces; off loopback it needs at least {MIN_TOKEN_CHARS} (make one with python3 -c "
                         "'import secrets; print(secrets.token_urlsafe(24))' and set [api] token or IEW_API_TOKEN)")


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> int:
    import uvicorn

    from workstation.api.app import create_app
    host, port = host or settings.api.host, port or settings.api.port
    check_exposure(host, settings.api.token)
    print(f"IE Workstation API on http://{host}:{port} (docs: /docs; Label Studio ML backend: /ls)")
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
    return 0
