"""End to end in a real browser: the UI server (`python -m workstation.ui.server`) and Debian's Chromium,
driven by Playwright.

Runs the real RexUniNLU and SeqGPT plugins on tiny demo weights written into a tmp dir: extract, see the
result drawn, find the run in History, download an export, run a batch, see the unread part of a long
text greyed out, and take a screenshot of every page.
The screenshots go to the test's tmp dir; to refresh the ones in the docs:
    IEW_SCREENSHOTS=docs/screenshots python3 launcher.py test tests/workstation/ui/test_browser_e2e.py
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[3]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_server_settings(tmp_path: Path) -> Path:
    """Settings, database and tiny demo weights in tmp; the UI on a free port."""
    from plugins.rexuninlu.family import RexUniNLU
    from plugins.seqgpt.family import SeqGPT
    demo = tmp_path / "demo-weights"
    RexUniNLU().write_demo_weights(demo / "rexuninlu-tiny", "tiny")
    SeqGPT().write_demo_weights(demo / "seqgpt-tiny", "tiny")
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

[ui]
host = "127.0.0.1"
port = {free_port()}
""", encoding="utf-8")
    return settings


@contextmanager
def running_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """What `python3 launcher.py` starts (the job runner, then Streamlit, in one process), on the settings
    in tmp (written first if they are not there yet). Yields (url, tmp) once the server answers."""
    settings = tmp_path / "settings.toml"
    if not settings.exists():
        write_server_settings(tmp_path)
    port = tomllib.loads(settings.read_text("utf-8"))["ui"]["port"]
    env = {**os.environ, "IEW_SETTINGS": str(settings), "CUDA_VISIBLE_DEVICES": "", "IEW_LOAD_PLUGINS": ""}
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "workstation.ui.server"],
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
def server(tmp_path):
    with running_server(tmp_path) as running:
        yield running


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
    assert "1 run matches, the latest finished first." in page.get_by_test_id("stMain").inner_text()
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
    settle(page)
    page.get_by_text("Job 1 · batch.jsonl").wait_for()
    page.get_by_text("6 / 6 documents").wait_for(timeout=120_000)
    deadline = time.time() + 60                 # every document is done; the run is being recorded
    while store.get_job(1).status != "done" and time.time() < deadline:
        time.sleep(0.2)
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

    for title, name in (("Machine monitor", "monitor"), ("Plugins", "plugins")):
        go(page, title)
        assert page.get_by_test_id("stException").count() == 0, title
        if name == "monitor":
            from workstation.monitor import NvmlMonitor
            expected = "GPU 0" if NvmlMonitor().available else "No NVIDIA GPU here"
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


def test_review_queue_of_both_models_on_the_same_texts(server, page, shots):
    """Review: RexUniNLU and SeqGPT (tiny demo weights) on the same texts, the queue, one decision, the draft."""
    from plugins.seqgpt.family import SeqGPT
    from storage.repository import open_store
    url, tmp = server
    SeqGPT().write_demo_weights(tmp / "demo-weights" / "seqgpt-tiny", "tiny")
    page.goto(url)
    settle(page)
    go(page, "Review")
    page.get_by_label("Types (comma-separated)", exact=True).and_(page.locator("input")).fill("人物, 地理位置, 组织机构")
    page.get_by_label("Texts (one per line)").fill("北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。\n"
                                                   "张三在北京见到了<img src=x onerror=\"document.title='pwned'\">李四。")
    click(page, "Run both")
    page.get_by_text("Queue", exact=True).wait_for(timeout=240_000)
    settle(page)
    assert page.get_by_test_id("stException").count() == 0
    store = open_store(tmp / "runs.db")
    runs = {r.model: r for r in store.search_runs()}
    assert set(runs) == {"rexuninlu", "seqgpt"} and all(r.documents == 2 for r in runs.values())
    assert page.get_by_text(f"Run {runs['rexuninlu'].id} (A: rexuninlu) vs run {runs['seqgpt'].id} (B: seqgpt)").is_visible()
    main = page.get_by_test_id("stMain").inner_text()
    assert "B measured against A" in main and "Disagreements" in main
    assert page.title() != "pwned" and page.locator(".iew-text img").count() == 0
    radios = page.get_by_test_id("stRadio").filter(has_text="neither")
    if radios.count():                  # random weights: decide the first disagreement, if there is one
        radios.first.get_by_text("neither").click()
        settle(page)
    page.get_by_text("Correct this result and save it as a gold example").wait_for()
    page.get_by_test_id("stMain").evaluate("main => main.scrollTo(0, 0)")
    shot(page, shots, "review")
    store.close()


