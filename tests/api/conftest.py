"""An API app over a tiny RexUniNLU checkpoint, a temp history database and a fake GPU monitor."""
import pytest

from workstation.monitor import FakeMonitor
from workstation.settings import ApiSettings, ModelSettings, Settings


@pytest.fixture
def api_settings(tmp_path, rex_tiny) -> Settings:
    s = Settings(database=str(tmp_path / "runs.db"), demo_weights_dir=str(tmp_path / "demo"))
    s.models["rexuninlu"] = ModelSettings(weights=str(rex_tiny), device="cpu", batch_size=4)
    s.api = ApiSettings(models=["rexuninlu"], max_body_bytes=256 * 1024, batch_wait_ms=20.0)
    return s


@pytest.fixture
def make_client(api_settings):
    from fastapi.testclient import TestClient
    from workstation.api.app import create_app
    clients = []

    def make(settings=None, **kwargs):
        app = create_app(settings or api_settings, monitor_factory=lambda: FakeMonitor.steady(gpus=1), **kwargs)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()                      # runs the lifespan: GPU recorder, job runner
        clients.append(client)
        return client
    yield make
    for c in clients:
        c.__exit__(None, None, None)
        c.app.state.api.store.close()


@pytest.fixture
def client(make_client):
    return make_client()
