"""Coverage in the UI: the unread part greyed out (Extract, History), cut runs and documents listed in
History, and the long-text switch among the model options."""
from __future__ import annotations

import re

import pytest

from tests.workstation.ui.test_history_page import button, listed
from workstation.ui import state

TEXT = "Alice met Bob in Paris. Later Alice wrote to Bob from Rome."


def run_extract(at, read_last: int = 0, long_text: str | None = None) -> int:
    at.switch_page("screens/extract.py").run()
    at.text_area(key="text:fakeie").input(TEXT).run()
    if read_last:
        at.number_input(key="extract:fakeie:read_last").set_value(read_last).run()
    if long_text:
        at.selectbox(key="extract:fakeie:long_text").select(long_text).run()
    button(at, "Run").click().run()
    assert not at.exception and not at.error
    return at.session_state["extract_run_id"]


def drawn(at) -> str:
    return "".join(h.value for h in at.get("html"))


def greyed(html: str) -> str:
    """The text inside the greyed-out segments, without markup."""
    return "".join(re.sub(r"<[^>]+>", "", m) for m in re.findall(r'<span class="iew-unread"[^>]*>(.*?)</span>', html))


def test_extract_greys_out_the_part_the_model_did_not_read(app):
    at = app.run()
    run_extract(at, read_last=20)
    assert greyed(drawn(at)) == TEXT[:-20]
    assert any("The model read" in w.value and "not read" in w.value for w in at.warning)


def test_window_mode_from_the_options_reads_all_and_nothing_is_greyed(app):
    at = app.run()
    run_id = run_extract(at, read_last=20, long_text="window")
    assert 'class="iew-unread"' not in drawn(at)
    assert any("read all of the text" in c.value for c in at.caption)
    assert state.store().get_run(run_id).summary.options["long_text"] == "window"


def test_history_lists_and_filters_cut_runs_and_greys_the_opened_document(app):
    at = app.run()
    whole = run_extract(at)
    cut = run_extract(at, read_last=20)
    at.switch_page("screens/history.py").run()
    table = at.dataframe[0].value
    assert dict(zip(table["run"], table["cut"])) == {cut: "1 of 1", whole: "—"}
    documents = at.dataframe[1].value
    assert list(documents["run"]) == [cut] and list(documents["not read"]) == [len(TEXT) - 20 - TEXT[:-20].count(" ")]
    at.checkbox(key="history_cut").check().run()
    assert listed(at) == [cut]
    at.multiselect(key="history_selected").set_value([cut]).run()
    button(at, "Open").click().run()
    assert not at.exception and 'class="iew-unread"' in drawn(at)


@pytest.mark.parametrize("text", ['<script>alert(1)</script> and more text before the end'])
def test_greyed_text_is_escaped(app, text):
    at = app.run()
    at.switch_page("screens/extract.py").run()
    at.text_area(key="text:fakeie").input(text).run()
    at.number_input(key="extract:fakeie:read_last").set_value(10).run()
    button(at, "Run").click().run()
    assert "<script>" not in drawn(at) and "&lt;script&gt;" in drawn(at)
