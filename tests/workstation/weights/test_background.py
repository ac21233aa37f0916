"""A fetch in a process of its own, as the UI runs it: followed through its status file, cancelled, resumed."""
from __future__ import annotations

import time

from workstation.settings import load_settings
from workstation.weights.background import BackgroundFetches


def _wait(fetches, model, stages, timeout=120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = fetches.status(model)
        if status and status["stage"] in stages:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{model} never reached {stages}: {fetches.status(model)}")


def test_a_background_fetch_reports_progress_cancels_and_resumes_after_cancel(hub, settings_file, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("IEW_SETTINGS", str(settings_file))          # the fetch process reads these settings
    hub.slow["pytorch_model.bin"] = 0.2          # RexUniNLU's 3.7 MB in 58 blocks of 64 KiB: about 12 s
    fetches = BackgroundFetches(tmp_path / "status")
    fetches.start("rexuninlu", tmp_path / "weights")
    status = _wait(fetches, "rexuninlu", {"downloading"})
    assert status["total"] > 3_000_000 and fetches.running("rexuninlu")
    deadline = time.monotonic() + 60
    while fetches.status("rexuninlu")["done"] < 1_100_000 and time.monotonic() < deadline:   # a chunk is written
        time.sleep(0.2)
    fetches.cancel("rexuninlu")
    assert fetches.status("rexuninlu")["stage"] == "cancelled" and not fetches.running("rexuninlu")
    partial = list((tmp_path / "weights" / ".staging").rglob("pytorch_model.bin.incomplete"))
    assert partial and partial[0].stat().st_size >= 1_000_000
    assert 'weights = ""' in settings_file.read_text("utf-8")

    hub.slow.clear()
    hub.requests.clear()
    fetches.start("rexuninlu", tmp_path / "weights")
    status = _wait(fetches, "rexuninlu", {"done", "failed"})
    assert status["stage"] == "done", status["message"]
    assert hub.resumed("pytorch_model.bin") == 1
    assert load_settings(settings_file).weights_for("rexuninlu") == (tmp_path / "weights" / "rexuninlu-v1.2.2", False)
