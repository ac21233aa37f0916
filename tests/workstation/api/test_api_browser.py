"""Cross-site requests in a real browser (Debian's Chromium, driven by Playwright): a page of a second loopback
origin, served by this test, tries every request a page may send without asking (a posted form, no-cors
fetches of a form, a blob and plain text) and the ones that need a CORS preflight, against the API under
uvicorn. Nothing may be created; the API's own origin and our Python client still work."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.workstation.ui.test_browser_e2e import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]

BODY = {"model": "rexuninlu", "optimizations": [], "documents": [{"text": "张三在北京", "schema": {"人物": None}}]}

# Every request a hostile page can make; each outcome is recorded, none is expected to succeed.
ATTACKS = """async ([api, body]) => {
  const form = () => {
    const f = new FormData();
    f.append("file", new Blob(["张三在北京\\n"]), "x.txt");
    f.append("model", "rexuninlu"); f.append("schema", '{"人物": null}'); f.append("optimizations", "none");
    return f;
  };
  const outcomes = [];
  const attempt = async (name, url, init) => {
    try { const r = await fetch(url, init); outcomes.push([name, r.type, r.status]); }
    catch (e) { outcomes.push([name, "error", String(e)]); }
  };
  await attempt("no-cors form", api + "/v1/jobs", {method: "POST", mode: "no-cors", body: form()});
  await attempt("no-cors blob", api + "/v1/extract", {method: "POST", mode: "no-cors", body: new Blob([body])});
  await attempt("no-cors text", api + "/v1/jobs", {method: "POST", mode: "no-cors", body: body});
  await attempt("cors form + header", api + "/v1/jobs", {method: "POST", headers: {"X-IEW-Request": "1"}, body: form()});
  await attempt("cors json", api + "/v1/extract", {method: "POST", headers: {"Content-Type": "application/json"}, body});
  // The classic: a form posted into a hidden frame, its file set through a DataTransfer.
  const frame = document.createElement("iframe"); frame.name = "sink"; document.body.appendChild(frame);
  const f = document.createElement("form");
  f.method = "POST"; f.enctype = "multipart/form-data"; f.action = api + "/v1/jobs"; f.target = "sink";
  for (const [k, v] of [["model", "rexuninlu"], ["schema", '{"人物": null}'], ["optimizations", "none"]]) {
    const i = document.createElement("input"); i.name = k; i.value = v; f.appendChild(i);
  }
  const file = document.createElement("input"); file.type = "file"; file.name = "file";
  const dt = new DataTransfer(); dt.items.add(new File(["张三在北京\\n"], "x.txt")); file.files = dt.files;
  f.appendChild(file); document.body.appendChild(f);
  await new Promise(done => { frame.onload = done; f.submit(); });
  outcomes.push(["posted form", "navigation", 0]);
  return outcomes;
}"""

SAME_ORIGIN = """async () => {
  const form = new FormData();
  form.append("file", new Blob(["张三在北京\\n"]), "mine.txt");
  form.append("model", "rexuninlu"); form.append("schema", '{"人物": null}'); form.append("optimizations", "none");
  const plain = await fetch("/v1/jobs", {method: "POST", body: form});
  const ours = await fetch("/v1/jobs", {method: "POST", body: form, headers: {"X-IEW-Request": "1"}});
  return [plain.status, ours.status, await ours.json()];
}"""


@pytest.fixture
def other_origin():
    """A second loopback origin (another port): the hostile page's home."""
    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            data = b"<!doctype html><html><body><p>another site</p></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_page_of_another_origin_creates_no_job_and_no_run(live_api, other_origin, tmp_path):
    from playwright.sync_api import sync_playwright

    from workstation.api.client import Client
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(other_origin)
            outcomes = page.evaluate(ATTACKS, [live_api, json.dumps(BODY)])
            assert len(outcomes) == 6, outcomes
            assert httpx.get(f"{live_api}/v1/jobs").json()["jobs"] == [], outcomes
            assert httpx.get(f"{live_api}/v1/runs").json()["total"] == 0, outcomes

            page.goto(f"{live_api}/health")                      # the API's own origin
            plain, ours, job = page.evaluate(SAME_ORIGIN)
            assert (plain, ours) == (403, 202) and job["status"] == "queued"
        finally:
            browser.close()
    path = tmp_path / "docs.txt"
    path.write_text("李四去上海\n", "utf-8")
    with Client(live_api) as api:
        second = api.upload_job(path, "rexuninlu", schema={"人物": None}, optimizations=[])
    jobs = httpx.get(f"{live_api}/v1/jobs").json()["jobs"]
    assert sorted(j["id"] for j in jobs) == sorted([job["job_id"], second])
    assert {j["source_name"] for j in jobs} == {"mine.txt", "docs.txt"}
