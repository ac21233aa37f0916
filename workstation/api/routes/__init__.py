"""The API's routes, one APIRouter per part: service (health, models, optimizations, GPUs), extract, jobs,
runs (the history), export (a run in any registered format) and label_studio (the ML-backend protocol under /ls). `workstation.api.app` includes them.

A route reaches the shared ApiState through the `State` dependency (the app keeps it on `app.state.api`),
so a router holds no state of its own and an app can be built over any ApiState (tests build several)."""
from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any, Callable

from fastapi import Depends, Request
from fastapi import Path as PathParam

from workstation.api.state import ApiState

MAX_ID = 2**63 - 1                                      # SQLite INTEGER: larger ids cannot exist


async def api_state(request: Request) -> ApiState:
    # async: a plain function would cost every request a hop to the thread pool for one attribute read
    return request.app.state.api


State = Annotated[ApiState, Depends(api_state)]
RowId = Annotated[int, PathParam(ge=1, le=MAX_ID)]      # a run's or a job's id in the path


def in_thread(fn: Callable, *args):
    """`fn(*args)` on the default executor, so parsing a big body or a file does not stall the event loop."""
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


def plain(d: dict[str, Any]) -> dict[str, Any]:
    """A record's fields as JSON values (datetimes in ISO form)."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in d.items()}
