"""Every endpoint of the HTTP API in-process (FastAPI's TestClient), bad bodies, auth, CORS, the lanes."""
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from contracts.domain import Document
from workstation.api.lanes import Lane, LaneRequest, Lanes, QueueFull, RunConfig
from workstation.cli import main as cli_main

NER = {"人物": None, "地理位置": None, "组织机构": None}
CLS = {"正向": None, "负向": None}
# The tiny random checkpoint finds little; a [CLASSIFY] text always yields its label span, so outputs are not empty.
FORM = {"X-IEW-Request": "1"}          # what our client sends with an upload; a form on another page cannot
TEXTS = ["北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "[CLASSIFY]很好看", "张三在北京大学读书", "李四去上海", "王五"]


def schema_for(text):
    return CLS if text.startswith("[CLASSIFY]") else NER


def body(texts=TEXTS, **extra):
    return {"model": "rexuninlu", "documents": [{"id": f"d{i}", "text": t, **({"schema": CLS} if t.startswith(
        "[CLASSIFY]") else {})} for i, t in enumerate(texts)], "schema": NER, "optimizations": [], **extra}


def wait_for(condition, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def assert_error(response, status, code=None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    if code:
        assert error["code"] == code
    return error


# ---- service and models --------------------------------------------------------------------------------

def test_health_models_and_optimizations(client):
    assert client.get("/health").json()["status"] == "ok"
    models = client.get("/v1/models").json()["models"]
    assert [m["name"] for m in models] == ["rexuninlu"]
    rex = models[0]
    assert rex["demo"] is True and "ner" in [t["name"] for t in rex["tasks"]] and rex["options"] == {}
    opts = client.get("/v1/optimizations").json()["optimizations"]
    by_name = {o["name"]: o for o in opts}
    assert {"precision", "sparse-mask"} <= set(by_name) or len(by_name) >= 3
    for o in opts:
        verdict = o["models"]["rexuninlu"]
        assert isinstance(verdict["applies"], bool) and isinstance(verdict["reason"], str)
    assert by_name["precision"]["models"]["rexuninlu"]["applies"] is False      # CPU: no reduced precision
    assert client.get("/v1/models").json()["models"][0]["loaded_devices"] == ["cpu"]


def test_gpus_is_the_monitors_latest_snapshot(client):
    got = client.get("/v1/gpus").json()
    assert got["available"] is True and got["gpus"][0]["name"] == "Fake GPU 0"
    assert got["gpus"][0]["memory_total"] == 24 << 30


def test_openapi_docs_are_served(client):
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/extract", "/v1/jobs", "/v1/jobs/{job_id}/results", "/v1/runs/{run_id}/export", "/ls/predict"):
        assert path in paths


# ---- extract and history ---------------------------------------------------------------------------------

def test_extract_gives_the_cli_result_lines_and_the_run_is_in_history(client, tmp_path, rex_tiny):
    got = client.post("/v1/extract", json=body())
    assert got.status_code == 200, got.text
    answer = got.json()
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"d{i}", "text": t, "schema": schema_for(t)}, ensure_ascii=False) + "\n"
                           for i, t in enumerate(TEXTS)), "utf-8")
    out = tmp_path / "out.jsonl"
    assert cli_main(["extract", "--model", "rexuninlu", "--weights", str(rex_tiny), "--input", str(inp),
                     "--output", str(out), "--device", "cpu", "--optimizations", "none", "--no-record"]) == 0
    cli_lines = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    assert answer["results"] == cli_lines
    assert any(r["output"] for r in cli_lines)          # the comparison is not between empty outputs

    run = client.get(f"/v1/runs/{answer['run_id']}")
    assert run.status_code == 200, run.text
    run = run.json()
    assert run["documents"] == len(TEXTS) and run["settings"]["surface"] == "api" and run["source"] == "api"
    assert answer["run_id"] in [r["id"] for r in client.get("/v1/runs", params={"source": "api"}).json()["runs"]]
    assert [item["result"] for item in run["items"]] == cli_lines
    found = client.get("/v1/runs", params={"q": "巴塞罗那"}).json()
    assert found["total"] == 1 and found["runs"][0]["id"] == answer["run_id"]
    assert client.get("/v1/runs", params={"q": "不在任何文档里"}).json()["total"] == 0


