"""Label Studio's ML-backend protocol under /ls: health, project setup, predictions (entities, and relations
when the labeling config has them) and the webhook. The labeling config is read by workstation.api.label_studio;
the model is `[api] label_studio_model` (ApiState.label_studio_model, checked when the API starts)."""
from __future__ import annotations

from fastapi import APIRouter

from workstation import plugins
from workstation.api import label_studio
from workstation.api.errors import ApiError
from workstation.api.routes import State
from workstation.api.routes.extract import wait_for
from workstation.api.schemas import PredictRequest, SetupRequest, WebhookRequest
from workstation.api.state import ApiState

router = APIRouter(tags=["label-studio"])


def _version(state: ApiState) -> str:
    name = state.label_studio_model
    if name is None:
        return "none (no installed model reads a schema)"
    weights, demo = state.settings.weights_for(name, plugins.model_families()[name].needs_weights)
    return f"{name}:{weights.name}{' (random demo weights)' if demo else ''}"


@router.get("/ls")
@router.get("/ls/health")
def ls_health(state: State):
    return {"status": "UP", "model_class": f"IE Workstation {state.label_studio_model or ''}".strip(),
            "model_version": _version(state)}


@router.post("/ls/setup")
def ls_setup(body: SetupRequest, state: State):
    config = label_studio.parse_label_config(body.schema_ or "")
    if body.project is not None:
        state.label_studio_projects[str(body.project).split(".")[0]] = config
    return {"model_version": _version(state)}


@router.post("/ls/predict")
async def ls_predict(body: PredictRequest, state: State):
    model = state.label_studio_model
    if model is None:
        raise ApiError(409, "model_not_served", "no installed model reads a schema, which the Label Studio backend "
                                                "sends; install one and set [api] label_studio_model")
    if model not in state.families():
        raise ApiError(409, "model_not_served", f"the Label Studio backend runs {model} ([api] label_studio_model); "
                                                "add it to [api] models")
    project = str(body.project).split(".")[0] if body.project is not None else None
    if body.label_config:
        config = label_studio.parse_label_config(body.label_config)
    elif project in state.label_studio_projects:
        config = state.label_studio_projects[project]
    else:
        raise ApiError(400, "no_label_config", "send label_config, or connect the project (POST /ls/setup) first")
    if not body.tasks:
        return {"results": [], "model_version": _version(state)}
    texts = [label_studio.task_text(t, config) for t in body.tasks]
    items = [{"id": f"task-{t.get('id', i)}-entities", "text": text, "schema": config.ner_schema()}
             for i, (t, text) in enumerate(zip(body.tasks, texts), start=1)]
    relation_schema = config.relation_schema()
    if relation_schema:
        items += [{"id": f"task-{t.get('id', i)}-relations", "text": text, "schema": relation_schema}
                  for i, (t, text) in enumerate(zip(body.tasks, texts), start=1)]
    documents = state.documents(model, items)
    run_config = state.config(model, None, None, None, {}, None)
    extraction = await wait_for(state.submit(run_config, documents), state.settings.api.timeout_s)
    results = extraction.report.results
    n = len(texts)
    version = _version(state)
    return {"results": [label_studio.prediction(config, text, results[i], results[n + i] if relation_schema else None,
                                                version) for i, text in enumerate(texts)],
            "model_version": version}


@router.post("/ls/webhook")
def ls_webhook(body: WebhookRequest):
    """Label Studio's events (training starts, project changes): acknowledged; this backend does not train
    from Label Studio (fine-tune with `launcher.py finetune` on an export instead)."""
    return {"status": "ok", "action": body.action[:128]}
