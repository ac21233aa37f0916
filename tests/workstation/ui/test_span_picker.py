"""The span picker's host side: UTF-16 <-> str offsets, its events read into picks, picks into draft actions."""
from __future__ import annotations

import pytest

from contracts.domain import Document, InputError
from contracts.names import Reads
from workstation.ui.gold_editor import pick_actions, shown_spans
from workstation.ui.span_picker import Shown, Utf16, read_pick, shortcuts

ASTRAL = "a😀b𠀀c"                       # an emoji and a CJK Extension B ideograph: two UTF-16 units each


def test_utf16_offsets_count_astral_characters_twice_and_map_back():
    index = Utf16(ASTRAL)
    assert index.length == 7 == len(ASTRAL.encode("utf-16-le")) // 2
    assert [index.to_js(i) for i in range(len(ASTRAL) + 1)] == [0, 1, 3, 4, 6, 7]
    assert [index.to_str(u) for u in (0, 1, 3, 4, 6, 7)] == [0, 1, 2, 3, 4, 5]
    # "b𠀀" as JavaScript slices it, [3, 6), is str [2, 4)
    start, end = index.to_str(3), index.to_str(6, end=True)
    assert ASTRAL[start:end] == "b𠀀"


def test_an_offset_inside_a_surrogate_pair_never_cuts_the_character():
    index = Utf16(ASTRAL)
    assert index.to_str(2) == 1                  # a start inside 😀 moves to its start
    assert index.to_str(2, end=True) == 2        # an end inside it moves past it
    assert ASTRAL[index.to_str(2):index.to_str(5, end=True)] == "😀b𠀀"


def test_a_text_without_astral_characters_keeps_its_offsets():
    index = Utf16("张三在北京")
    assert (index.length, index.to_js(5), index.to_str(3), index.to_str(3, end=True)) == (5, 5, 3, 3)


@pytest.mark.parametrize("unit", [-1, 8, "3", None, True, 2.0])
def test_an_offset_outside_the_text_or_not_a_number_is_refused(unit):
    with pytest.raises(InputError, match="outside the text"):
        Utf16(ASTRAL).to_str(unit)


def test_a_mouse_selection_becomes_a_pick_in_str_offsets():
    text = "😀张三见到了李四"
    pick = read_pick({"id": "e1", "op": "add", "type": "人物", "start": 7, "end": 9}, text, [], ["人物"])
    assert (pick.op, pick.type, text[pick.start:pick.end]) == ("add", "人物", "李四")


def test_a_pick_of_a_type_the_document_does_not_have_or_a_gone_span_is_refused():
    with pytest.raises(InputError, match="not one of this document's types"):
        read_pick({"id": "e1", "op": "add", "type": "<b>x</b>", "start": 0, "end": 1}, "abc", [], ["人物"])
    with pytest.raises(InputError, match="no longer in the draft"):
        read_pick({"id": "e2", "op": "remove", "span": 3}, "abc", [Shown(0, 0, "人物", 0, 1)], ["人物"])
    with pytest.raises(InputError, match="the selection is empty"):
        read_pick({"id": "e3", "op": "add", "type": "人物", "start": 2, "end": 2}, "abc", [], ["人物"])
    assert read_pick(None, "abc", [], ["人物"]) is None                      # no event yet


def test_the_event_already_applied_is_no_pick_even_when_its_span_is_gone():
    # The last of two spans removed: the component still returns that event on the next rerun.
    event = {"id": "r1", "op": "remove", "span": 1}
    left = [Shown(0, 0, "人物", 0, 1)]
    assert read_pick(event, "abc", left, ["人物"], applied="r1") is None
    with pytest.raises(InputError):
        read_pick(event, "abc", left, ["人物"], applied="r0")


def test_shortcuts_are_numbers_then_free_first_letters():
    types = ["PER", "place", "人物"] + [f"t{n}" for n in range(7)] + ["Org", "other"]
    keys = shortcuts(types)
    assert keys[:3] == [["1", "p"], ["2"], ["3"]]           # "place" finds p taken; 人物 has no a-z letter
    assert keys[3] == ["4", "t"] and keys[9] == []         # the tenth type: no number, its letter taken
    assert keys[10] == ["o"] and keys[11] == []


DOC = Document("1", "Alice works at Acme. Alice", {"Alice": {"employer(Acme)": None}, "Acme": None})


def test_picks_become_draft_actions_and_a_span_already_there_is_not_added_twice():
    tuples = [[{"type": "Alice", "span": "Alice", "offset": [0, 5]},
               {"type": "employer(Acme)", "span": "Acme", "offset": [15, 19]}]]
    shown = shown_spans(DOC.text, tuples)
    assert [(s.tuple, s.element, s.start) for s in shown] == [(0, 0, 0), (0, 1, 15)]
    add = read_pick({"id": "a", "op": "add", "type": "Alice", "start": 21, "end": 26}, DOC.text, shown,
                    ["Alice", "Acme"])
    assert pick_actions(add, DOC, tuples, Reads.SCHEMA) == (
        [("add", [{"type": "Alice", "span": "Alice", "offset": [21, 26]}])], None)
    again = tuples + [[{"type": "Alice", "span": "Alice", "offset": [21, 26]}]]
    actions, refused = pick_actions(add, DOC, again, Reads.SCHEMA)
    assert actions == [] and "already in the draft" in refused

    remove = read_pick({"id": "r", "op": "remove", "span": 1}, DOC.text, shown, ["Alice", "Acme"])
    assert pick_actions(remove, DOC, tuples, Reads.SCHEMA) == ([("remove-element", 0, 1)], None)
    retype = read_pick({"id": "t", "op": "retype", "span": 1, "type": "Acme"}, DOC.text, shown, ["Alice", "Acme"])
    actions, refused = pick_actions(retype, DOC, tuples, Reads.SCHEMA)     # an argument keeps its schema level
    assert actions == [] and "the schema allows employer(Acme)" in refused
    head = read_pick({"id": "h", "op": "retype", "span": 0, "type": "Acme"}, DOC.text, shown, ["Alice", "Acme"])
    assert pick_actions(head, DOC, tuples, Reads.SCHEMA) == ([("set", 0, 0, {"type": "Acme"})], None)


def test_the_page_never_parses_text_as_markup():
    """User text and type names reach the picker's page as text nodes and attribute values only."""
    from pathlib import Path

    import workstation.ui.span_picker as picker
    script = (Path(picker.__file__).parent / "frontend" / "span_picker.js").read_text("utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink
    assert "textContent" in script and "createTextNode" in script
