"""The Extract page in a real browser (Chromium, Playwright) on the real plugins' tiny demo weights: the text a
person typed survives a model switch, and Cancel stops a running SeqGPT extraction (the tiny model generates its
256 tokens per prompt for tens of seconds on this CPU) with nothing recorded.
"""
from __future__ import annotations

import pytest

from tests.workstation.ui.test_browser_e2e import CHROMIUM, CHROMIUM_ARGS, choose, click, running_server, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]

MINE = "王五昨天在上海见到了李四。"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("extract-ui")) as running:
        yield running


@pytest.fixture
def page(server):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
        page.set_default_timeout(60_000)
        page.goto(server[0])
        settle(page)
        yield page
        browser.close()


def text_box(page):
    return page.get_by_label("Text", exact=True)


def test_typed_text_survives_a_model_switch_and_back(page):
    choose(page, "Model", "rexuninlu")
    text_box(page).fill(MINE)
    text_box(page).blur()
    settle(page)
    choose(page, "Model", "seqgpt")
    assert text_box(page).input_value() == MINE
    assert page.get_by_label("Labels (JSON list)").first.is_visible()      # SeqGPT's box holds labels
    choose(page, "Task", "Classification (cls)")
    assert text_box(page).input_value() == MINE
    choose(page, "Model", "rexuninlu")
    assert text_box(page).input_value() == MINE


def test_cancel_stops_a_running_extraction_and_records_nothing(page, server):
    from storage.repository import open_store
    choose(page, "Model", "seqgpt")
    choose(page, "Task", "Extraction (ext)")
    text_box(page).fill(MINE)
    text_box(page).blur()
    settle(page)
    click(page, "Run")
    cancel = page.get_by_role("button", name="Cancel", exact=True).first
    cancel.wait_for()
    # progress, not a bare spinner (loading the model first takes long on a busy 2-core machine)
    page.get_by_text("model step").first.wait_for(timeout=180_000)
    cancel.click()
    page.get_by_text("Cancelled after").wait_for(timeout=30_000)
    store = open_store(server[1] / "runs.db")
    try:
        assert store.count_runs() == 0
    finally:
        store.close()
    assert page.get_by_role("button", name="Cancel", exact=True).count() == 0
