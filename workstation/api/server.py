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


def check_exposure(host: str, token: str) -> None:
    """Refuse to listen beyond this machine without a bearer token."""
    if not is_loopback(host) and not token:
        raise SystemExit(f"refusing to serve on {host}: off loopback the API needs a bearer token; set [api] token "
                         "in settings.toml or IEW_API_TOKEN (or serve on 127.0.0.1)")


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> int:
    import uvicorn

    from workstation.api.app import create_app
    host, port = host or settings.api.host, port or settings.api.port
    check_exposure(host, settings.api.token)
    print(f"IE Workstation API on http://{host}:{port} (docs: /docs; Label Studio ML backend: /ls)")
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
    return 0
