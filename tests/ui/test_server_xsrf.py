"""The UI server keeps Streamlit's XSRF protection on: an upload (the one state-changing HTTP route Streamlit has)
without the page's token is refused, even where the environment or a config file turns the protection off."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.ui.test_browser_e2e import running_server
from workstation.ui.server import streamlit_argv


def test_the_server_argv_turns_xsrf_protection_on():
    argv = streamlit_argv("127.0.0.1", 8501)
    assert argv[argv.index("--server.enableXsrfProtection") + 1] == "true"


def test_the_server_the_launcher_starts_refuses_an_upload_without_the_xsrf_token(tmp_path, monkeypatch):
    # What a user's environment (or ~/.streamlit/config.toml) may say; the workstation must not follow it.
    monkeypatch.setenv("STREAMLIT_SERVER_ENABLE_XSRF_PROTECTION", "false")
    with running_server(tmp_path) as (url, _):
        forged = urllib.request.Request(f"{url}/_stcore/upload_file/any-session/any-file", method="PUT",
                                        data=b"--x--\r\n", headers={"Origin": "http://evil.example",
                                                                    "Content-Type": "multipart/form-data; boundary=x"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=30)
        # Off, the request would reach the session check (400, "Invalid session_id"); on, it never gets there.
        assert refused.value.code == 403 and b"XSRF" in refused.value.read()
