"""Refresh the screenshots in docs/screenshots/: the UI server on tiny demo weights, with recorded runs, in Chromium.

    .venv/bin/python -m tests.workstation.ui.screenshots [--out docs/screenshots] [--keep]

Writes settings, tiny demo weights and a database into a temporary folder, records a 300-document run and a
pair of runs on the same texts (as Review compares them) before the server starts, then drives the pages in
Chromium and screenshots Extract (a live run, then a SeqGPT run in progress), the gold editor, the big run's
document table (History), Review, Batch (a job running, with the machine panel) and the machine monitor.
A page that fails is reported and the others are still taken; the exit status says whether all were.
Look at every picture afterwards: a test cannot tell a cramped or confusing page.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import traceback
from pathlib import Path

from tests.workstation.ui.test_browser_e2e import (
    CHROMIUM,
    CHROMIUM_ARGS,
    choose,
    click,
    go,
    running_server,
    settle,
    shot,
    write_server_settings,
)

ROOT = Path(__file__).resolve().parents[3]
PEOPLE = ["张三", "李四", "王海东", "林晓峰", "陈雨桐", "赵明"]
PLACES = ["北京", "上海", "杭州", "深圳", "新加坡", "成都"]
ORGS = ["星河科技", "东方银行", "南京大学", "腾飞资本"]
SCHEMA = {"人物": None, "地点": None, "组织机构": None}


def news_document(i: int, rng: random.Random):
    """A short news-like sentence with a person, a place, an organisation and, every fourth, an organisation
    named after its city (北京星河科技: a place nested in an organisation)."""
    from contracts.domain import Document, Result, Span
    person, place, org = rng.choice(PEOPLE), rng.choice(PLACES), rng.choice(ORGS)
    nested = i % 4 == 0
    org_name = place + org if nested else org
    text = f"第{i}条：{person}在{place}参加了{org_name}的发布会，并与合作伙伴交流。"
    spans = []

    def span(t, s, conf):
        at = text.index(s)
        return Span(t, s, (at, at + len(s)), conf)
    spans.append([span("人物", person, round(rng.uniform(0.55, 0.99), 2))])
    spans.append([span("地点", place, round(rng.uniform(0.4, 0.95), 2))])
    spans.append([span("组织机构", org_name, round(rng.uniform(0.3, 0.97), 2))])
    if nested:
        at = text.index(org_name)
        spans.append([Span("地点", place, (at, at + len(place)), round(rng.uniform(0.3, 0.8), 2))])
    return Document(f"news-{i}", text, SCHEMA), Result(f"news-{i}", spans)


def seed(db: Path) -> dict[str, int]:
    """A 300-document batch run, then two runs on the same 12 texts that disagree (Review's pair)."""
    from contracts.domain import Result, Span
    from storage.repository import open_store
    from tests.storage.sample_runs import make_report
    rng = random.Random(30)
    pairs = [news_document(i, rng) for i in range(300)]
    store = open_store(db)
    try:
        big = store.record_run(make_report([r for _, r in pairs], wall_seconds=41.7, tokens=18_400), [d for d, _ in pairs],
                               "batch", task="ner")
        docs = [d for d, _ in pairs[:12]]
        a = [r for _, r in pairs[:12]]
        b = []
        for k, r in enumerate(a):      # B misses some places and finds an extra span in others
            tuples = [t for t in r.tuples if not (k % 3 == 0 and t[0].type == "地点")]
            if k % 4 == 1:
                text = docs[k].text
                tuples.append([Span("组织机构", "合作伙伴", (text.index("合作伙伴"), text.index("合作伙伴") + 4), 0.41)])
            b.append(Result(r.document_id, tuples))
        run_a = store.record_run(make_report(a, wall_seconds=0.9), docs, "ui", task="ner")
        run_b = store.record_run(make_report(b, model="seqgpt", wall_seconds=12.4), docs, "ui", task="ner")
    finally:
        store.close()
    return {"big": big, "a": run_a, "b": run_b}


def open_run(page, run_id: int, model: str) -> None:
    go(page, "History")
    page.get_by_test_id("stMultiSelect").filter(has_text="Selected runs").click()
    page.get_by_role("option").filter(has_text=f"{run_id} · {model}").first.click()
    page.keyboard.press("Escape")
    settle(page)
    click(page, "Open")
    settle(page)
    page.get_by_role("heading", name=f"Run {run_id}").wait_for()


def top(page) -> None:
    page.get_by_test_id("stMain").evaluate("main => main.scrollTo(0, 0)")


def extract(page, out: Path) -> None:
    choose(page, "Model", "rexuninlu")
    # A classification preset: the random demo weights find no entity in a text, but always give a label
    choose(page, "Task", "Sentiment classification (sentiment)")
    click(page, "Run")
    settle(page)
    page.get_by_role("heading", name="Run 4").wait_for(timeout=240_000)
    settle(page)
    shot(page, out, "extract")


def extract_running(page, out: Path) -> None:
    choose(page, "Model", "seqgpt")
    choose(page, "Task", "Extraction (ext)")
    click(page, "Run")
    page.get_by_text("model step").first.wait_for(timeout=240_000)
    page.wait_for_timeout(3000)
    shot(page, out, "extract-running")
    page.get_by_role("button", name="Cancel", exact=True).first.click()
    page.get_by_text("Cancelled after").wait_for(timeout=60_000)
    choose(page, "Model", "rexuninlu")


def gold_editor(page, out: Path, runs: dict[str, int]) -> None:
    open_run(page, runs["a"], "rexuninlu")
    page.get_by_text("Correct this result and save it as a gold example").first.click()
    settle(page)
    editor = page.get_by_test_id("stExpander").filter(has_text="Correct this result and save it as a gold example")
    # The editor alone (the page is 3,700 px); the viewport grown to the page, as Streamlit scrolls inside its
    # main block and a part outside the viewport would come out blank.
    height = page.evaluate("document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": 1440, "height": min(max(height, 1000), 6000)})
    page.wait_for_timeout(800)
    editor.first.screenshot(path=str(out / "history-gold.png"))
    page.set_viewport_size({"width": 1440, "height": 1000})


