"""GET /v1/runs/{id}/export?format=NAME: a recorded run in any registered export format, a plugin's too.

Each exporter declares its file's suffix and media type (contracts/exporter.py), which become the download's
name and Content-Type. A name nobody registered is a 404 whose message lists the available ones (they change
with the installed plugins, so the OpenAPI schema gives a string, not a fixed list)."""
from __future__ import annotations

import re

from fastapi import APIRouter, Query
from fastapi.responses import Response

from workstation.api.errors import ApiError
from workstation.api.routes import RowId, State
from workstation.exports import export_bytes, exporters

router = APIRouter()
ALIASES = {"xlsx": "excel"}            # the API's name for the Excel format since its first version


@router.get("/v1/runs/{run_id}/export", tags=["history"], response_class=Response)
def export(run_id: RowId, state: State,
           format: str = Query("jsonl", min_length=1, max_length=100,
                               description="an export format's name: jsonl, csv, xlsx, parquet, label-studio, "
                                           "doccano, or one a plugin registered (`launcher.py plugins`)")):
    name = ALIASES.get(format, format)
    available = exporters()
    if name not in available:
        raise ApiError(404, "unknown_format", f"unknown export format {format!r}; available: {', '.join(available)}")
    state.store.run_header(run_id)            # a run not in the history is a 404 before anything is written
    data, file_name, _ = export_bytes(state.store, [run_id], name)
    # A header is Latin-1: a plugin's suffix outside plain file-name characters must not break the answer.
    file_name = re.sub(r"[^A-Za-z0-9._-]", "_", file_name)
    return Response(data, media_type=available[name].mime,
                    headers={"Content-Disposition": f'attachment; filename="{file_name}"'})
