"""What no other web page may do, and input that must be refused whole (in-process, FastAPI's TestClient):
cross-origin writes, uploads without our request header, lone surrogates, boolean ids, unknown sources,
upload errors in the uploaded file's own name."""
import json

import pytest

NER = {"人物": None, "地理位置": None}
FORM = {"X-IEW-Request": "1"}
EVIL = "http://evil.example"


def upload(client, name="docs.txt", data="张三在北京\n".encode(), headers=FORM, **fields):
    return client.post("/v1/jobs", files={"file": (name, data, "application/octet-stream")},
                       data={"model": "rexuninlu", "schema": json.dumps(NER), "optimizations": "none", **fields},
                       headers=headers)


def extract_body(**document):
    return {"model": "rexuninlu", "optimizations": [], "documents": [{"text": "张三在北京", "schema": NER, **document}]}


def history(client) -> tuple[int, int]:
    """(runs, jobs) in the store: what a refused request must leave as it was."""
    store = client.app.state.api.store
    return store.count_runs(""), len(store.list_jobs(500))


def refused(response, status, code=None):
    assert response.status_code == status, response.text
    if code:
        assert response.json()["error"]["code"] == code, response.text
    return response.json()["error"]["message"]


# ---- cross-site writes ----------------------------------------------------------------------------------

def test_a_write_from_another_origin_is_refused_and_creates_nothing(client):
    before = history(client)
    refused(upload(client, headers={**FORM, "Origin": EVIL}), 403, "cross_origin")
    refused(upload(client, headers={"Origin": EVIL}), 403, "cross_origin")
    refused(client.post("/v1/extract", json=extract_body(), headers={"Origin": EVIL}), 403, "cross_origin")
    refused(client.post("/v1/jobs", json=extract_body(), headers={"Origin": "null"}), 403, "cross_origin")
    refused(client.post("/ls/predict", json={"tasks": []}, headers={"Origin": EVIL}), 403, "cross_origin")
    # Another port of this very host is another origin too (a second local web app).
    refused(upload(client, headers={**FORM, "Origin": "http://testserver:8081"}), 403, "cross_origin")
    assert history(client) == before


def test_a_page_whose_name_was_re_pointed_at_this_server_is_refused(client):
    # DNS rebinding: evil.example now resolves to this machine, so its page's Origin and Host agree; they do
    # not name the address the request came in on (TestClient's is testserver:80), nor a loopback name.
    before = history(client)
    rebound = {**FORM, "Origin": "http://rebound.example", "Host": "rebound.example"}
    refused(upload(client, headers=rebound), 403, "cross_origin")
    refused(client.post("/v1/extract", json=extract_body(), headers=rebound), 403, "cross_origin")
    assert history(client) == before


def test_with_a_token_the_name_the_browser_used_is_this_server(make_client, api_settings):
    # Off loopback a token is required, so a page under the server's own name may write (DNS rebinding
    # cannot get past the token); another origin still may not.
    api_settings.api.token = "a-long-enough-api-token"
    client = make_client(api_settings)
    named = {"Authorization": "Bearer a-long-enough-api-token", "Origin": "http://ie.example.org",
             "Host": "ie.example.org"}
    assert upload(client, headers=named).status_code == 202
    refused(upload(client, headers={**named, "Origin": "http://other.example.org"}), 403, "cross_origin")


def test_a_browser_marked_cross_site_request_without_an_origin_is_refused(client):
    before = history(client)
    for site in ("cross-site", "same-site"):
        refused(upload(client, headers={**FORM, "Sec-Fetch-Site": site}), 403, "cross_origin")
    assert history(client) == before
    assert upload(client, headers={**FORM, "Sec-Fetch-Site": "same-origin"}).status_code == 202


def test_cancelling_a_job_from_another_origin_is_refused(client):
    job_id = upload(client, data="".join(f"文本{i}\n" for i in range(200)).encode()).json()["job_id"]
    refused(client.delete(f"/v1/jobs/{job_id}", headers={"Origin": EVIL}), 403, "cross_origin")
    client.app.state.api.jobs.wait(timeout=60)
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "done"