# Five paragraphs of news-like Chinese: about 1,200 tokens of the demo tokenizer, so SeqGPT's prompt
# (the reference keeps its last 1,024 tokens) loses the start of the text.
LONG_TEXT = """2024年3月，星河科技在杭州发布了新一代语音助手。公司创始人林晓峰表示，这款产品将首先在浙江和江苏上市。发布会上，合作伙伴东方银行宣布将在全国网点部署该系统。分析人士认为，此举将加剧智能客服市场的竞争。
随后，星河科技与南京大学签署了联合实验室协议，双方计划在三年内培养两百名研究人员。林晓峰还透露，公司正在筹备海外业务，首站选在新加坡。当天下午，杭州市政府与星河科技就城市大脑项目举行了会谈。会后，市长王海东参观了公司的研发中心。据悉，该项目总投资约十二亿元，预计明年年底完工。
四月初，星河科技在深圳举办了开发者大会，来自全国的三千多名工程师参加了活动。公司首席技术官陈雨桐介绍了新的开放平台，第三方开发者可以在平台上接入语音识别、机器翻译和知识问答等能力。与此同时，腾飞资本宣布领投星河科技新一轮融资，金额达到五亿元。陈雨桐说，这笔资金将主要用于芯片研发和人才引进。
五月中旬，星河科技的语音助手登陆新加坡市场，首批用户包括当地的两家连锁超市和一家航空公司。新加坡资讯通信媒体发展局的官员出席了上线仪式。林晓峰在仪式上说，公司希望在两年内进入马来西亚、泰国和印度尼西亚。业内人士指出，东南亚市场语言多样，对多语种语音技术提出了更高的要求。
六月底，星河科技公布了上半年的经营数据：语音助手的装机量突破八百万台，企业客户超过一千二百家。公司同时宣布，将在成都设立西南研发中心，由副总裁赵明负责。赵明此前在北京的一家人工智能实验室工作了十年。"""


def test_a_long_text_shows_what_seqgpt_read_and_window_mode_reads_it_all(server, page, shots):
    """Extract a long text with SeqGPT: the unread start is greyed out (the coverage view); History lists
    the cut run; the long_text option set to window reads everything."""
    from storage.repository import open_store
    url, tmp = server
    page.goto(url)
    settle(page)
    choose(page, "Model", "seqgpt")
    choose(page, "Task", "Extraction (ext)")
    page.get_by_label("Text", exact=True).fill(LONG_TEXT)
    settle(page)
    page.get_by_text("seqgpt options").click()
    page.get_by_label("Longest answer (tokens)", exact=True).fill("16")        # the random demo model would babble for 256
    page.keyboard.press("Enter")
    settle(page)
    click(page, "Run")
    settle(page)
    page.get_by_role("heading", name="Run 1").wait_for(timeout=240_000)
    store = open_store(tmp / "runs.db")
    cut = store.get_run(1)
    assert cut.summary.cut_documents == 1
    (start, end), = cut.items[0][1].coverage
    assert 0 < start < end == len(LONG_TEXT)
    page.locator(".iew-text .iew-unread").first.wait_for(timeout=60_000)    # drawn after the run's heading
    greyed = "".join(page.locator(".iew-text .iew-unread").all_inner_texts())
    assert greyed and LONG_TEXT.startswith(greyed) and len(greyed) == start
    page.get_by_text("the greyed, struck-through part was not read").wait_for()
    shot(page, shots, "coverage")

    settle(page)
    box = page.get_by_role("combobox", name="Long text")
    for attempt in range(3):            # a click during the re-layout after the screenshot may not open it
        box.click()
        try:
            page.get_by_role("option").filter(has_text="window").first.click(timeout=10_000)
            break
        except Exception:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
    settle(page)
    assert box.input_value() == "window"
    click(page, "Run")
    settle(page)
    page.get_by_role("heading", name="Run 2").wait_for(timeout=240_000)
    whole = store.get_run(2)
    assert whole.summary.cut_documents == 0 and whole.summary.options["long_text"] == "window"
    page.get_by_text("The model read all of the text").wait_for()
    # run 1's greyed text may linger a moment while Streamlit replaces the result's elements
    from playwright.sync_api import expect
    expect(page.locator(".iew-text .iew-unread")).to_have_count(0, timeout=30_000)

    go(page, "History")
    page.get_by_text("Only runs with documents the model read partly (cut)").click()
    settle(page)
    assert "1 run matches, the latest finished first." in page.get_by_test_id("stMain").inner_text()
    page.get_by_text("Documents read only partly (1 in 1 listed run)").click()
    settle(page)
    shot(page, shots, "history-coverage")
    assert page.get_by_test_id("stException").count() == 0
    store.close()


def test_a_page_url_opened_first_after_a_start_still_runs_the_app_shell(server, page):
    """An open Batch tab reconnecting after a restart: the first request is /batch, not /."""
    url, tmp = server
    page.goto(f"{url}/batch")
    settle(page)
    page.get_by_role("heading", name="Batch").wait_for()
    assert page.get_by_text("RANDOM DEMO WEIGHTS: outputs are meaningless").first.is_visible()
    sidebar = page.get_by_test_id("stSidebar")
    assert sidebar.get_by_test_id("stSelectbox").filter(has_text="Model").count() == 1
    nav = page.get_by_test_id("stSidebarNav").inner_text()
    assert "Fine-tune" in nav and "Machine monitor" in nav and "finetune" not in nav      # titles, not file names
    go(page, "History")
    assert page.get_by_test_id("stException").count() == 0
