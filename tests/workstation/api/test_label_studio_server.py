"""The Label Studio ML-backend protocol against the REAL Label Studio server (the `label-studio` package).

Label Studio lives in its own virtualenv (.venv-labelstudio/, made by `python3 launcher.py test`, or here on
first use: launcher.install_label_studio, stamped and idempotent) with a database migrated once at install.
The test copies that database to a temp dir, starts Label Studio on loopback with a user and token made
on the command line, starts our API on another free port, creates a NER project, connects our /ls
backend, asks Label Studio to retrieve predictions, and checks what Label Studio stored.
"""
import os
import shutil
import signal
import subprocess
import time

import httpx
import pytest

import launcher
from tests.workstation.api.conftest import free_port

NER_CONFIG = """<View>
  <Labels name="label" toName="text">
    <Label value="人物"/><Label value="地理位置"/><Label value="组织机构"/><Label value="正向"/><Label value="负向"/>
  </Labels>
  <Text name="text" value="$text"/>
</View>"""
TEXTS = ["[CLASSIFY]很好看", "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "张三在北京大学读书"]
# Only these mean the machine cannot install Label Studio at all (no package index, no wheel for this Python);
# any other failure of the set-up is a failure of this test.
UNINSTALLABLE = ("Network is unreachable", "Temporary failure in name resolution", "Name or service not known",
                 "Failed to establish a new connection", "Could not find a version that satisfies the requirement "
                 "label-studio", "No matching distribution found for label-studio")
TOKEN = "iew-test-token-0123456789"


def wait_until_up(url: str, process: subprocess.Popen | None, log, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if process is not None and process.poll() is not None:
            pytest.fail(f"Label Studio exited with {process.returncode}:\n{tail(log)}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {timeout:.0f}s:\n{tail(log)}")


def tail(log) -> str:
    if log is None:
        return ""
    log.flush()
    return open(log.name, encoding="utf-8", errors="replace").read()[-3000:]


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    reason = launcher.install_label_studio()
    if reason:
        if any(marker in reason for marker in UNINSTALLABLE):
            pytest.skip(f"LABEL STUDIO CANNOT BE INSTALLED ON THIS MACHINE, its protocol test did NOT run: {reason}")
        pytest.fail(f"setting up Label Studio failed: {reason}")
    data = tmp_path_factory.mktemp("label-studio") / "data"
    shutil.copytree(launcher.LABEL_STUDIO_TEMPLATE, data)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABEL_STUDIO_", "DJANGO"))}
    # Our backend is on loopback: Label Studio's guard against server-side request forgery would refuse it.
    env.update(LABEL_STUDIO_BASE_DATA_DIR=str(data), ML_BLOCK_LOCAL_IP="false", SSRF_PROTECTION_ENABLED="false",
               LOG_LEVEL="WARNING")
    log = open(data.parent / "label-studio.log", "w+", encoding="utf-8")
    command = [str(launcher.LABEL_STUDIO_VENV / "bin" / "label-studio"), "start", "--no-browser",
               "--data-dir", str(data), "--port", str(port), "--internal-host", "127.0.0.1",
               "--username", "test@example.com", "--password", "iew-test-password", "--user-token", TOKEN,
               "--enable-legacy-api-token"]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(f"{url}/health", process, log, timeout=150)
        yield url, log
    finally:
        os.killpg(process.pid, signal.SIGTERM)          # the session this test started, and only that
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()


def test_label_studio_gets_predictions_from_our_ml_backend(label_studio, live_api):
    backend = live_api
    ls_url, log = label_studio
    ls = httpx.Client(base_url=ls_url, headers={"Authorization": f"Token {TOKEN}"}, timeout=60)
    project = ls.post("/api/projects", json={"title": "IE Workstation backend", "label_config": NER_CONFIG})
    assert project.status_code == 201, project.text
    pid = project.json()["id"]
    imported = ls.post(f"/api/projects/{pid}/import", json=[{"text": t} for t in TEXTS])
    assert imported.status_code == 201, imported.text

    connected = ls.post("/api/ml", json={"url": f"{backend}/ls", "project": pid, "title": "IE Workstation"})
    assert connected.status_code == 201, connected.text
    assert connected.json()["readable_state"] == "Connected", connected.json()      # /health and /setup answered
    assert connected.json()["model_version"].startswith("rexuninlu")

    done = ls.post("/api/dm/actions", params={"id": "retrieve_tasks_predictions", "project": pid},
                   json={"selectedItems": {"all": True, "excluded": []}})
    assert done.status_code == 200, done.text + tail(log)
    predictions = ls.get("/api/predictions", params={"project": pid}).json()
    assert len(predictions) == len(TEXTS), tail(log)
    tasks = {t["id"]: t["data"]["text"] for t in ls.get(f"/api/projects/{pid}/tasks", params={"page_size": 100}).json()}

    # What Label Studio stored is what /v1/extract finds with the schema the label config maps to.
    schema = {label: None for label in ("人物", "地理位置", "组织机构", "正向", "负向")}
    with httpx.Client(base_url=backend, timeout=120) as api:
        direct = api.post("/v1/extract", json={"model": "rexuninlu", "optimizations": [],
                                                "documents": [{"id": t, "text": t, "schema": schema} for t in TEXTS]})
    expected = {line["id"]: {(s["type"], *s["offset"]) for t in line["output"] for s in t}
                for line in direct.json()["results"]}
    regions_seen = 0
    for prediction in predictions:
        text = tasks[prediction["task"]]
        regions = [r for r in prediction["result"] if r["type"] == "labels"]
        got = {(r["value"]["labels"][0], r["value"]["start"], r["value"]["end"]) for r in regions}
        assert got == expected[text]
        for r in regions:
            assert r["value"]["text"] == text[r["value"]["start"]:r["value"]["end"]]
            assert r["from_name"] == "label" and r["to_name"] == "text"
        regions_seen += len(regions)
        assert prediction["model_version"].startswith("rexuninlu")
    assert regions_seen > 0                 # the [CLASSIFY] task always yields a region
