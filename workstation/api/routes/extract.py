"""POST /v1/extract: documents run now, through the model's micro-batching lane, and recorded in History
before the answer goes out. `checked` and `wait_for` serve the jobs and Label Studio routes too."""
from __future__ import annotations

import asyncio

import orjson
from fastapi import APIRouter, Response

from workstation.api.errors import ApiError
from workstation.api.routes import State, in_thread
from workstation.api.schemas import ExtractRequest
from workstation.api.state import ApiState
from workstation.engine import Cancelled

router = APIRouter()
INLINE_DOCUMENTS = 16           # up to this many documents a request is checked on the event loop


@router.post("/v1/extract", tags=["extract"])
async def extract(body: ExtractRequest, state: State):
    """Run documents now; the response has the same result lines as `launcher.py extract`."""
    if len(body.documents) > state.settings.api.max_documents:
        raise ApiError(413, "too_many_documents", f"{len(body.documents)} documents; at most "
                       f"{state.settings.api.max_documents} per request ([api] max_documents): use /v1/jobs")
    if len(body.documents) <= INLINE_DOCUMENTS:
        config, documents = checked(state, body)      # a few documents: cheaper here than a hop to a thread
    else:
        config, documents = await in_thread(checked, state, body)      # a big body must not stall the loop
    request = state.submit(config, documents)
    try:
        extraction = await wait_for(request, state.settings.api.timeout_s)
    except Cancelled:
        raise ApiError(409, "cancelled", "the run was cancelled") from None
    report = extraction.report
    run_id = await asyncio.wrap_future(extraction.recorded)          # in History before the answer goes out
    # The result lines as the CLI writes them, put in whole (orjson.Fragment): FastAPI's encoding of the same dicts
    # cost a one-document request more than its share of the model's pass on a GPU.
    return Response(orjson.dumps({
        "run_id": run_id, "model": report.model, "device": report.device, "dtype": report.dtype, "demo": report.demo,
        "optimizations": report.optimizations, "shared_pass": extraction.shared_with,
        "wall_seconds": report.wall_seconds, "results": [orjson.Fragment(r.to_json_line()) for r in report.results]}),
        media_type="application/json")


def checked(state: ApiState, body: ExtractRequest, job: bool = False):
    """The request's settings and documents; a job's documents are checked now, before anything is queued
    (an extraction's are checked by engine.run, in its pass)."""
    config = state.config(body.model, body.device, body.dtype, body.optimizations, body.options, body.batch_size)
    return config, state.documents(body.model, body.document_dicts(), check=job)


async def wait_for(request, timeout_s: float):
    """The submitted request's outcome, or a 504 after `timeout_s` (the request is then abandoned: skipped
    if its pass has not started)."""
    try:
        outcome = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(request.future)), timeout_s)
    except asyncio.TimeoutError:
        request.abandon()
        raise ApiError(504, "timeout", f"no result within {timeout_s:g}s ([api] timeout_s); the server is busy: "
                                       "retry later, or send the documents as a job") from None
    return outcome
