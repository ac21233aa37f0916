"""The gold editor's span picker in a real browser (Chromium, Playwright): select text with the mouse, press a
type's key, and the span is in the draft; pick a span by its tag, press Delete, and it is gone; Enter with
nothing selected saves the draft. The text starts with an emoji (two UTF-16 units, one Python character), so
an offset the page sends without conversion would save the wrong characters.

The run is recorded into the store before the server starts; the server is the one `launcher.py` starts
(tests/workstation/ui/test_browser_e2e.py). The screenshot of the picker goes to the test's tmp dir, or to IEW_SCREENSHOTS.
"""
from __future__ import annotations

import os
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
    write_server_settings,
)

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]

TEXT = "😀张三在北京见到了<b>李四</b>。"
SCHEMA = {"人物": None, "地点": None}           # keys 1 and 2 in the picker


def seed_run(db: Path) -> int:
    """A rexuninlu run of one document in which the model found 张三 only."""
    from contracts.domain import Document, Result, Span
    from storage.repository import open_store
    from tests.storage.sample_runs import make_report
    start = TEXT.index("张三")
    result = Result("doc-1", [[Span("人物", "张三", (start, start + 2), 0.9)]])
    store = open_store(db)
    try:
        return store.record_run(make_report([result]), [Document("doc-1", TEXT, SCHEMA)], "ui")
    finally:
        store.close()


# The page coordinates of a piece of the picker's text: the first and last character's boxes inside the frame.
CHARACTER_BOXES = """(root, piece) => {
  for (const seg of root.querySelectorAll('.seg')) {
    const node = seg.firstChild, at = node.data.indexOf(piece);
    if (at < 0) continue;
    const box = (i) => { const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
                         return r.getBoundingClientRect(); };
    const first = box(at), last = box(at + piece.length - 1);
    return {x0: first.left + 1, x1: last.right - 1, y: (first.top + first.bottom) / 2};
  }
  return null;
}"""


def drag_across(page, piece: str) -> None:
    """Select `piece` of the picker's text the way a person does: press, drag, release."""
    frame = page.locator("iframe[src*='span_picker']")
    frame.scroll_into_view_if_needed()
    origin = frame.bounding_box()
    where = frame.content_frame.locator("#text").evaluate(CHARACTER_BOXES, piece)
    assert where, f"{piece!r} is not in the picker's text"
    y = origin["y"] + where["y"]
    page.mouse.move(origin["x"] + where["x0"], y)
    page.mouse.down()
    page.mouse.move(origin["x"] + where["x1"], y, steps=6)
    page.mouse.up()


def saved_outputs(db: Path) -> list:
    from storage.repository import open_store
    store = open_store(db)
    try:
        return [ex.output for ds in store.list_datasets("rexuninlu") for ex in store.gold_examples(ds.id)]
    finally:
        store.close()


def test_mouse_selection_and_a_type_key_add_a_span_and_delete_removes_one(tmp_path):
    from playwright.sync_api import sync_playwright
    write_server_settings(tmp_path)
    run_id = seed_run(tmp_path / "runs.db")
    with running_server(tmp_path) as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
        page.set_default_timeout(60_000)
        page.goto(url)
        settle(page)
        go(page, "History")
        page.get_by_test_id("stMultiSelect").filter(has_text="Selected runs").click()
        page.get_by_role("option").filter(has_text=f"{run_id} · rexuninlu").click()
        page.keyboard.press("Escape")
        settle(page)
        click(page, "Open")
        settle(page)
        page.get_by_text("Correct this result and save it as a gold example").click()
        settle(page)
        picker = page.frame_locator("iframe[src*='span_picker']")
        picker.locator(".chip").filter(has_text="人物").wait_for()
        assert picker.locator("#text").inner_text().replace("人物", "") == TEXT     # the text as text, tags aside
        assert picker.locator("#text b").count() == 0                             # user text is never markup

        drag_across(page, "李四")
        picker.get_by_text("Selected “李四”").wait_for()
        folder = Path(os.environ.get("IEW_SCREENSHOTS") or tmp_path / "screenshots")
        folder = folder if folder.is_absolute() else ROOT / folder
        folder.mkdir(parents=True, exist_ok=True)
        page.locator("iframe[src*='span_picker']").evaluate("frame => frame.scrollIntoView({block: 'center'})")
        page.screenshot(path=str(folder / "gold-editor.png"))               # the picker with a selection
        page.keyboard.press("1")                                                 # 人物
        settle(page)
        assert picker.locator(".chip").count() == 2

        page.get_by_label("Name of the new dataset").fill("picked")
        page.keyboard.press("Enter")
        settle(page)
        picker.locator("#text").click(position={"x": 3, "y": 3})                 # focus the picker, pick nothing
        page.keyboard.press("Enter")                                             # accept: save the draft
        settle(page)
        page.get_by_text("Saved gold example").wait_for()
        li = TEXT.index("李四")
        assert saved_outputs(tmp_path / "runs.db") == [[[{"type": "人物", "span": "张三", "offset": [1, 3]}],
                                                        [{"type": "人物", "span": "李四", "offset": [li, li + 2]}]]]

        picker.locator(".chip").nth(1).click()                                   # 李四's tag, the last span
        picker.get_by_text("人物 “李四”: Delete removes it").wait_for()
        page.keyboard.press("Delete")
        settle(page)
        assert picker.locator(".chip").count() == 1
        assert page.get_by_text("The span picker:").count() == 0        # the applied event is not read again
        click(page, "Save as gold example")
        settle(page)
        page.get_by_text("Updated gold example").wait_for()
        assert saved_outputs(tmp_path / "runs.db") == [[[{"type": "人物", "span": "张三", "offset": [1, 3]}]]]
        browser.close()
