"""Export a selection of runs in any registered format (built-in or plugin), offered as a download.

The file is built on the server first, so an exporter's error is shown on the page rather than lost in
a download that never starts; only its path is kept in the session.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import streamlit as st

from workstation.ui import render


@st.cache_resource(show_spinner=False)
def _export_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="iew-exports-"))


def export_picker(store, run_ids: list[int], key: str = "export") -> None:
    """A format, "Prepare file", then its download. `key` prefixes the widgets' keys (several pickers on a page)."""
    from workstation.exports import export_runs, exporters
    available = exporters()
    if not available:
        st.info("No exporter is installed.")
        return
    fmt = st.selectbox("Format", list(available), key=f"{key}_format",
                       format_func=lambda n: available[n].title or n)
    exporter = available[fmt]
    if st.button("Prepare file", key=f"{key}_prepare"):
        ids = "-".join(map(str, run_ids[:5])) + ("-etc" if len(run_ids) > 5 else "")
        path = _export_dir() / f"runs-{ids}-{fmt}{exporter.suffix}"
        try:
            with st.spinner("Exporting…"):
                report = export_runs(store, list(run_ids), fmt, path)
            st.session_state[f"{key}_file"] = (fmt, tuple(run_ids), str(path), report.message())
        except Exception as e:          # an exporter failing must not take the history page down
            st.error(f"Export failed: {type(e).__name__}: {render.md_text(e)}")
    prepared = st.session_state.get(f"{key}_file")
    if prepared and prepared[:2] == (fmt, tuple(run_ids)) and Path(prepared[2]).exists():
        path = Path(prepared[2])
        st.caption(render.md_text(prepared[3]))
        st.download_button(f"Download {path.name}", data=path.read_bytes(), file_name=path.name,
                           mime=exporter.mime, key=f"{key}_download", type="primary", on_click="ignore")