@pytest.mark.parametrize("fmt, marker", [("jsonl", b'"output"'), ("csv", b"doc_id"), ("xlsx", b"PK"),
                                         ("parquet", b"PAR1"), ("label-studio", b'"predictions"'),
                                         ("doccano", b'"entities"')])
def test_run_export_in_every_format(client, fmt, marker):
    run_id = client.post("/v1/extract", json=body(TEXTS[:2])).json()["run_id"]
    got = client.get(f"/v1/runs/{run_id}/export", params={"format": fmt})
    assert got.status_code == 200 and marker in got.content
    assert "attachment" in got.headers["content-disposition"]


def test_concurrent_requests_share_passes_and_each_gets_its_own_results(make_client, api_settings):
    client = make_client()
    solo = {t: client.post("/v1/extract", json=body([t])).json()["results"][0]["output"] for t in TEXTS}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: client.post("/v1/extract", json=body([TEXTS[i % 5]])), range(16)))
    assert all(a.status_code == 200 for a in answers)
    for i, a in enumerate(answers):
        assert a.json()["results"][0]["output"] == solo[TEXTS[i % 5]]
    assert max(a.json()["shared_pass"] for a in answers) > 1   # some requests shared a forward pass
    assert len({a.json()["run_id"] for a in answers}) == 16  # still one run per request in the history


# ---- jobs ----------------------------------------------------------------------------------------------

def test_job_from_json_runs_in_the_background_and_streams_results(client):
    direct = client.post("/v1/extract", json=body()).json()["results"]
    job = client.post("/v1/jobs", json=body())
    assert job.status_code == 202, job.text
    job_id = job.json()["job_id"]
    wait_for(lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] == "done")
    state = client.get(f"/v1/jobs/{job_id}").json()
    assert state["done"] == state["total"] == len(TEXTS) and state["run_id"]
    lines = client.get(f"/v1/jobs/{job_id}/results")
    assert lines.headers["content-type"].startswith("application/x-ndjson")
    assert [json.loads(line) for line in lines.text.splitlines()] == direct
    assert client.get(f"/v1/runs/{state['run_id']}").json()["source"] == "batch"     # the UI's batch run
    assert assert_error(client.delete(f"/v1/jobs/{job_id}"), 409, "job_finished")
    assert job_id in [j["id"] for j in client.get("/v1/jobs").json()["jobs"]]


def test_job_from_a_csv_upload_and_cancel(client):
    csv = "id,text\n" + "".join(f"c{i},张三在北京{i}\n" for i in range(40))
    job = client.post("/v1/jobs", files={"file": ("docs.csv", csv.encode(), "text/csv")},
                      data={"model": "rexuninlu", "schema": json.dumps(NER), "optimizations": "none"}, headers=FORM)
    assert job.status_code == 202, job.text
    job_id = job.json()["job_id"]
    assert job.json()["documents"] == 40
    cancelled = client.delete(f"/v1/jobs/{job_id}")
    if cancelled.status_code == 200:                       # it may have finished first on a fast machine
        wait_for(lambda: not client.app.state.api.jobs.is_busy(job_id))
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
    else:
        assert_error(cancelled, 409)
    bad = client.post("/v1/jobs", files={"file": ("docs.pdf", b"%PDF", "application/pdf")}, data={"model": "rexuninlu"},
                      headers=FORM)
    assert_error(bad, 400, "invalid_upload")
    bad = client.post("/v1/jobs", files={"file": ("docs.txt", b"x\n", "text/plain")},
                      data={"model": "rexuninlu", "schema": "{not json"}, headers=FORM)
    assert_error(bad, 400)


def test_unknown_ids_are_404(client):
    for path in ("/v1/jobs/999", "/v1/jobs/999/results", "/v1/runs/999", "/v1/runs/999/export"):
        assert_error(client.get(path), 404, "not_found")
    assert_error(client.delete("/v1/jobs/999"), 404)
    for path in (f"/v1/runs/{2**70}", f"/v1/jobs/{2**70}/results", "/v1/runs/0", "/v1/jobs/-1"):
        assert_error(client.get(path), 422)                 # beyond SQLite's integers: not a 500
    assert_error(client.get("/no/such/route"), 404)