def test_an_upload_without_our_request_header_is_refused(client):
    before = history(client)
    message = refused(upload(client, headers={}), 403, "request_header_missing")
    assert "X-IEW-Request" in message
    # A JSON body sent as plain text or with no type at all: what a no-cors fetch of a page can send.
    raw = json.dumps(extract_body()).encode()
    for headers in ({"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}, {}):
        for path in ("/v1/extract", "/v1/jobs"):
            refused(client.post(path, content=raw, headers=headers), 403, "request_header_missing")
    assert history(client) == before


def test_this_servers_own_pages_and_our_client_may_write(client):
    assert upload(client, headers={**FORM, "Origin": "http://testserver"}).status_code == 202
    assert upload(client).status_code == 202                                   # no Origin: not a browser
    assert client.post("/v1/extract", json=extract_body(), headers={"Origin": "http://testserver"}).status_code == 200
    assert client.post("/v1/jobs", content=json.dumps(extract_body()), headers=FORM).status_code == 202   # no type


def test_a_listed_cors_origin_may_write_and_may_send_our_header(make_client, api_settings):
    api_settings.api.cors_origins = ["http://localhost:8080"]
    client = make_client(api_settings)
    preflight = client.options("/v1/jobs", headers={"Origin": "http://localhost:8080",
                                                    "Access-Control-Request-Method": "POST",
                                                    "Access-Control-Request-Headers": "x-iew-request"})
    assert preflight.status_code == 200 and "x-iew-request" in preflight.headers["access-control-allow-headers"].lower()
    assert upload(client, headers={**FORM, "Origin": "http://localhost:8080/"}).status_code == 202
    refused(upload(client, headers={**FORM, "Origin": "http://localhost:8081"}), 403, "cross_origin")


def test_a_token_stands_in_for_our_request_header(make_client, api_settings):
    api_settings.api.token = "a-long-enough-api-token"
    client = make_client(api_settings)
    assert upload(client, headers={"Authorization": "Bearer a-long-enough-api-token"}).status_code == 202
    refused(upload(client, headers={"Authorization": "Bearer a-long-enough-api-token", "Origin": EVIL}), 403)


def test_our_client_sends_the_request_header_with_an_upload(client, tmp_path):
    from workstation.api.client import Client
    path = tmp_path / "docs.txt"
    path.write_text("张三在北京\n", "utf-8")
    with Client("http://testserver", transport=client._transport) as api:
        job_id = api.upload_job(path, "rexuninlu", schema=NER, optimizations=[])
    assert client.get(f"/v1/jobs/{job_id}").json()["source_name"] == "docs.txt"


# ---- lone surrogates, ids, sources ----------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    '{"model": "rexuninlu", "documents": [{"text": "ab\\ud800cd", "schema": {"x": null}}]}',
    '{"model": "rexuninlu", "documents": [{"text": "abcd", "schema": {"\\ud800": null}}]}',
    '{"model": "rexuninlu", "documents": [{"id": "\\udc00", "text": "abcd", "schema": {"x": null}}]}',
    '{"model": "rexuninlu", "documents": [{"text": "abcd"}], "schema": {"x": {"\\udfff": null}}}',
    '{"model": "rexuninlu", "documents": [{"text": "abcd"}], "schema": {"x": null}, "options": {"\\ud800": 1}}',
    '{"model": "rexuninlu\\ud800", "documents": [{"text": "abcd"}], "schema": {"x": null}}',
])
def test_a_lone_surrogate_anywhere_in_a_body_is_a_422_and_records_nothing(client, raw):
    before = history(client)
    for path in ("/v1/extract", "/v1/jobs"):
        message = refused(client.post(path, content=raw.encode(), headers={"content-type": "application/json"}),
                          422, "invalid_request")
        assert "lone UTF-16 surrogate" in message
    assert history(client) == before


