"""The UI server keeps Streamlit's cross-site protection on, whatever the environment or a config file says:
an upload (Streamlit's one state-changing HTTP route) without the page's XSRF token is refused, and so is a
session's WebSocket (which drives every button) opened by a page of another origin or of a name re-pointed
at 127.0.0.1 (DNS rebinding)."""
from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from tests.workstation.ui.test_browser_e2e import running_server
from workstation.ui.server import streamlit_argv


def test_the_server_argv_pins_xsrf_and_cors_protection_on():
    argv = streamlit_argv("127.0.0.1", 8501)
    assert argv[argv.index("--server.enableXsrfProtection") + 1] == "true"
    assert argv[argv.index("--server.enableCORS") + 1] == "true"
    allowed = [argv[i + 1] for i, a in enumerate(argv) if a == "--server.allowedHosts"]
    assert set(allowed) == {"localhost", "127.0.0.1", "::1"}
    assert "--server.allowedHosts" not in streamlit_argv("0.0.0.0", 8501)     # off loopback: any name may be right


def websocket_handshake(port: int, origin: str, host: str) -> int:
    """The status a browser's WebSocket handshake to the session stream gets (101: opened)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall((f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   f"Sec-WebSocket-Protocol: streamlit\r\nOrigin: {origin}\r\n\r\n").encode())
        return int(s.recv(1024).split(b" ")[1])


def test_the_server_the_launcher_starts_refuses_cross_site_uploads_and_sessions(tmp_path, monkeypatch):
    # What a user's environment (or ~/.streamlit/config.toml) may say; the workstation must not follow it.
    monkeypatch.setenv("STREAMLIT_SERVER_ENABLE_XSRF_PROTECTION", "false")
    monkeypatch.setenv("STREAMLIT_SERVER_ENABLE_CORS", "false")
    with running_server(tmp_path) as (url, _):
        forged = urllib.request.Request(f"{url}/_stcore/upload_file/any-session/any-file", method="PUT",
                                        data=b"--x--\r\n", headers={"Origin": "http://evil.example",
                                                                    "Content-Type": "multipart/form-data; boundary=x"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=30)
        # Off, the request would reach the session check (400, "Invalid session_id"); on, it never gets there.
        assert refused.value.code == 403 and b"XSRF" in refused.value.read()

        port = int(url.rsplit(":", 1)[1])
        assert websocket_handshake(port, url, f"127.0.0.1:{port}") == 101                     # the UI's own page
        assert websocket_handshake(port, "http://evil.example", f"127.0.0.1:{port}") == 403
        assert websocket_handshake(port, f"http://rebound.example:{port}", f"rebound.example:{port}") == 403
