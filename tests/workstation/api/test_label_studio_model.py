"""The Label Studio backend runs the model `[api] label_studio_model` names, checked against the installed
families when the API starts; "" (the default) is the first installed model that reads a schema."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from contracts.domain import InputError
from tests.fake_monitor import FakeMonitor
from tests.registered import plugin_registered
from tests.workstation.ui.fake_plugin import FakeFamily, FakeLabelsFamily, FakePlugin
from workstation import plugins
from workstation.api.app import create_app
from workstation.api.label_studio import backend_model
from workstation.settings import ApiSettings, ModelSettings, Settings

LS_CONFIG = """<View>
  <Labels name="label" toName="text"><Label value="Alice"/><Label value="Bob"/></Labels>
  <Text name="text" value="$text"/>
</View>"""


@pytest.fixture
def fake_settings(tmp_path):
    """The fake models registered for one test, served by an API whose settings the test completes."""
    with plugin_registered(FakePlugin(), "ls-model-fake") as plugin:
        weights = plugin.family.write_demo_weights(tmp_path / "weights")
        s = Settings(database=str(tmp_path / "runs.db"), demo_weights_dir=str(tmp_path / "demo"))
        s.models["fakeie"] = ModelSettings(weights=str(weights), device="cpu", batch_size=4)
        yield s


def test_the_backend_runs_the_model_the_setting_names(fake_settings):
    fake_settings.api = ApiSettings(models=["fakeie"], label_studio_model="fakeie", batch_wait_ms=5.0)
    with TestClient(create_app(fake_settings, monitor_factory=lambda: FakeMonitor.steady(gpus=1))) as client:
        try:
            assert client.get("/ls/health").json()["model_version"].startswith("fakeie:")
            got = client.post("/ls/predict", json={"tasks": [{"id": 1, "data": {"text": "Alice met Bob"}}],
                                                   "label_config": LS_CONFIG})
            assert got.status_code == 200, got.text
            regions = got.json()["results"][0]["result"]
            # The fake model finds each type's name in the text: RexUniNLU would not be this exact.
            assert {(r["value"]["labels"][0], r["value"]["start"], r["value"]["end"]) for r in regions} == {
                ("Alice", 0, 5), ("Bob", 10, 13)}
        finally:
            client.app.state.api.store.close()


@pytest.mark.parametrize("name, words", [
    ("nosuch", "[api] label_studio_model = 'nosuch' is not an installed model; installed: "),
    ("fakegen", "[api] label_studio_model = 'fakegen' reads \"task\" and \"labels\""),
])
def test_a_setting_naming_no_usable_model_stops_the_api_naming_it(fake_settings, name, words):
    fake_settings.api = ApiSettings(models=["fakeie"], label_studio_model=name)
    with pytest.raises(InputError) as refused:
        create_app(fake_settings, monitor_factory=lambda: FakeMonitor.steady(gpus=1))
    assert words in str(refused.value) and "fakeie" in str(refused.value)


def test_by_default_the_backend_runs_the_first_installed_model_that_reads_a_schema():
    labels, schema = FakeLabelsFamily(), FakeFamily()
    assert backend_model("", {"fakegen": labels, "fakeie": schema}) == "fakeie"
    assert backend_model("", {"fakegen": labels}) is None
    assert backend_model("", plugins.model_families()) == "rexuninlu"          # the built-ins: today's backend


def test_a_model_not_served_is_a_409_naming_the_setting(fake_settings):
    fake_settings.api = ApiSettings(models=["fakegen"], label_studio_model="fakeie")
    with TestClient(create_app(fake_settings, monitor_factory=lambda: FakeMonitor.steady(gpus=1))) as client:
        try:
            got = client.post("/ls/predict", json={"tasks": [{"id": 1, "data": {"text": "Alice"}}],
                                                   "label_config": LS_CONFIG})
            assert got.status_code == 409 and "[api] label_studio_model" in got.json()["error"]["message"]
        finally:
            client.app.state.api.store.close()