# ---- bad input: always 4xx, a JSON error, nothing echoed raw -------------------------------------------------

@pytest.mark.parametrize("payload, status", [
    ({"documents": [{"text": "x"}]}, 422),                                     # missing model
    ({"model": "rexuninlu"}, 422),                                             # missing documents
    ({"model": "rexuninlu", "documents": []}, 422),
    ({"model": "rexuninlu", "documents": "text"}, 422),                        # wrong types
    ({"model": 5, "documents": [{"text": "x"}]}, 422),
    ({"model": "rexuninlu", "documents": [{"text": 5, "schema": NER}]}, 422),
    ({"model": "rexuninlu", "documents": [{"text": "x", "schema": NER}], "batch_size": 0}, 422),
    ({"model": "rexuninlu", "documents": [{"text": "x", "schema": NER}], "dtype": "fp8"}, 422),
    ({"model": "rexuninlu", "documents": [{"text": "x", "schema": NER}], "surprise": 1}, 422),
    ({"model": "nope", "documents": [{"text": "x", "schema": NER}]}, 400),
    ({"model": "rexuninlu", "documents": [{"text": "x", "schema": NER}], "optimizations": ["warp"]}, 400),
    ({"model": "rexuninlu", "documents": [{"text": "x", "schema": NER}], "options": {"beams": 2}}, 400),
    ({"model": "rexuninlu", "documents": [{"text": "x", "schema": NER}], "device": "tpu"}, 400),
    ({"model": "rexuninlu", "documents": [{"text": "x", "schema": NER}], "device": "cuda:0"}, 400),
    ({"model": "rexuninlu", "documents": [{"text": "x", "schema": NER}], "dtype": "bf16"}, 400),
    (["not", "an", "object"], 422),
])
def test_bad_bodies_are_4xx_json_errors(client, payload, status):
    assert_error(client.post("/v1/extract", json=payload), status)


def test_a_bad_document_is_named_by_its_position(client):
    payload = {"model": "rexuninlu", "documents": [{"text": "好", "schema": NER}, {"text": "x", "schema": {}}]}
    error = assert_error(client.post("/v1/extract", json=payload), 400, "invalid_input")
    assert error["line"] == 2 and "schema" in error["message"]


def test_huge_invalid_utf8_and_deeply_nested_bodies(client, api_settings):
    huge = json.dumps(body(["字" * api_settings.api.max_body_bytes]))
    assert_error(client.post("/v1/extract", content=huge, headers={"content-type": "application/json"}), 413)
    bad_utf8 = b'{"model": "rexuninlu", "documents": [{"text": "\xff\xfe"}]}'
    assert 400 <= client.post("/v1/extract", content=bad_utf8,
                              headers={"content-type": "application/json"}).status_code < 500
    assert_error(client.post("/v1/jobs", content=bad_utf8, headers={"content-type": "application/json"}), 400)
    deep = '{"model": "rexuninlu", "documents": [{"text": "x", "schema": ' + '{"a": ' * 5000 + "null" + "}" * 5000 + "}]}"
    for path in ("/v1/extract", "/v1/jobs"):
        got = client.post(path, content=deep, headers={"content-type": "application/json"})
        assert 400 <= got.status_code < 500 and "error" in got.json()
    shallow_but_too_deep = {"a": None}
    for _ in range(40):
        shallow_but_too_deep = {"a": shallow_but_too_deep}
    assert_error(client.post("/v1/extract", json=body(["x"], schema=shallow_but_too_deep)), 422)
    assert_error(client.post("/v1/extract", content=b"{", headers={"content-type": "application/json"}), 422)


def test_errors_do_not_echo_input_values(client):
    got = client.post("/v1/extract", json={"model": "rexuninlu", "documents": [{"text": {"<script>": 1}}]})
    assert_error(got, 422)
    assert "<script>" not in got.text and got.headers["x-content-type-options"] == "nosniff"


