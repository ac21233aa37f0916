"""The UI server process (`python3 launcher.py` runs `python -m workstation.ui.server`).

It starts the batch-job runner first and then Streamlit on app.py, in this one process. So jobs left
queued or running by the last shutdown go on as soon as the server is up, whether or not a browser
ever connects and whichever page it opens first (Streamlit itself runs app.py only for a browser session).
"""
from __future__ import annotations

import sys

from workstation.settings import ROOT, load_settings

APP = ROOT / "workstation" / "ui" / "app.py"


def streamlit_argv(host: str, port: int) -> list[str]:
    # The file watcher is off: nobody edits the code of a running workstation, and its module scan
    # floods the log (transformers probing optional packages raises on every pass).
    # XSRF protection is pinned on: a flag outranks STREAMLIT_* variables and config.toml, so no setting
    # elsewhere lets another web page post uploads into a user's session.
    return ["streamlit", "run", str(APP), "--server.address", host, "--server.port", str(port),
            "--server.headless", "true", "--server.fileWatcherType", "none", "--server.enableXsrfProtection", "true",
            "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal"]


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
