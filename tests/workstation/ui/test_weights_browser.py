"""The Model weights page in a real browser: from the demo banner's link, download RexUniNLU's official weights
from the fake hub (the UI's fetch process runs the real modelscope client against it) with the progress shown,
then Extract runs on them and the demo banner is gone."""
from __future__ import annotations

import re

import pytest

from tests.fake_hub import FakeHub
from tests.workstation.ui.test_browser_e2e import CHROMIUM, CHROMIUM_ARGS, choose, click, running_server, settle

BANNER = re.compile("RANDOM DEMO WEIGHTS")          # the banner's capitals (the weights page says it in lower case)
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]


@pytest.fixture
def hub(tmp_path, monkeypatch):
    from plugins.rexuninlu import demo
    from plugins.rexuninlu.family import RexUniNLU
    official = RexUniNLU().official
    checkpoint = demo.write(tmp_path / "official-rex", "tiny", seed=1)
    fake = FakeHub()
    fake.add(official.repo_id, checkpoint, "d4c0e0399e3b1b91f5f63d66e27986e9638fda85", refs=(official.revision,),
             extra={"configuration.json": b"{}"})
    fake.slow["pytorch_model.bin"] = 0.08            # about 5 s for the 3.7 MB file: the bar has time to show
    running = fake.start()
    # The UI server and the fetch process it starts inherit these.
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", running.url)
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))
    monkeypatch.setenv("HF_ENDPOINT", running.url)
    yield fake
    running.stop()


def test_download_official_weights_from_the_banner_then_extract_without_the_banner(hub, tmp_path):
    from playwright.sync_api import sync_playwright

    from storage.repository import open_store
    with running_server(tmp_path) as (url, tmp), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
        page.set_default_timeout(60_000)
        page.goto(url)
        settle(page)
        choose(page, "Model", "rexuninlu")
        assert page.get_by_text(BANNER).first.is_visible()
        assert page.get_by_text("python3 launcher.py weights fetch all").first.is_visible()

        page.get_by_role("link", name="Download the official weights").click()
        settle(page)
        page.get_by_role("heading", name="Model weights").wait_for()
        click(page, "Download official weights")           # rexuninlu's, the first model
        page.get_by_text("KiB of 3.7 MiB").or_(page.get_by_text("MiB of 3.7 MiB")).first.wait_for()
        page.get_by_text("Downloaded and checked; rexuninlu now uses").wait_for()
        settle(page)
        settings = (tmp / "settings.toml").read_text("utf-8")
        assert "rexuninlu-v1.2.2" in settings and "[models.seqgpt]" in settings
        assert page.get_by_text(BANNER).count() == 0

        page.get_by_test_id("stSidebarNav").get_by_text("Extract", exact=True).click()
        settle(page)
        choose(page, "Task", "Sentiment classification (sentiment)")
        click(page, "Run")
        settle(page)
        page.get_by_role("heading", name="Run 1").wait_for()
        assert page.get_by_text(BANNER).count() == 0
        browser.close()
    run = open_store(tmp / "runs.db").get_run(1).summary
    assert not run.demo and run.weights.endswith("rexuninlu-v1.2.2")
    assert any("FilePath=pytorch_model.bin" in path for _, path, _ in hub.requests)
