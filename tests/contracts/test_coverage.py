"""Coverage as data: what a model did not read, and the result JSON that carries it."""
from contracts.domain import Result, unread, unread_chars


def test_unread_is_the_text_outside_the_coverage_that_is_not_whitespace():
    text = "  abc def\n ghi  "
    assert unread(text, [(2, 16)]) == []
    assert unread(text, [(6, 9)]) == [(0, 6), (9, 16)]
    assert unread_chars(text, [(6, 9)]) == 6                  # "abc " + "\n ghi  ": a, b, c, g, h, i
    assert unread(text, [(2, 5), (6, 14)]) == []              # a gap of one space is no cut
    assert unread(text, []) == [(0, 16)]


def test_a_model_that_does_not_report_coverage_has_no_unread_count():
    assert unread("text", None) == [] and unread_chars("text", None) is None


def test_coverage_round_trips_through_the_result_json():
    result = Result("1", coverage=[(3, 10)])
    assert result.to_json()["coverage"] == [[3, 10]]
    assert Result.from_json(result.to_json()).coverage == [(3, 10)]
    assert "coverage" not in Result("1").to_json()
