"""The Optimizations page: applicability with reasons, toggles, run again, side-by-side comparison."""
from __future__ import annotations

from tests.workstation.ui.markdown import shown
from workstation.ui import state

PAGE = "screens/optimizations.py"


def button(at, label):
    return next(b for b in at.button if b.label == label)


def captions(at) -> str:
    return "\n".join(shown(c.value) for c in at.caption)


def test_every_optimization_is_listed_with_whether_it_applies_and_why(app):
    at = app.run().switch_page(PAGE).run()
    assert not at.exception
    text = captions(at)
    assert "applies]: the fake model has this knob" in text
    assert "does not apply]: it needs hardware this machine does not have" in text
    assert "Switch: restart — needs an app restart" in text
    assert at.toggle(key="opt:fake-never").disabled
    assert not at.toggle(key="opt:fake-fast").disabled and not at.toggle(key="opt:fake-fast").value


def test_toggle_then_run_again_compares_time_and_memory_side_by_side(app):
    at = app.run()
    next(b for b in at.button if b.label == "Run").click().run()
    first = at.session_state["extract_run_id"]
    at.switch_page(PAGE).run()
    at.toggle(key="opt:fake-fast").set_value(True).run()
    assert at.session_state["optimizations"] == ["fake-fast"]
    button(at, "Run again").click().run()
    assert not at.exception and not at.error
    second = at.session_state["extract_run_id"]
    assert second != first and at.session_state["optimizations_compare"] == (first, second)
    store = state.store()
    assert store.get_run(first).summary.optimizations == {}
    assert store.get_run(second).summary.optimizations == {"fake-fast": "fast path"}
    assert {"Wall time B", "Peak GPU memory B", "Speed-up B over A"} <= {m.label for m in at.metric}
    table = at.dataframe[0].value
    assert list(table["run"]) == [f"A: {first}", f"B: {second}"]
    assert list(table["optimizations"]) == ["none", "fake-fast"]
    assert any("exactly the same tuples" in s.value for s in at.success)


def test_running_again_with_the_same_settings_says_so_and_colours_no_difference(app):
    # The page compared identical settings and showed a red 0.30x as if a setting had made the run slower.
    at = app.run()
    next(b for b in at.button if b.label == "Run").click().run()
    first = at.session_state["extract_run_id"]
    at.switch_page(PAGE).run()
    button(at, "Run again").click().run()
    assert not at.exception and not at.error
    notes = [i.value for i in at.info]
    assert any("Both runs used the same settings" in n for n in notes)
    assert any(n.startswith(f"Run A ({first}) was the first on a freshly loaded model") for n in notes)
    assert any("read 1 document:" in n for n in notes)
    wall = next(m for m in at.metric if m.label == "Wall time B")
    assert wall.proto.color == wall.proto.MetricColor.GRAY     # "off": neither better nor worse
    assert next(m for m in at.metric if m.label == "Speed-up B over A").delta == "not an effect of a setting"
    assert at.get("vega_lite_chart")      # the stage times drawn as bars


def test_the_choice_carries_to_the_extract_page(app):
    at = app.run().switch_page(PAGE).run()
    at.toggle(key="opt:fake-fast").set_value(True).run()
    at.switch_page("screens/extract.py").run()
    assert "Chosen optimizations: fake-fast" in captions(at)
    next(b for b in at.button if b.label == "Run").click().run()
    run = state.store().get_run(at.session_state["extract_run_id"])
    assert run.summary.optimizations == {"fake-fast": "fast path"}


def test_without_a_previous_run_the_page_says_what_to_do(app):
    at = app.run().switch_page(PAGE).run()
    assert any("Run something on the Extract page first" in i.value for i in at.info)