def test_a_lone_surrogate_in_an_upload_is_a_400_naming_the_line(client):
    before = history(client)
    lines = '{"text": "好"}\n{"text": "ab\\ud800cd"}\n'.encode()
    error = client.post("/v1/jobs", files={"file": ("docs.jsonl", lines)},
                        data={"model": "rexuninlu", "schema": json.dumps(NER)}, headers=FORM).json()["error"]
    assert error["line"] == 2 and "lone UTF-16 surrogate" in error["message"]
    refused(upload(client, schema='{"\\ud800": null}'), 400, "invalid_input")
    refused(client.post("/ls/predict", content='{"tasks": [{"data": {"text": "a\\ud800"}}], "label_config": "x"}',
                        headers={"content-type": "application/json"}), 422)
    assert history(client) == before


@pytest.mark.parametrize("bad_id", [True, False, 1.5, 2.0, [1], {"a": 1}])
def test_an_id_that_is_not_a_string_or_an_integer_is_refused(client, bad_id):
    before = history(client)
    for path in ("/v1/extract", "/v1/jobs"):
        message = refused(client.post(path, json=extract_body(id=bad_id)), 422, "invalid_request")
        assert "documents.0.id" in message and "string or an integer" in message
    assert history(client) == before


def test_string_and_integer_ids_are_kept_as_given(client):
    got = client.post("/v1/extract", json={**extract_body(id=7), "documents": [
        {"id": 7, "text": "张三", "schema": NER}, {"id": "007", "text": "李四", "schema": NER}]})
    assert [r["id"] for r in got.json()["results"]] == ["7", "007"]


def test_runs_are_listed_only_by_a_known_source(client):
    refused(client.get("/v1/runs", params={"source": "evil"}), 422, "invalid_request")
    for source in ("ui", "batch", "cli", "api"):
        assert client.get("/v1/runs", params={"source": source}).status_code == 200


# ---- uploads: their own name, empty and BOM files ------------------------------------------------------

def test_an_upload_error_names_the_uploaded_file_not_the_servers_copy(client):
    message = refused(upload(client, name="notes.txt", data=b"\x89PNG\r\n\x1a\n\xff\xfe"), 400, "invalid_input")
    assert message.startswith("notes.txt is not UTF-8") and "/tmp" not in message and "upload." not in message
    message = refused(upload(client, name="people.csv", data=b""), 400, "invalid_input")
    assert message.startswith("people.csv is empty") and "None" not in message
    message = refused(upload(client, name="people.csv", data=b"name,age\n"), 400, "invalid_input")
    assert message.startswith("people.csv has no 'text' column") and "/tmp" not in message


@pytest.mark.parametrize("name, data", [("docs.jsonl", '{"text": "张三"}\n'), ("docs.txt", "张三\n"),
                                        ("docs.csv", "text\n张三\n")])
def test_an_upload_with_a_byte_order_mark_is_read(client, name, data):
    got = upload(client, name=name, data=("\ufeff" + data).encode())
    assert got.status_code == 202, got.text
    client.app.state.api.jobs.wait(timeout=60)
    [line] = [json.loads(x) for x in client.get(f"/v1/jobs/{got.json()['job_id']}/results").text.splitlines()]
    run = client.get(f"/v1/runs/{client.get('/v1/jobs/' + str(got.json()['job_id'])).json()['run_id']}").json()
    assert run["items"][0]["document"]["text"] == "张三" and line["id"]


def test_an_error_message_holding_a_lone_surrogate_is_still_sent():
    from workstation.api.errors import json_error
    response = json_error(400, "invalid_input", "key \ud800 is bad")
    assert json.loads(response.body)["error"]["message"] == "key \\ud800 is bad"


def test_the_openapi_docs_offer_the_upload_header(client):
    # So /docs' "Try it out" can send an upload, and a generated client knows the header exists.
    parameters = client.get("/openapi.json").json()["paths"]["/v1/jobs"]["post"]["parameters"]
    assert [(p["name"], p["in"]) for p in parameters] == [("X-IEW-Request", "header")]
