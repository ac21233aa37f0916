"""An API app over a tiny RexUniNLU checkpoint, a temp history database and a fake GPU monitor."""
import socket
import threading
import time

import pytest

from tests.fake_monitor import FakeMonitor
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def live_api(api_settings):
    """The API on a free loopback port, under uvicorn in a thread (real HTTP); yields its base URL."""
    import uvicorn

    from workstation.api.app import create_app
    app = create_app(api_settings, monitor_factory=lambda: FakeMonitor.steady(gpus=1))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    end = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < end, "the API server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{server.config.port}"
    server.should_exit = True
    thread.join(30)
    app.state.api.jobs.wait(timeout=60)           # jobs a test queued finish before the temp database goes
    app.state.api.store.close()