def test_too_many_documents_is_413(make_client, api_settings):
    api_settings.api.max_documents = 3
    assert_error(make_client().post("/v1/extract", json=body()), 413, "too_many_documents")


# ---- queue, timeouts, lanes ------------------------------------------------------------------------------

def config(**kw):
    return RunConfig(**{"model": "m", "weights": "w", "device": "cpu", "dtype": None, "optimizations": (),
                        "options": (), "batch_size": 4, **kw})


def test_full_queue_is_429_with_retry_after(make_client):
    client = make_client()
    release, taken = threading.Event(), threading.Event()

    def stuck(config, requests):
        taken.set()
        release.wait(30)
        raise RuntimeError("never mind")
    state = client.app.state.api
    state.lanes = Lanes(stuck, queue_size=1, wait_s=0.0)
    try:
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(client.post, "/v1/extract", json=body(["a"]))   # taken by the worker, stuck
            assert taken.wait(30)
            second = pool.submit(client.post, "/v1/extract", json=body(["b"]))  # fills the queue
            wait_for(lambda: state.lanes.lanes()[("rexuninlu", "cpu")].waiting() == 1)
            third = client.post("/v1/extract", json=body(["c"]))
            assert_error(third, 429, "queue_full")
            assert third.headers["retry-after"] == "1"
            release.set()
            assert first.result().status_code == 500 and first.result().json()["error"]["message"].startswith("internal")
            second.result()
    finally:
        release.set()
        state.lanes.stop()


def test_a_request_past_its_timeout_is_504_and_is_not_run(make_client, api_settings):
    api_settings.api.timeout_s = 0.3
    client = make_client()
    release, ran = threading.Event(), []

    def slow(config, requests):
        ran.append([r.documents[0].text for r in requests])
        release.wait(10)
        return [None] * len(requests)
    state = client.app.state.api
    state.lanes = Lanes(slow, queue_size=4, wait_s=0.0)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, "/v1/extract", json=body(["a"]))
            wait_for(lambda: ran)
            assert_error(client.post("/v1/extract", json=body(["b"])), 504, "timeout")
            release.set()
            assert_error(first.result(), 504)
        time.sleep(0.3)
        assert ran == [["a"]]                                  # "b" was abandoned before its pass
    finally:
        release.set()
        state.lanes.stop()


def test_lane_groups_only_requests_with_equal_settings_and_isolates_a_failing_one():
    seen = []

    def execute(cfg, requests):
        seen.append((cfg.batch_size, [r.documents[0].text for r in requests]))
        if any(r.documents[0].text == "bad" for r in requests):
            raise ValueError("bad document")
        return [r.documents[0].text.upper() for r in requests]
    lane = Lane("t", execute, queue_size=16, wait_s=0.2, max_documents=64)
    try:
        reqs = [LaneRequest(config(batch_size=b), [Document("1", t)])
                for b, t in ((4, "a"), (8, "b"), (4, "c"), (4, "bad"))]
        for r in reqs:
            lane.submit(r)
        assert [r.future.result(5) for r in reqs[:3]] == ["A", "B", "C"]
        with pytest.raises(ValueError):
            reqs[3].future.result(5)
        assert (4, ["a", "c", "bad"]) in seen and (8, ["b"]) in seen
        assert (4, ["a"]) in seen and (4, ["bad"]) in seen       # the failed pass, retried one by one
    finally:
        lane.stop()


def test_queue_full_is_raised_at_submit():
    block, taken = threading.Event(), threading.Event()

    def stuck(c, rs):
        taken.set()
        return block.wait(5) and [None] * len(rs)
    lane = Lane("t", stuck, queue_size=1, wait_s=0.0, max_documents=1)
    try:
        lane.submit(LaneRequest(config(), [Document("1", "a")]))
        assert taken.wait(30)
        lane.submit(LaneRequest(config(), [Document("2", "b")]))
        with pytest.raises(QueueFull):
            lane.submit(LaneRequest(config(), [Document("3", "c")]))
    finally:
        block.set()
        lane.stop()


# ---- security -------------------------------------------------------------------------------------------

