"""Big runs in a real browser (Chromium, Playwright): a 300-document run's document table and its filters,
search that returns documents with a marked snippet, and a CSV whose text is under `content` run from Batch.

The run is recorded into the store before the server starts; the server is the one `launcher.py` starts
(tests/workstation/ui/test_browser_e2e.py). Screenshots go to the test's tmp dir, or to IEW_SCREENSHOTS.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.workstation.ui.test_browser_e2e import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    click,
    go,
    running_server,
    settle,
    shot,
    write_server_settings,
)

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]

DOCUMENTS = 300


def seed_big_run(db: Path) -> int:
    """A rexuninlu run of 300 documents: a 人物 in each, a 地点 (confidence 0.5) in every third; document 7 holds
    markup-looking text."""
    from contracts.domain import Document, Result, Span
    from storage.repository import open_store
    from tests.storage.sample_runs import make_report
    docs, results = [], []
    for i in range(DOCUMENTS):
        text = f"第{i}篇：张三在北京开会。" + ("<img src=x onerror=alert(1)>标记" if i == 7 else "")
        tuples = [[Span("人物", "张三", (text.index("张三"), text.index("张三") + 2), 0.9)]]
        if i % 3 == 0:
            tuples.append([Span("地点", "北京", (text.index("北京"), text.index("北京") + 2), 0.5)])
        docs.append(Document(f"doc-{i}", text, {"人物": None, "地点": None}))
        results.append(Result(f"doc-{i}", tuples))
    store = open_store(db)
    try:
        return store.record_run(make_report(results), docs, "batch")
    finally:
        store.close()


@contextmanager
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = chromium.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
        page = context.new_page()
        page.set_default_timeout(60_000)
        try:
            yield page
        finally:
            chromium.close()


@pytest.fixture
def big_run_page(tmp_path):
    write_server_settings(tmp_path)
    run_id = seed_big_run(tmp_path / "runs.db")
    with running_server(tmp_path) as (url, _), browser() as page:
        page.goto(url)
        settle(page)
        go(page, "History")
        yield page, run_id, tmp_path


def screenshots(tmp: Path) -> Path:
    folder = Path(os.environ.get("IEW_SCREENSHOTS") or tmp / "screenshots")
    folder = folder if folder.is_absolute() else ROOT / folder
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def main_text(page) -> str:
    return page.get_by_test_id("stMain").inner_text()


def test_a_big_runs_document_table_filters_by_type_and_text(big_run_page):
    page, run_id, tmp = big_run_page
    page.get_by_test_id("stMultiSelect").filter(has_text="Selected runs").click()
    page.get_by_role("option").filter(has_text=f"{run_id} · rexuninlu").click()
    page.keyboard.press("Escape")
    settle(page)
    click(page, "Open")
    settle(page)
    page.get_by_role("heading", name=f"Run {run_id}").wait_for()
    page.get_by_text(f"{DOCUMENTS} of {DOCUMENTS} documents pass the filters.").wait_for()
    assert "Spans per type" in main_text(page)
    shot(page, screenshots(tmp), "history-documents")

    types = page.get_by_role("combobox", name="Types", exact=True)    # the table's filter, not the document's
    types.click()
    page.keyboard.press("ArrowDown")                                  # the box opens its list on a key
    page.get_by_role("option", name="地点", exact=True).click()
    page.keyboard.press("Escape")
    settle(page)
    page.get_by_text(f"{DOCUMENTS // 3} of {DOCUMENTS} documents pass the filters.").wait_for()
    page.get_by_label("Page (of 2)").wait_for()                      # 100 documents, 50 a page

    page.get_by_label("Text", exact=True).fill("第17篇")
    page.keyboard.press("Enter")
    settle(page)
    page.get_by_text(f"0 of {DOCUMENTS} documents pass the filters.").wait_for()    # 17 has no 地点
    types.focus()
    page.keyboard.press("Backspace")                                  # removes the last chosen type
    settle(page)
    page.get_by_text(f"1 of {DOCUMENTS} documents passes the filters.").wait_for()
    page.get_by_text("Document doc-17", exact=True).wait_for()
    assert page.locator(".iew-text").filter(has_text="第17篇").count() == 1


def test_search_returns_documents_with_an_escaped_marked_snippet_and_opens_one(big_run_page):
    page, run_id, _ = big_run_page
    search = page.get_by_label("Search text, schema, spans")
    search.fill("标记")
    page.keyboard.press("Enter")
    settle(page)
    page.get_by_text("1 document matches").wait_for()
    snippet = page.locator(".iew-snippet")
    assert snippet.count() == 1 and snippet.locator("mark").inner_text() == "标记"
    assert "<img src=x onerror=alert(1)>" in snippet.inner_text() and snippet.locator("img").count() == 0
    page.get_by_test_id("stExpander").filter(has_text="1 document matches").locator("button", has_text="Open").click()
    settle(page)
    page.get_by_role("heading", name=f"Run {run_id}").wait_for()
    page.get_by_text("Document doc-7", exact=True).wait_for()


def test_a_csv_whose_text_is_under_content_runs_from_batch_on_the_chosen_column(tmp_path):
    from storage.repository import open_store
    write_server_settings(tmp_path)
    upload = tmp_path / "notes.csv"
    upload.write_text("id,summary,content\na,短,张三在北京\nb,短,李四在上海\nc,短,王五\n", "utf-8")
    with running_server(tmp_path) as (url, _), browser() as page:
        page.goto(url)
        settle(page)
        go(page, "Batch")
        page.locator("[data-testid='stFileUploader'] input[type=file]").set_input_files(str(upload))
        page.get_by_test_id("stFileUploader").get_by_text("notes.csv").wait_for()
        settle(page)
        page.get_by_text("3 rows · 3 columns").wait_for()          # the preview
        page.get_by_test_id("stSelectbox").filter(has_text="Text column").click()
        page.get_by_role("option").filter(has_text="content").click()
        settle(page)
        shot(page, screenshots(tmp_path), "batch-text-column")
        click(page, "Start batch job")
        settle(page)
        page.get_by_text("Job 1 · notes.csv").wait_for()
        page.get_by_text("3 / 3 documents").wait_for(timeout=120_000)
        store = open_store(tmp_path / "runs.db")
        try:
            deadline = time.time() + 60
            while store.get_job(1).status != "done" and time.time() < deadline:
                time.sleep(0.2)
            job = store.get_job(1)
            assert job.status == "done", job.error
            run = store.get_run(job.run_id)
            assert [d.text for d, _ in run.items] == ["张三在北京", "李四在上海", "王五"]
            assert run.settings["input"] == {"file": "notes.csv", "text_column": "content"}
        finally:
            store.close()
