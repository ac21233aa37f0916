"""Review queue, agreement in History's compare view, threshold tuning and the Extract switch (fake model)."""
from __future__ import annotations

import json

from workstation.ui import state


def button(at, label):
    return next(b for b in at.button if b.label == label)


def frame(at, column: str):
    """The first table with this column (AppTest does not expose a dataframe's key)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def extract(at, text: str, schema: dict) -> int:
    at.switch_page("screens/extract.py").run()
    at.text_area(key="schema:fakeie").input(json.dumps(schema))
    at.text_area(key="text:fakeie").input(text).run()
    button(at, "Run").click().run()
    assert not at.error
    return at.session_state["extract_run_id"]


def two_runs(at) -> tuple[int, int]:
    """The same text: A finds Alice and Paris, B finds Alice and Bob."""
    a = extract(at, "Alice met Bob in Paris.", {"Alice": None, "Paris": None})
    b = extract(at, "Alice met Bob in Paris.", {"Alice": None, "Bob": None})
    return a, b


def test_history_compare_shows_the_agreement_per_type(app):
    at = app.run()
    a, b = two_runs(at)
    at.switch_page("screens/history.py").run()
    at.multiselect(key="history_selected").set_value([a, b]).run()
    button(at, "Compare").click().run()
    assert not at.exception
    table = frame(at, "precision (exact)")
    rows = {t: r for t, r in zip(table["type"], table.to_dict("records"))}
    assert rows["Alice"]["precision (exact)"] == 1.0 and rows["Alice"]["recall (exact)"] == 1.0
    assert (rows["Paris"]["A"], rows["Paris"]["B"]) == (1, 0) and rows["Bob"]["precision (exact)"] == 0.0
    assert rows["(all types)"]["precision (exact)"] == 0.5


def test_review_queue_decisions_fill_the_gold_draft_and_save_an_example(app):
    at = app.run()
    a, b = two_runs(at)
    calm = extract(at, "Nothing here.", {"Alice": None})                  # a third run, not part of the pair
    at.switch_page("screens/review.py").run()
    assert not at.exception and any("open the review queue" in i.value for i in at.info)
    at.selectbox(key="review_run_a").set_value(a)
    at.selectbox(key="review_run_b").set_value(b).run()
    button(at, "Review these runs").click().run()
    assert not at.exception and at.session_state["review_pair"] == (a, b) and calm not in (a, b)
    queue = frame(at, "disagreements")
    assert list(queue["disagreements"]) == [2] and list(queue["reviewed"]) == [""]
    drawn = "".join(h.value for h in at.get("html"))
    assert ">Paris</mark>" in drawn and ">Bob</mark>" in drawn
    # only A: Paris; only B: Bob -- nothing decided yet, so the draft holds what both found
    assert at.session_state["gold_draft"]["tuples"] == [[{"type": "Alice", "span": "Alice", "offset": [0, 5]}]]
    at.radio(key="review-choice-%d-%d-0-0" % (a, b)).set_value("B").run()   # keep Bob (B's)
    button(at, "Next").click().run()                                    # one card open at a time
    at.radio(key="review-choice-%d-%d-0-1" % (a, b)).set_value("neither").run()   # reject Paris (A's)
    assert not at.exception
    assert [t[0]["span"] for t in at.session_state["gold_draft"]["tuples"]] == ["Alice", "Bob"]
    at.radio(key="review_side").set_value("B").run()                   # B's run knows the type Bob
    at.text_input(key="gold_new_dataset").input("reviewed").run()
    at.button(key="gold_save").click().run()
    assert not at.exception and not at.error
    [dataset] = state.store().list_datasets("fakeie")
    [example] = state.store().gold_examples(dataset.id)
    assert example.run_id == b and example.output == [[{"type": "Alice", "span": "Alice", "offset": [0, 5]}],
                                                      [{"type": "Bob", "span": "Bob", "offset": [10, 13]}]]
    assert list(frame(at, "disagreements")["reviewed"]) == ["✓"]


def test_run_both_models_records_two_runs_and_opens_them(app):
    at = app.run()
    at.switch_page("screens/review.py").run()
    at.selectbox(key="review_model_a").set_value("fakeie")
    at.selectbox(key="review_model_b").set_value("fakeie")
    at.text_input(key="review_types").input("Alice, Paris")
    at.text_area(key="review_texts").input("Alice met Bob in Paris.\n\n<b>Paris</b> again").run()
    button(at, "Run both").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    a, b = at.session_state["review_pair"]
    assert [d.text for d, _ in state.store().get_run(a).items] == ["Alice met Bob in Paris.", "<b>Paris</b> again"]
    assert list(frame(at, "disagreements")["disagreements"]) == [0, 0]
    at.selectbox(key=f"review-doc-{a}-{b}").set_value(1).run()
    drawn = "".join(h.value for h in at.get("html"))
    assert "<b>Paris</b>" not in drawn and "&lt;b&gt;" in drawn           # user text is escaped


def test_bad_review_input_is_refused_with_a_message(app):
    at = app.run()
    at.switch_page("screens/review.py").run()
    at.text_area(key="review_texts").input("Alice").run()
    button(at, "Run both").click().run()
    assert "give at least one type" in " ".join(e.value for e in at.error)
    assert "review_pair" not in at.session_state


def test_tune_save_and_apply_thresholds_from_extract(app):
    at = app.run()
    store = state.store()
    # The fake model classifies [CLASSIFY] texts as the first schema type with confidence 0.75.
    schema = {"good": None, "bad": None}
    from contracts.domain import Document
    examples = [(Document(str(i), f"[CLASSIFY]text {i}", schema=schema),
                 [[{"type": "good" if i % 2 else "bad", "span": "good" if i % 2 else "bad", "offset": None}]])
                for i in range(4)]
    store.add_gold_examples("cls-gold", "fakeie", examples, source="jsonl")
    at.switch_page("screens/thresholds.py").run()
    assert not at.exception
    button(at, "Tune").click().run()
    assert not at.exception and not at.error
    rows = frame(at, "F1 without threshold")
    good = rows[rows["type"] == "good"].iloc[0]
    assert good["threshold"] == 0.75 and good["precision"] == 0.5 and good["recall"] == 1.0
    button(at, "Save for these weights").click().run()
    weights, _ = state.weights_for("fakeie")
    assert store.thresholds_for("fakeie", weights).thresholds["good"] == 0.75

    at.switch_page("screens/extract.py").run()
    at.text_area(key="schema:fakeie").input(json.dumps(schema))
    at.text_area(key="text:fakeie").input("[CLASSIFY]fine").run()
    button(at, "Run").click().run()
    plain = at.session_state["extract_run_id"]
    at.toggle(key="thresholds-on:fakeie").set_value(True).run()
    button(at, "Run").click().run()
    strict = at.session_state["extract_run_id"]
    assert "thresholds" not in (store.get_run(plain).settings or {})
    assert store.get_run(strict).settings["thresholds"] == {"good": 0.75}
    assert store.get_run(strict).items[0][1].tuples == store.get_run(plain).items[0][1].tuples   # 0.75 >= 0.75


def review_pair(at, a: int, b: int) -> None:
    at.switch_page("screens/review.py").run()
    at.selectbox(key="review_run_a").set_value(a)
    at.selectbox(key="review_run_b").set_value(b).run()
    button(at, "Review these runs").click().run()
    assert not at.exception


def spans(at) -> list[str]:
    return [t[0]["span"] for t in at.session_state["gold_draft"]["tuples"]]


def test_decisions_survive_moving_between_disagreements_and_the_list_stays_one_card_long(app):
    at = app.run()
    text = " ".join(["Alice"] * 25)
    a = extract(at, text, {"Alice": None})
    b = extract(at, text, {"Bob": None})                                 # 25 disagreements, all "only A"
    review_pair(at, a, b)
    choice = "review-choice-%d-%d-0-%d"
    assert [r.key for r in at.radio if r.key.startswith("review-choice")] == [choice % (a, b, 0)]
    assert len(frame(at, "kept")) == 25                                  # one line each in the list
    at.radio(key=choice % (a, b, 0)).set_value("A").run()
    button(at, "Next undecided").click().run()
    at.radio(key=choice % (a, b, 1)).set_value("neither").run()
    button(at, "Next").click().run()
    assert at.radio(key=choice % (a, b, 2)).value is None
    button(at, "Previous").click().run()
    button(at, "Previous").click().run()
    assert at.radio(key=choice % (a, b, 0)).value == "A"
    assert list(frame(at, "kept")["kept"][:3]) == ["A's", "neither", ""]
    assert [t[0]["offset"] for t in at.session_state["gold_draft"]["tuples"]] == [[0, 5]]


def test_keep_all_of_a_or_of_b_decides_the_whole_document_at_once(app):
    at = app.run()
    a, b = two_runs(at)                                                  # A: Alice, Paris; B: Alice, Bob
    review_pair(at, a, b)
    assert spans(at) == ["Alice"]
    button(at, "Keep all of B (fakeie)").click().run()
    assert not at.exception and spans(at) == ["Alice", "Bob"]           # Bob kept, Paris (A's only) left out
    assert at.radio(key="review-choice-%d-%d-0-0" % (a, b)).value == "B"   # the open card shows it
    assert list(frame(at, "kept")["kept"]) == ["B's", "neither"]
    button(at, "Keep all of A (fakeie)").click().run()
    assert spans(at) == ["Alice", "Paris"]
    assert at.radio(key="review-choice-%d-%d-0-0" % (a, b)).value == "neither"
    button(at, "Clear the decisions").click().run()
    assert spans(at) == ["Alice"] and at.radio(key="review-choice-%d-%d-0-0" % (a, b)).value is None
    assert "2 disagreements undecided" in " ".join(c.value for c in at.caption)


def test_a_label_outside_the_label_set_is_no_type_row_and_is_shown_apart(app):
    from contracts.domain import Document, Result, Span
    from tests.storage.sample_runs import make_report
    at = app.run()
    store = state.store()
    text = "Alice met Bob."
    doc = Document("1", text, task="ext", labels=["person"])
    a = store.record_run(make_report([Result("1", [[Span("person", "Alice", (0, 5))]])], model="fakeie"), [doc], "ui")
    b = store.record_run(make_report([Result("1", [[Span("person", "Alice", (0, 5))], [Span("pet", "Bob", (10, 13))]])],
                                     model="fakegen"), [doc], "ui")
    review_pair(at, a, b)
    table = frame(at, "precision (exact)")
    assert list(table["type"]) == ["person", "(all types)"]             # "pet" is no type of this task
    overall = table.to_dict("records")[-1]
    assert (overall["A"], overall["B"], overall["precision (exact)"]) == (1, 2, 0.5)   # but it still counts
    notes = " ".join(c.value for c in at.caption)
    assert "Outside the label set" in notes and "B wrote “pet” ×1" in notes
    queue = frame(at, "disagreements")
    assert list(queue["disagreements"]) == [0] and list(queue["outside the label set"]) == [1]   # nothing to decide
    assert not any(r.key.startswith("review-choice") for r in at.radio)
    assert ">Bob</mark>" in "".join(h.value for h in at.get("html") if "B: " in h.value)


def test_a_rerun_applies_the_thresholds_its_run_recorded(app):
    at = app.run()
    store = state.store()
    weights, _ = state.weights_for("fakeie")
    store.save_thresholds("fakeie", weights, {"good": 0.9}, {}, "gold")
    at.switch_page("screens/extract.py").run()
    at.text_area(key="schema:fakeie").input(json.dumps({"good": None}))
    at.text_area(key="text:fakeie").input("[CLASSIFY]fine").run()
    at.toggle(key="thresholds-on:fakeie").set_value(True).run()
    button(at, "Run").click().run()
    strict = at.session_state["extract_run_id"]
    assert store.get_run(strict).items[0][1].tuples == []               # 0.75 < 0.9: the label is left out
    store.delete_thresholds("fakeie", weights)                          # the re-run uses the run's own record
    at.switch_page("screens/history.py").run()
    at.multiselect(key="history_selected").set_value([strict]).run()
    button(at, "Re-run").click().run()
    assert not at.exception and not at.error
    again = store.search_runs(limit=1)[0].id
    assert again != strict and store.get_run(again).settings["thresholds"] == {"good": 0.9}
    assert store.get_run(again).items[0][1].tuples == []
