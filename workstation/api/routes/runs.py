"""/v1/runs: the history shared with the UI — search, one run with its documents and results (its export is
routes/export.py)."""
from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Query

from workstation.api.routes import RowId, State, plain
from workstation.api.schemas import Source

router = APIRouter()


@router.get("/v1/runs", tags=["history"])
def runs(state: State, q: str | None = Query(None, max_length=1000), model: str | None = Query(None, max_length=128),
         task: str | None = Query(None, max_length=128), source: Source | None = None,
         limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=10**9)):
    q = (q or "").replace("\x00", " ")
    found = state.store.search_runs(q, model, task, limit=limit, offset=offset, source=source)
    return {"total": state.store.count_runs(q, model, task, source=source),
            "runs": [plain(asdict(r)) for r in found]}


@router.get("/v1/runs/{run_id}", tags=["history"])
def run(run_id: RowId, state: State):
    detail = state.store.get_run(run_id)
    return {**plain(asdict(detail.summary)), "settings": detail.settings,
            "items": [{"document": {"id": d.id, "text": d.text, "schema": d.schema, "task": d.task,
                                    "labels": d.labels}, "result": r.to_json()} for d, r in detail.items]}

