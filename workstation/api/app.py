"""The HTTP API (FastAPI): `create_app(settings)` builds it; `launcher.py serve` runs it under uvicorn
(workstation/api/server.py). docs/api.md describes every route.

The app is assembled here from its parts: the Guard middleware (token, origin, body limit: guard.py), the
error handlers that give every failure one JSON shape (errors.py), and one router per part of the API
(routes/), all over one ApiState kept on `app.state.api`.
"""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.security import HTTPBearer

from workstation.api.errors import install_handlers
from workstation.api.guard import Guard
from workstation.api.routes import export, extract, jobs, label_studio, runs, service
from workstation.api.state import ApiState
from workstation.settings import Settings

ROUTERS = (service.router, extract.router, jobs.router, runs.router, export.router, label_studio.router)


def create_app(settings: Settings, state: ApiState | None = None, **state_args) -> FastAPI:
    state = state or ApiState(settings, **state_args)

    @asynccontextmanager
    async def lifespan(app):
        state.start()
        yield
        state.stop()

    app = FastAPI(title="IE Workstation API", version="1", lifespan=lifespan,
                  description="Zero-shot information extraction with RexUniNLU and SeqGPT; runs and jobs are "
                              "shared with the workstation UI. Errors: {\"error\": {\"code\", \"message\", \"line\"?}}.",
                  dependencies=[Depends(HTTPBearer(auto_error=False))])   # documents the token; Guard checks it
    app.state.api = state                         # what routes.State hands each route
    install_handlers(app)
    app.add_middleware(Guard, max_body=settings.api.max_body_bytes, token=settings.api.token,
                       cors_origins=tuple(settings.api.cors_origins))
    if settings.api.cors_origins:                 # outermost, so a 401, 403 or 413 reaches the browser's script too
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.api.cors_origins),
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "X-IEW-Request"])
    for router in ROUTERS:
        app.include_router(router)
    return app
