"""The routers are module-level and shared by every app in the process: each app's routes must answer from
that app's own ApiState (app.state.api), never from another app built before it."""
from workstation.settings import ApiSettings, Settings


def test_two_apps_in_one_process_each_answer_from_their_own_state(make_client, tmp_path):
    other = Settings(database=str(tmp_path / "other.db"), demo_weights_dir=str(tmp_path / "demo"))
    other.api = ApiSettings(models=["seqgpt"])
    first, second = make_client(), make_client(other)
    assert first.get("/health").json()["models"] == ["rexuninlu"]
    assert second.get("/health").json()["models"] == ["seqgpt"]


def test_every_route_is_served_by_a_router_of_workstation_api_routes():
    from workstation.api import app, routes
    served = {route.path for router in app.ROUTERS for route in router.routes}
    assert {"/health", "/v1/extract", "/v1/jobs", "/v1/runs/{run_id}/export", "/ls/predict"} <= served
    assert all(router.routes[0].endpoint.__module__.startswith(routes.__name__ + ".") for router in app.ROUTERS)
