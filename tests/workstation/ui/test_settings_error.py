"""A settings.toml the workstation cannot use is said on the page, naming the key and the file, until it is fixed."""
from __future__ import annotations

from workstation.ui import render


def test_a_bad_settings_file_is_shown_on_the_page_and_the_page_comes_back_once_it_is_fixed(app, ui_env):
    settings = ui_env / "settings.toml"
    good = settings.read_text("utf-8")
    settings.write_text(good.replace("batch_size = 4", "batchsize = 4", 1), "utf-8")
    app.run()
    assert not app.exception
    message = f"{settings}: [models.fakeie] has no setting 'batchsize'; known: weights, device, dtype, batch_size"
    assert [e.value for e in app.error] == [f"**settings.toml cannot be used.** {render.md_text(message)}"]
    settings.write_text(good, "utf-8")
    app.run()
    assert not app.exception and not app.error and app.button
