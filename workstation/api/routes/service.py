"""What the server serves: health, the models and their settings, which optimizations apply, the GPUs."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from contracts.domain import InputError, WeightsError
from workstation import plugins
from workstation.api.routes import State

router = APIRouter()


@router.get("/health", tags=["service"])
def health(state: State):
    return {"status": "ok", "models": list(state.families()), "loaded": state.loaded()}


@router.get("/v1/models", tags=["models"])
def models(state: State):
    loaded = state.loaded()
    out = []
    for name, fam in state.families().items():
        weights, demo = state.settings.weights_for(name, fam.needs_weights)
        ms = state.settings.model(name)
        out.append({"name": name, "title": fam.title, "reads": str(fam.reads), "weights": str(weights),
                    "demo": demo or (weights.exists() and fam.is_demo(weights)),
                    "tasks": [{"name": t.name, "title": t.title, "example": t.text, "schema": t.schema,
                               "description": t.description} for t in fam.tasks.values()],
                    "options": dict(fam.options), "device": ms.device, "dtype": ms.dtype,
                    "batch_size": ms.batch_size, "loaded_devices": loaded.get(name, [])})
    return {"models": out}


@router.get("/v1/optimizations", tags=["models"])
def optimizations(state: State):
    """Each optimization and, per served model, whether it applies (this loads the model if needed)."""
    registry = plugins.optimizations()
    verdicts: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in registry}
    for name in state.families():
        try:
            # The model as loaded now (whatever its settings), else as settings.toml has it.
            key = next((k for k in state.shelf.loaded() if k[0] == name), None) or \
                state.shelf_key(state.config(name, None, None, [], {}, None))
            with state.shelf.borrow(key) as model:
                for opt_name, opt in registry.items():
                    ok, reason = opt.applies_to(model)
                    verdicts[opt_name][name] = {"applies": ok, "reason": reason}
        except (InputError, WeightsError, RuntimeError) as e:
            for opt_name in registry:
                verdicts[opt_name][name] = {"applies": None, "reason": f"the model could not be loaded: {e}"}
    return {"optimizations": [{"name": n, "title": o.title, "description": o.description, "switch": o.switch,
                               "lossless": o.lossless, "models": verdicts[n]} for n, o in registry.items()]}


@router.get("/v1/gpus", tags=["service"])
def gpus(state: State):
    recorder = state.gpus
    snapshot = recorder.latest() if recorder else None
    if recorder is not None and snapshot is None and recorder.available:
        snapshot = recorder.record_once()
    return {"available": bool(recorder and recorder.available),
            "time": snapshot.time if snapshot else None,
            "gpus": [asdict(g) for g in snapshot.gpus] if snapshot else []}
