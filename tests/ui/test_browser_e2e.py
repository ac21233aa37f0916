"""End to end in a real browser: `streamlit run` + Debian's Chromium driven by Playwright.

Runs the real RexUniNLU plugin on tiny demo weights written into a tmp dir: extract, see the result
drawn, find the run in History, download an export, run a batch, and take a screenshot of every page.
The screenshots go to the test's tmp dir; to refresh the ones in the docs:
    IEW_SCREENSHOTS=docs/screenshots python3 launcher.py test tests/ui/test_browser_e2e.py
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """The app on a free port, with settings, database and tiny demo weights in tmp."""
    from plugins.rexuninlu.family import RexUniNLU
    demo = tmp_path / "demo-weights"
    RexUniNLU().write_demo_weights(demo / "rexuninlu-tiny", "tiny")
    settings = tmp_path / "settings.toml"
    settings.write_text(f"""
[models.rexuninlu]
device = "cpu"
batch_size = 4

[models.seqgpt]
device = "cpu"

[storage]
database = "{tmp_path / 'runs.db'}"
demo_weights_dir = "{demo}"
demo_size = "tiny"

[monitor]
interval_s = 1.0
""", encoding="utf-8")
    port = free_port()
    env = {**os.environ, "IEW_SETTINGS": str(settings), "CUDA_VISIBLE_DEVICES": "", "IEW_LOAD_PLUGINS": ""}
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "workstation" / "ui" / "app.py"),
         "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true",
         "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200:
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("streamlit did not start:\n" + (tmp_path / "streamlit.log").read_text())
                time.sleep(0.3)
        yield url, tmp_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def page(server):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
        page = context.new_page()
        page.set_default_timeout(60_000)
        yield page
        browser.close()


def settle(page) -> None:
    """Wait until the script has finished its run (a click starts one a moment later)."""
    page.wait_for_timeout(400)
    page.wait_for_selector("[data-testid='stApp'][data-test-connection-state='CONNECTED']")
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")
    page.wait_for_timeout(300)


def go(page, title: str) -> None:
    page.get_by_test_id("stSidebarNav").get_by_text(title, exact=True).click()
    settle(page)


def choose(page, label: str, option: str) -> None:
    page.get_by_test_id("stSelectbox").filter(has_text=label).click()
    page.get_by_role("option").filter(has_text=option).first.click()
    settle(page)


def click(page, label: str) -> None:
    """Click the Streamlit button whose text is exactly `label` (widgets have hidden "Open" buttons too)."""
    exact = re.compile(rf"^\s*{re.escape(label)}(\s*expand_more)?\s*$")     # a popover adds its icon's name
    page.locator("button", has_text=exact).first.click()


@pytest.fixture
def shots(server) -> Path:
    folder = Path(os.environ.get("IEW_SCREENSHOTS") or server[1] / "screenshots")
    folder = folder if folder.is_absolute() else ROOT / folder
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shot(page, folder: Path, name: str) -> None:
    """The whole page: Streamlit scrolls inside its main block, so the viewport is grown to fit it."""
    height = page.evaluate("document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": 1440, "height": min(max(height, 1000), 4000)})
    page.wait_for_timeout(500)
    page.screenshot(path=str(folder / f"{name}.png"))
    page.set_viewport_size({"width": 1440, "height": 1000})


def test_extract_on_demo_weights_then_history_export_and_batch(server, page, shots):
    from storage.repository import open_store
    url, tmp = server
    page.goto(url)
    settle(page)
    assert page.get_by_text("RANDOM DEMO WEIGHTS: outputs are meaningless").first.is_visible()

    # Extract: a classification preset, whose label the tiny random model always produces
    choose(page, "Model", "rexuninlu")
    choose(page, "Task", "Sentiment classification (sentiment)")
    click(page, "Run")
    settle(page)
    page.get_by_role("heading", name="Run 1").wait_for()
    store = open_store(tmp / "runs.db")
    detail = store.get_run(1)
    assert detail.summary.source == "ui" and detail.summary.demo and detail.summary.device == "cpu"
    types = {s.type for t in detail.items[0][1].tuples for s in t}
    assert types, "the demo model returned nothing for a classification preset"
    result_area = page.get_by_test_id("stMain")
    for t in types:
        assert result_area.get_by_text(t, exact=True).first.is_visible()
    if any(s.offset for t in detail.items[0][1].tuples for s in t):
        assert page.locator(".iew-text mark").count() >= 1
    for metric in ("Wall time", "Tokens", "Peak GPU memory", "Device", "Precision"):
        assert page.get_by_test_id("stMetricLabel").filter(has_text=metric).count() == 1
    shot(page, shots, "extract")

    # Hostile text never becomes markup
    page.get_by_label("Text").fill('<img src=x onerror="document.title=\'pwned\'"> <script>document.title="pwned"</script>')
    click(page, "Run")
    settle(page)
    page.get_by_role("heading", name="Run 2").wait_for()
    assert page.title() != "pwned" and page.locator(".iew-text img, .iew-text script").count() == 0

    # History: find run 1, open it, export it
    go(page, "History")
    page.get_by_test_id("stTextInputRootElement").first.locator("input").fill("矫情的")
    page.keyboard.press("Enter")
    settle(page)
    assert "1 run(s) match." in page.get_by_test_id("stMain").inner_text()
    page.get_by_test_id("stMultiSelect").click()
    page.get_by_role("option").filter(has_text="1 · rexuninlu").click()
    page.keyboard.press("Escape")
    settle(page)
    click(page, "Open")
    settle(page)
    page.get_by_role("heading", name="Run 1").wait_for()
    shot(page, shots, "history")
    click(page, "Export")
    click(page, "Prepare file")
    settle(page)
    with page.expect_download() as download:
        click(page, "Download runs-1-jsonl.jsonl")
    saved = tmp / "export.jsonl"
    download.value.save_as(saved)
    [line] = [json.loads(x) for x in saved.read_text("utf-8").splitlines()]
    assert line["text"] == detail.items[0][0].text
    page.keyboard.press("Escape")

    # Batch: upload a JSONL, watch it finish (progress is polled by a fragment)
    go(page, "Batch")
    upload = tmp / "batch.jsonl"
    upload.write_text("\n".join(json.dumps({"id": i, "text": f"[CLASSIFY]第{i}条很满意",
                                            "schema": {"正向情感": None, "负向情感": None}}, ensure_ascii=False)
                                for i in range(6)), "utf-8")
    page.locator("[data-testid='stFileUploader'] input[type=file]").set_input_files(str(upload))
    page.get_by_test_id("stFileUploader").get_by_text("batch.jsonl").wait_for()     # the upload has landed
    settle(page)
    click(page, "Start batch job")
    page.get_by_text("Job 1 · batch.jsonl").wait_for()
    page.get_by_text("6 / 6 documents").wait_for(timeout=120_000)
    settle(page)
    assert store.get_job(1).status == "done"
    shot(page, shots, "batch")

    # Optimizations: switch on one that applies on the CPU, run the last documents again, compare
    go(page, "Optimizations")
    page.get_by_test_id("stHorizontalBlock").filter(has_text="sparse-mask").get_by_test_id("stCheckbox").click()
    settle(page)
    click(page, "Run again")
    settle(page)
    newest = store.search_runs(limit=1)[0]              # run 3 is the batch job's
    page.get_by_text(f"Run 2 (A) vs run {newest.id} (B)").wait_for()
    assert newest.source == "ui" and newest.optimizations.keys() == {"sparse-mask"}
    assert "Both runs read the same texts and extracted exactly the same tuples." in page.get_by_test_id("stMain").inner_text()
    shot(page, shots, "optimizations")

    for title, name in (("GPU monitor", "monitor"), ("Plugins", "plugins")):
        go(page, title)
        assert page.get_by_test_id("stException").count() == 0, title
        if name == "monitor":
            from workstation.monitor import NvmlMonitor
            expected = "GPU 0" if NvmlMonitor().available else "The GPU monitor is off"
            page.get_by_text(expected).first.wait_for()
        shot(page, shots, name)
    store.close()


def test_correct_a_result_into_a_dataset_and_finetune_on_it(server, page, shots):
    """History -> a gold example in a new dataset -> Datasets -> Fine-tune with the real trainer process."""
    from storage.repository import open_store
    url, tmp = server
    page.goto(url)
    settle(page)
    choose(page, "Model", "rexuninlu")
    choose(page, "Task", "Named entities (ner)")
    click(page, "Run")
    settle(page)
    page.get_by_role("heading", name="Run 1").wait_for()

    go(page, "History")
    page.get_by_test_id("stMultiSelect").click()
    page.get_by_role("option").filter(has_text="1 · rexuninlu").click()
    page.keyboard.press("Escape")
    settle(page)
    click(page, "Open")
    settle(page)
    page.get_by_text("Correct this result and save it as a gold example").click()
    settle(page)
    page.get_by_label("Span text (as it appears in the text)").fill("巴塞罗那")
    click(page, "Add")
    settle(page)
    page.get_by_label("Name of the new dataset").fill("demo-gold")
    page.keyboard.press("Enter")
    settle(page)
    click(page, "Save as gold example")
    settle(page)
    page.get_by_text("Saved gold example").wait_for()
    shot(page, shots, "history-gold")
    store = open_store(tmp / "runs.db")
    [dataset] = store.list_datasets("rexuninlu")
    [example] = store.gold_examples(dataset.id)
    assert [{"type": "人物", "span": "巴塞罗那", "offset": [17, 21]}] in example.output

    go(page, "Datasets")
    page.get_by_text("Export for fine-tuning").wait_for()
    assert page.locator(".iew-text mark").filter(has_text="巴塞罗那").count() == 1   # the example, drawn
    shot(page, shots, "datasets")

    go(page, "Fine-tune")
    for label in ("Epochs", "Batch size"):
        page.get_by_label(label, exact=True).fill("1")
        page.keyboard.press("Enter")
        settle(page)
    click(page, "Start fine-tuning")
    page.get_by_text("Before and after").wait_for(timeout=240_000)
    settle(page)
    [run] = store.list_training_runs()
    assert run.status == "completed" and run.evaluation_after is not None
    assert page.get_by_test_id("stException").count() == 0
    shot(page, shots, "finetune")
    store.close()
