"""The gazetteer's matching: dictionaries, patterns, overlaps, word boundaries, offsets, schemas, options."""
from __future__ import annotations

import pytest

from contracts import Document, InputError, WeightsError
from contracts.testing import check_result

ALL = dict.fromkeys(["date", "money", "phone", "email", "url", "id_number", "ipv4", "country", "province", "city",
                     "organization"])


def spans(model, text, schema=None, **options):
    """(type, span, offset) of every extraction, after the host's checks of the result (offsets, coverage)."""
    document = Document("d", text, schema or ALL)
    result = next(model.extract([document], **options))
    check_result(document, result)
    assert all(len(t) == 1 for t in result.tuples) and all(s.confidence is None for t in result.tuples for s in t)
    assert result.coverage == [(0, len(text))]
    return [(s.type, s.span, s.offset) for t in result.tuples for s in t]


# ---- Chinese resident ID numbers -------------------------------------------------------------------------

@pytest.mark.parametrize("number", ["11010519491231002X", "11010519491231002x", "440304199001011233",
                                    "310115198512120022"])
def test_id_numbers_with_a_valid_check_character_and_birth_date_are_found(gazetteer, number):
    from iew_gazetteer.patterns import valid_id_number
    assert valid_id_number(number)
    assert spans(gazetteer, f"证件号{number}。", {"身份证号": None}) == [("身份证号", number, (3, 21))]


@pytest.mark.parametrize("number, why", [("110105194912310021", "check character"),
                                         ("440304199002301236", "30 February"),
                                         ("010304199001011233", "region code starting with 0")])
def test_id_numbers_failing_the_checksum_or_the_calendar_are_not_hits(gazetteer, number, why):
    from iew_gazetteer.patterns import id_check_character, valid_id_number
    assert not valid_id_number(number), why
    assert spans(gazetteer, f"证件号{number}。") == []
    assert id_check_character("11010519491231002") == "X"


def test_an_id_number_does_not_also_yield_the_phone_number_or_date_inside_it(gazetteer):
    assert spans(gazetteer, "号码 440304199001011233 和 13812345678") == [
        ("id_number", "440304199001011233", (3, 21)), ("phone", "13812345678", (24, 35))]


# ---- overlaps ---------------------------------------------------------------------------------------------

def test_the_leftmost_longest_hit_wins_across_types_before_the_schema_is_applied(gazetteer):
    text = "北京大学在北京"
    assert spans(gazetteer, text, {"组织机构": None, "城市": None}) == [
        ("组织机构", "北京大学", (0, 4)), ("城市", "北京", (5, 7))]
    # Asking for cities only: 北京大学 is still an organisation, so no city is found inside it.
    assert spans(gazetteer, text, {"城市": None}) == [("城市", "北京", (5, 7))]


def test_an_email_address_hides_the_company_name_inside_it(gazetteer):
    assert spans(gazetteer, "mail info@alibaba.com, Alibaba") == [
        ("email", "info@alibaba.com", (5, 21)), ("organization", "Alibaba", (23, 30))]


def test_one_span_of_two_types_is_one_tuple_per_asked_type_and_a_composite_type_is_one(gazetteer):
    text = "在北京市开会"
    assert spans(gazetteer, text, {"省份": None, "城市": None}) == [("省份", "北京市", (1, 4)), ("城市", "北京市", (1, 4))]
    assert spans(gazetteer, text, {"地理位置": None}) == [("地理位置", "北京市", (1, 4))]
    assert spans(gazetteer, "中国北京市", {"location": None, "country": None}) == [
        ("location", "中国", (0, 2)), ("country", "中国", (0, 2)), ("location", "北京市", (2, 5))]


# ---- English word boundaries and case ------------------------------------------------------------------------

def test_english_entries_match_on_word_boundaries_only(gazetteer):
    assert spans(gazetteer, "NATO, NATOS and SENATOR; IBM3 or IBM.", {"organization": None}) == [
        ("organization", "NATO", (0, 4)), ("organization", "IBM", (33, 36))]
    # A CJK neighbour is no word: Chinese text has no spaces between words.
    assert spans(gazetteer, "他在Paris工作", {"city": None}) == [("city", "Paris", (2, 7))]
    assert spans(gazetteer, "ＡParis", {"city": None}) == []            # a full-width letter is a letter


