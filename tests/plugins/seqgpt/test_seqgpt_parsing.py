"""The tolerant output parser (docs/models/seqgpt.md §1.5) and grounding of spans to character offsets."""
from contracts.domain import Span
from plugins.seqgpt.parsing import UNPARSED, Mention, ground, parse_classification, parse_extraction


def test_one_label_line_with_one_span():
    assert parse_extraction("LOC: MELBOURNE", ["LOC", "PER"]) == ([Mention("LOC", "MELBOURNE")], [])


def test_none_values_give_no_span_and_several_spans_are_split():
    raw = "时间: None\n胜者: 天津天海  天津泰达\n败者: None\n赛事名称: 德比战"
    mentions, warnings = parse_extraction(raw, ["时间", "胜者", "败者", "赛事名称"])
    assert mentions == [Mention("胜者", "天津天海"), Mention("胜者", "天津泰达"), Mention("赛事名称", "德比战")]
    assert warnings == []


def test_spans_split_on_fullwidth_and_ascii_commas_but_not_inside_numbers():
    mentions, _ = parse_extraction("城市: 上海，北京\nORG: Microsoft, OpenAI\nprice: 1,299 dollars",
                                   ["城市", "ORG", "price"])
    assert [m.span for m in mentions] == ["上海", "北京", "Microsoft", "OpenAI", "1,299 dollars"]


def test_fullwidth_colon_blank_lines_and_label_case_are_tolerated():
    mentions, warnings = parse_extraction("\n loc： Hawaii \n\nper:Barack Obama\n", ["LOC", "PER"])
    assert mentions == [Mention("LOC", "Hawaii"), Mention("PER", "Barack Obama")]
    assert warnings == []


def test_unknown_label_is_kept_as_written_with_a_warning():
    mentions, warnings = parse_extraction("LOC: Paris\nCITY: Paris", ["LOC"])
    assert mentions == [Mention("LOC", "Paris"), Mention("CITY", "Paris")]
    assert len(warnings) == 1 and "'CITY'" in warnings[0]


def test_a_line_that_is_not_label_colon_span_is_kept_whole():
    mentions, warnings = parse_extraction("LOC\nsomething else", ["LOC"])
    assert mentions == [Mention(UNPARSED, "something else")]
    assert "something else" in warnings[0]


def test_empty_output_gives_nothing():
    assert parse_extraction("", ["LOC"]) == ([], [])
    assert parse_classification("", ["a"]) == ([], [])


def test_classification_single_multi_none_and_unknown():
    labels = ["CheckBalance", "TransferMoney"]
    assert parse_classification("CheckBalance", labels) == (["CheckBalance"], [])
    assert parse_classification(" transfermoney，CheckBalance,CheckBalance", labels)[0] == \
        ["TransferMoney", "CheckBalance"]
    assert parse_classification("None", labels) == ([], [])
    chosen, warnings = parse_classification("Refund", labels)
    assert chosen == ["Refund"] and "'Refund'" in warnings[0]


def test_grounding_finds_character_offsets():
    text = "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。"
    spans, warnings = ground(text, [Mention("地理位置", "西班牙"), Mention("组织机构", "北大西洋议会")])
    assert spans == [Span("地理位置", "西班牙", (14, 17), grounded=True),
                     Span("组织机构", "北大西洋议会", (0, 6), grounded=True)]
    assert all(text[s.offset[0]:s.offset[1]] == s.span for s in spans)
    assert warnings == []


def test_a_span_not_in_the_text_is_kept_ungrounded():
    spans, _ = ground("MELBOURNE 1996-12-06", [Mention("LOC", "Sydney")])
    assert spans == [Span("LOC", "Sydney", None, grounded=False)]


def test_repeated_mentions_take_successive_occurrences_left_to_right():
    text = "张三和李四见面，张三说好。"
    spans, warnings = ground(text, [Mention("PER", "张三"), Mention("PER", "李四"), Mention("PER", "张三")])
    assert [s.offset for s in spans] == [(0, 2), (3, 5), (8, 10)]
    assert warnings == []


def test_the_same_string_under_two_labels_grounds_to_its_first_occurrence_for_each():
    spans, _ = ground("苹果 apple 苹果", [Mention("水果", "苹果"), Mention("公司", "苹果")])
    assert [s.offset for s in spans] == [(0, 2), (0, 2)]


def test_a_mention_repeated_beyond_its_occurrences_is_kept_ungrounded():
    spans, warnings = ground("北京欢迎你", [Mention("LOC", "北京"), Mention("LOC", "北京")])
    assert spans == [Span("LOC", "北京", (0, 2), grounded=True), Span("LOC", "北京", None, grounded=False)]
    assert "repeated" in warnings[0]


def test_overlapping_occurrences_are_not_claimed_twice():
    spans, _ = ground("aaa", [Mention("X", "aa"), Mention("X", "aa")])
    assert [s.offset for s in spans] == [(0, 2), None]