def document_table(page, out: Path, runs: dict[str, int]) -> None:
    open_run(page, runs["big"], "rexuninlu")
    page.get_by_text("pass the filters").first.wait_for()
    top(page)
    shot(page, out, "history-documents")


def review(page, out: Path, runs: dict[str, int]) -> None:
    go(page, "Review")
    page.get_by_text("Or review two recorded runs").click()
    settle(page)
    choose(page, "Run A (the reference)", f"{runs['a']} · rexuninlu")
    choose(page, "Run B", f"{runs['b']} · seqgpt")
    click(page, "Review these runs")
    settle(page)
    page.get_by_text(f"Run {runs['a']} (A: rexuninlu) vs run {runs['b']} (B: seqgpt)").wait_for()
    top(page)
    shot(page, out, "review")


def batch(page, out: Path, tmp: Path) -> None:
    upload = tmp / "news.jsonl"
    rng = random.Random(7)
    upload.write_text("\n".join(json.dumps({"id": d.id, "text": d.text, "schema": SCHEMA}, ensure_ascii=False)
                                for d, _ in (news_document(i, rng) for i in range(2_000))), "utf-8")
    choose(page, "Model", "rexuninlu")
    go(page, "Batch")
    page.locator("[data-testid='stFileUploader'] input[type=file]").set_input_files(str(upload))
    page.get_by_test_id("stFileUploader").get_by_text("news.jsonl").wait_for()
    settle(page)
    click(page, "Start batch job")
    settle(page)
    page.get_by_text("Job 1").first.wait_for()
    page.wait_for_timeout(6000)           # a few seconds of the machine panel's charts
    shot(page, out, "batch")


def monitor(page, out: Path) -> None:
    go(page, "Machine monitor")
    page.wait_for_timeout(4000)
    shot(page, out, "monitor")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (settings, database, log)")
    parser.add_argument("--only", nargs="*", help="take only these pictures (names without .png)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not CHROMIUM.exists():
        print(f"needs Chromium at {CHROMIUM} (apt-get install chromium)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="iew-screenshots-"))
    write_server_settings(tmp)
    runs = seed(tmp / "runs.db")
    failed = []
    from playwright.sync_api import sync_playwright
    with running_server(tmp) as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
        page.set_default_timeout(60_000)
        steps = [("extract", lambda: extract(page, out)), ("extract-running", lambda: extract_running(page, out)),
                 ("history-gold", lambda: gold_editor(page, out, runs)),
                 ("history-documents", lambda: document_table(page, out, runs)),
                 ("review", lambda: review(page, out, runs)), ("batch", lambda: batch(page, out, tmp)),
                 ("monitor", lambda: monitor(page, out))]
        for name, step in steps:
            if args.only and name not in args.only:
                continue
            page.goto(url)
            settle(page)
            try:
                step()
                print(f"{out / name}.png")
            except Exception:
                failed.append(name)
                print(f"{name}: FAILED\n{traceback.format_exc()}", file=sys.stderr)
                shot(page, tmp, f"{name}-failed")
        browser.close()
    print(f"temporary folder: {tmp}" + ("" if args.keep else " (removed)"))
    if not args.keep:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
