"""The Model weights page (AppTest): the weights in use, a folder checked as it is typed, a switch without a
restart. The download itself is tested in a real browser against the fake hub (test_weights_browser.py)."""
from __future__ import annotations

import shutil

from contracts.model import DEMO_NOTICE
from workstation.settings import load_settings
from workstation.ui import state


def _page(app):
    return app.run().switch_page("screens/weights.py").run()


def test_the_page_shows_the_demo_weights_in_use_and_whether_they_load(app, ui_env):
    at = _page(app)
    assert not at.exception
    assert any("random demo weights" in m.value and "fake-weights" in m.value for m in at.markdown)
    assert at.success, "the demo checkpoint passes the model's check"


def test_a_typed_folder_is_checked_and_a_wrong_one_is_named(app, ui_env):
    at = _page(app)
    at.text_input(key="folder:fakeie").input(str(ui_env / "nowhere")).run()
    assert any("is not a folder" in e.value for e in at.error)
    assert not [b for b in at.button if b.label.startswith("Use this folder")]
    at.text_input(key="folder:fakeie").input(str(ui_env / "fake-weights")).run()
    assert any("random demo weights" in e.value for e in at.error)


def test_using_a_good_folder_switches_settings_and_the_banner_goes_without_a_restart(app, ui_env):
    real = ui_env / "real-weights"
    shutil.copytree(ui_env / "fake-weights", real, ignore=shutil.ignore_patterns("RANDOM_DEMO_WEIGHTS.txt"))
    at = _page(app)
    assert any(DEMO_NOTICE in w.value for w in at.warning)
    shelf = state.model_shelf()                     # the process's shelf, which the page shares
    with shelf.borrow(shelf.key("fakeie", ui_env / "fake-weights", "cpu", "fp32")):
        pass
    assert [k for k in shelf.loaded() if k[0] == "fakeie"]
    at.text_input(key="folder:fakeie").input(str(real)).run()
    next(b for b in at.button if b.label == "Use this folder for fakeie").click().run()
    assert not at.exception
    assert load_settings().weights_for("fakeie") == (real, False)
    assert not any(DEMO_NOTICE in w.value for w in at.warning)
    assert not [k for k in shelf.loaded() if k[0] == "fakeie"], "the old weights were unloaded"