def test_case_matters_unless_the_ignore_case_option_is_on(gazetteer):
    assert spans(gazetteer, "the nato summit in paris", {"organization": None, "city": None}) == []
    assert spans(gazetteer, "the nato summit in paris", {"organization": None, "city": None}, ignore_case=True) == [
        ("organization", "nato", (4, 8)), ("city", "paris", (19, 24))]


def test_schema_keys_name_types_in_chinese_or_english_in_any_case(gazetteer):
    text = "2024年3月5日"
    for key in ("日期", "date", "Date", "DATE"):
        assert spans(gazetteer, text, {key: None}) == [(key, text, (0, 9))]


# ---- offsets ----------------------------------------------------------------------------------------------------

def test_offsets_are_python_string_indices_with_astral_characters_and_emoji(gazetteer):
    text = "𠀀北京𠀀 😀👍🏽Paris😀 call +86 138 1234 5678 on 2024-03-05"
    assert spans(gazetteer, text) == [
        ("province", "北京", (1, 3)), ("city", "北京", (1, 3)), ("city", "Paris", (8, 13)),
        ("phone", "+86 138 1234 5678", (20, 37)), ("date", "2024-03-05", (41, 51))]


# ---- patterns ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, found", [
    ("2024年3月5日", ["2024年3月5日"]), ("２０２４年３月５日", ["２０２４年３月５日"]), ("3月5号开会", ["3月5号"]),
    ("2024年3月", ["2024年3月"]), ("2024-03-05 2024/3/5", ["2024-03-05", "2024/3/5"]),
    ("March 5, 2024", ["March 5, 2024"]), ("5 March 2024", ["5 March 2024"]), ("Sept. 3rd", ["Sept. 3rd"]),
    ("2024年2月29日", ["2024年2月29日"]), ("2023年2月29日 2024年13月1日 Mar 35 2024-02-30", []), ("3月份", []),
])
def test_dates(gazetteer, text, found):
    assert [s for _, s, _ in spans(gazetteer, text, {"date": None})] == found


@pytest.mark.parametrize("text, found", [
    ("€30, £5, HK$100, ¥1,200.50", ["€30", "£5", "HK$100", "¥1,200.50"]),
    ("$5 million, but $5 mice", ["$5 million", "$5"]), ("USD 1,000 and 100 USD", ["USD 1,000", "100 USD"]),
    ("营收3.5亿元，订单100万美元，人民币5000元", ["3.5亿元", "100万美元", "人民币5000元"]),
    ("三十万元", ["三十万元"]), ("3块蛋糕，二元一次方程", []), ("20 dollars", ["20 dollars"]),
])
def test_amounts_of_money(gazetteer, text, found):
    assert [s for _, s, _ in spans(gazetteer, text, {"金额": None})] == found


@pytest.mark.parametrize("text, found", [
    ("手机13812345678，或138-1234-5678", ["13812345678", "138-1234-5678"]),
    ("座机010-62751234、(010) 62751234、0755-1234567", ["010-62751234", "(010) 62751234", "0755-1234567"]),
    ("+86 13812345678 2024", ["+86 13812345678"]), ("+1 (415) 555-0132", ["+1 (415) 555-0132"]),
    ("400-810-8888", ["400-810-8888"]), ("12812345678 or 1381234567", []),
])
def test_phone_numbers(gazetteer, text, found):
    assert [s for _, s, _ in spans(gazetteer, text, {"电话": None})] == found


def test_emails_urls_and_ipv4_addresses(gazetteer):
    text = ("Write to a.b+c@mail.example.co.uk. See https://example.com/a?b=1. or www.example.org/x), "
            "IP 10.0.0.1, not 192.168.1.256 nor 1.2.3.4.5")
    assert [(t, s) for t, s, _ in spans(gazetteer, text)] == [
        ("email", "a.b+c@mail.example.co.uk"), ("url", "https://example.com/a?b=1"), ("url", "www.example.org/x"),
        ("ipv4", "10.0.0.1")]


