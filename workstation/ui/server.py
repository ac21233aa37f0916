"""The UI server process (`python3 launcher.py` runs `python -m workstation.ui.server`).

It starts the batch-job runner first and then Streamlit on app.py, in this one process. So jobs left
queued or running by the last shutdown go on as soon as the server is up, whether or not a browser
ever connects and whichever page it opens first (Streamlit itself runs app.py only for a browser session).
"""
from __future__ import annotations

import sys

from workstation.settings import ROOT, load_settings
from workstation.ui.local_files import is_loopback

APP = ROOT / "workstation" / "ui" / "app.py"


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def streamlit_argv(host: str, port: int) -> list[str]:
    # The file watcher is off: nobody edits the code of a running workstation, and its module scan
    # floods the log (transformers probing optional packages raises on every pass).
    # Cross-site protection is pinned on (a flag outranks STREAMLIT_* variables and config.toml): XSRF keeps
    # other web pages from posting uploads into a session, CORS from opening a session's WebSocket (which
    # drives every button). On loopback the WebSocket's Host must name loopback too: a page whose name was
    # re-pointed at 127.0.0.1 (DNS rebinding) is refused.
    argv = ["streamlit", "run", str(APP), "--server.address", host, "--server.port", str(port),
            "--server.headless", "true", "--server.fileWatcherType", "none",
            "--server.enableXsrfProtection", "true", "--server.enableCORS", "true",
            "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal"]
    if is_loopback(host):
        for name in dict.fromkeys((*LOOPBACK_NAMES, host.strip().strip("[]").lower())):
            argv += ["--server.allowedHosts", name]
    return argv


def main() -> int:
    settings = load_settings()
    from workstation.ui import state
    state.job_runner()                  # the process-wide runner app.py also gets; resumes unfinished jobs
    state.training_launcher()           # follows fine-tunes left running, so their final state is recorded
    from streamlit.web import cli
    sys.argv = streamlit_argv(settings.ui_host, settings.ui_port)
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