def test_token_is_required_when_set_and_health_stays_open(make_client, api_settings):
    api_settings.api.token = "s3cret"
    client = make_client()
    assert client.get("/health").status_code == 200
    assert_error(client.get("/v1/models"), 401, "unauthorized")
    assert_error(client.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
    assert client.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    import base64
    basic = base64.b64encode(b"labelstudio:s3cret").decode()
    assert client.post("/ls/webhook", json={"action": "X"}, headers={"Authorization": f"Basic {basic}"}).status_code == 200


def test_server_refuses_a_non_loopback_address_without_a_token(api_settings):
    from workstation.api.server import check_exposure
    check_exposure("127.0.0.1", "")
    check_exposure("localhost", "")
    check_exposure("::1", "")
    with pytest.raises(SystemExit, match="token"):
        check_exposure("0.0.0.0", "")
    with pytest.raises(SystemExit, match="token"):
        check_exposure("192.168.1.5", "")
    check_exposure("0.0.0.0", "a-token-of-16-chars")
    check_exposure("127.0.0.1", "short")                       # on loopback the token is the user's choice


@pytest.mark.parametrize("token", [" ", " " * 40, "x", "a-token", "tab\tseparated\t  ", "fifteen-chars-x"])
def test_server_refuses_a_non_loopback_address_with_a_weak_token(token):
    from workstation.api.server import check_exposure
    with pytest.raises(SystemExit, match="at least 16"):
        check_exposure("0.0.0.0", token)


def test_cors_is_off_unless_configured(make_client, api_settings):
    preflight = {"Origin": "http://example.test", "Access-Control-Request-Method": "POST"}
    assert "access-control-allow-origin" not in make_client().options("/v1/extract", headers=preflight).headers
    api_settings.api.cors_origins = ["http://example.test"]
    got = make_client().options("/v1/extract", headers=preflight)
    assert got.headers["access-control-allow-origin"] == "http://example.test"


# ---- Label Studio protocol, in-process -------------------------------------------------------------------

LS_NER = """<View>
  <Labels name="label" toName="text"><Label value="人物"/><Label value="地理位置"/><Label value="组织机构"/>
    <Label value="正向"/><Label value="负向"/></Labels>
  <Text name="text" value="$text"/>
</View>"""
LS_REL = """<View>
  <Relations><Relation value="位于(地理位置)"/></Relations>
  <Labels name="ner" toName="doc"><Label value="人物"/><Label value="地理位置"/><Label value="组织机构"/></Labels>
  <Text name="doc" value="$body"/>
</View>"""


def test_label_studio_setup_predict_webhook(client):
    assert client.get("/ls/health").json()["status"] == "UP"
    setup = client.post("/ls/setup", json={"project": "3.1700000000", "schema": LS_NER, "hostname": "x"})
    assert setup.status_code == 200 and setup.json()["model_version"].startswith("rexuninlu")
    tasks = [{"id": i, "data": {"text": t}} for i, t in enumerate(TEXTS[:3], start=1)]
    got = client.post("/ls/predict", json={"tasks": tasks, "project": "3.1700000000"})
    assert got.status_code == 200, got.text
    results = got.json()["results"]
    assert len(results) == 3
    ls_schema = {**NER, **CLS}                     # the config's labels, one NER schema
    direct = client.post("/v1/extract", json={**body(TEXTS[:3]), "documents": [
        {"text": t, "schema": ls_schema} for t in TEXTS[:3]]}).json()["results"]
    assert any(r["type"] == "labels" for p in results for r in p["result"])
    for task, prediction, line in zip(tasks, results, direct):
        regions = [r for r in prediction["result"] if r["type"] == "labels"]
        expected = {(s["type"], *s["offset"]) for t in line["output"] for s in t}
        assert {(r["value"]["labels"][0], r["value"]["start"], r["value"]["end"]) for r in regions} == expected
        for r in regions:
            assert r["from_name"] == "label" and r["to_name"] == "text"
            assert r["value"]["text"] == task["data"]["text"][r["value"]["start"]:r["value"]["end"]]
    assert client.post("/ls/webhook", json={"action": "PROJECT_UPDATED", "project": {"id": 3}}).json()["status"] == "ok"


def test_label_studio_relations_and_config_mapping(client):
    from contracts.domain import Result, Span
    from workstation.api import label_studio
    config = label_studio.parse_label_config(LS_REL)
    assert config.text_field == "body" and config.labels_name == "ner" and config.text_name == "doc"
    assert config.ner_schema() == {"人物": None, "地理位置": None, "组织机构": None}
    assert config.relation_schema()["组织机构"] == {"位于(地理位置)": None}
    text = "北京大学位于北京"
    entities = Result("1", [[Span("组织机构", "北京大学", (0, 4))]])
    relations = Result("1", [[Span("组织机构", "北京大学", (0, 4)), Span("位于(地理位置)", "北京", (6, 8))]])
    got = label_studio.prediction(config, text, entities, relations, "v")["result"]
    regions = {r["id"]: r for r in got if r["type"] == "labels"}
    link = [r for r in got if r["type"] == "relation"]
    assert len(regions) == 2 and len(link) == 1 and link[0]["labels"] == ["位于(地理位置)"]
    assert regions[link[0]["to_id"]]["value"]["labels"] == ["地理位置"]
    tasks = [{"id": 1, "data": {"body": text}}]
    answer = client.post("/ls/predict", json={"tasks": tasks, "label_config": LS_REL})
    assert answer.status_code == 200 and len(answer.json()["results"]) == 1


@pytest.mark.parametrize("payload, status", [
    ({"tasks": [{"id": 1, "data": {"text": "x"}}]}, 400),                                  # no config known
    ({"tasks": [{"id": 1, "data": {"other": "x"}}], "label_config": LS_NER}, 400),         # no text in the task
    ({"tasks": [{"id": 1, "data": {"text": "x"}}], "label_config": "<View><oops"}, 400),   # not XML
    ({"tasks": [{"id": 1, "data": {"text": "x"}}], "label_config": "<View><Choices/></View>"}, 400),
    ({"tasks": "x"}, 422),
])
def test_label_studio_bad_requests_are_4xx(client, payload, status):
    assert_error(client.post("/ls/predict", json=payload), status)
    assert_error(client.post("/ls/setup", json={"schema": "<View/>"}), 400)


# ---- SeqGPT through the API ----------------------------------------------------------------------------

SEQ_LINES = [{"id": "a", "text": "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "task": "ext", "labels": ["人物", "地理位置"]},
             {"id": "b", "text": "I want my checking balance.", "task": "cls", "labels": ["CheckBalance", "TransferMoney"]}]


@pytest.fixture(scope="module")
def seq_tiny(tmp_path_factory):
    from workstation import engine
    return engine.family("seqgpt").write_demo_weights(tmp_path_factory.mktemp("seq") / "seqgpt-tiny", "tiny")


def test_seqgpt_extract_gives_the_cli_lines_and_options_are_checked(make_client, api_settings, seq_tiny, tmp_path):
    from workstation.settings import ModelSettings
    api_settings.models["seqgpt"] = ModelSettings(weights=str(seq_tiny), device="cpu", batch_size=2)
    api_settings.api.models = ["rexuninlu", "seqgpt"]
    client = make_client()
    options = {"num_beams": 2, "max_new_tokens": 6}
    got = client.post("/v1/extract", json={"model": "seqgpt", "documents": SEQ_LINES, "options": options,
                                           "optimizations": []})
    assert got.status_code == 200, got.text
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in SEQ_LINES), "utf-8")
    assert cli_main(["extract", "--model", "seqgpt", "--weights", str(seq_tiny), "--input", str(inp), "--output",
                     str(out), "--device", "cpu", "--optimizations", "none", "--num-beams", "2",
                     "--max-new-tokens", "6", "--no-record"]) == 0
    assert got.json()["results"] == [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    for bad in ({"num_beams": "two"}, {"num_beams": 0}, {"max_new_tokens": 10**9}, {"num_beams": 1.5},
                {"markers": "klingon"}, {"beam": 2}):
        assert_error(client.post("/v1/extract", json={"model": "seqgpt", "documents": SEQ_LINES[1:],
                                                      "options": bad}), 400)
    assert_error(client.post("/v1/extract", json={"model": "seqgpt", "documents": [{"text": "x", "task": "cls"}]}), 400)