# ---- schemas, options, dictionaries ------------------------------------------------------------------------------

@pytest.mark.parametrize("schema, message", [
    (None, "no schema"), ({}, "non-empty JSON object"), (["date"], "gives a list of labels as its \"schema\""),
    ({"date": {"x": None}}, "nested value"), ({"": None}, "is not a name"),
])
def test_schemas_the_gazetteer_cannot_read_are_refused_with_their_line(schema, message):
    from iew_gazetteer.family import Gazetteer
    with pytest.raises(InputError, match=f"line 3: .*{message}"):
        Gazetteer().check(Document("d", "text", schema, line=3))


def test_an_unknown_type_is_refused_naming_the_known_ones(gazetteer):
    with pytest.raises(InputError) as e:
        spans(gazetteer, "text", {"date": None, "person": None, "人物": None})
    assert "unknown type(s) 'person', '人物'" in str(e.value)
    assert "日期/date" in str(e.value) and "地理位置/location" in str(e.value) and "身份证号/id_number" in str(e.value)


def test_unknown_options_and_a_reduced_dtype_are_refused(gazetteer):
    with pytest.raises(InputError, match="no option.*num_beams"):
        spans(gazetteer, "text", num_beams=2)
    with pytest.raises(InputError, match="dtype 'bf16' does not apply"):
        gazetteer.set_dtype("bf16")


def test_a_dictionary_folder_adds_types_and_entries(tmp_path):
    from iew_gazetteer.family import Gazetteer
    (tmp_path / "产品.txt").write_text("\ufeff# our products\n\n  星火一号  \nStarfire\n", "utf-8")   # a BOM too
    (tmp_path / "City.txt").write_text("雄安\n", "utf-8")           # a built-in type's name: adds to 城市
    (tmp_path / "README.md").write_text("not a dictionary", "utf-8")
    model = Gazetteer().load(tmp_path)
    text = "星火一号和Starfire在雄安与北京发布"
    assert spans(model, text, {"产品": None, "城市": None}) == [
        ("产品", "星火一号", (0, 4)), ("产品", "Starfire", (5, 13)), ("城市", "雄安", (14, 16)), ("城市", "北京", (17, 19))]
    assert spans(model, text, {"产品": None, "城市": None}, builtin_dictionaries=False) == [
        ("产品", "星火一号", (0, 4)), ("产品", "Starfire", (5, 13)), ("城市", "雄安", (14, 16))]
    assert model.describe()["user_dictionaries"] == {"City": "city", "产品": "产品"}


def test_unreadable_dictionaries_are_weights_errors_naming_the_file_and_line(tmp_path):
    from iew_gazetteer.family import Gazetteer
    (tmp_path / "bad.txt").write_bytes("好\n坏\n".encode("utf-8") + "第三行".encode("gbk"))
    with pytest.raises(WeightsError, match=r"bad\.txt: line 3 is not UTF-8"):
        Gazetteer().load(tmp_path)
    with pytest.raises(WeightsError, match="is a file"):
        Gazetteer().load(tmp_path / "bad.txt")


def test_no_optimization_applies_and_a_run_with_none_works(gazetteer_plugin, gazetteer):
    from workstation import engine, plugins
    verdicts = {name: opt.applies_to(gazetteer) for name, opt in plugins.optimizations().items()}
    assert verdicts and not any(ok for ok, _ in verdicts.values()), verdicts
    assert engine.applicable(gazetteer, list(verdicts)) == []
    assert engine.apply_optimizations(gazetteer, []) == {}
    with pytest.raises(InputError, match="does not apply to gazetteer"):
        engine.apply_optimizations(gazetteer, ["sparse-mask"])
    report = engine.run(gazetteer, [Document("1", "西班牙巴塞罗那", {"城市": None})])
    assert [[s.span for s in t] for t in report.results[0].tuples] == [["巴塞罗那"]]
    assert (report.demo, report.device, report.attention, report.optimizations) == (False, "cpu", "none", {})
