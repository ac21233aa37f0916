"""Prompt strings byte-exact to the reference (docs/models/seqgpt.md §1.1–§1.2), label chunking, input validation."""
import math

import numpy as np
import pytest

from contracts.domain import Document, InputError
from plugins.seqgpt.prompting import chunk_labels, normalise_labels, prompts_for, validate


def doc(text, task, labels, line=7):
    return Document("d", text, task=task, labels=labels, line=line)


@pytest.mark.parametrize("text, task, labels, expected", [
    ("The Moon's orbit around Earth has", "cls", ["pos", "neg"],
     "输入: The Moon's orbit around Earth has\n分类: pos，neg\n输出: [GEN]"),
    ("李老板卖鱼，卖了三十框鱼\t李老板赚翻了", "nli", ["entailment", "contradiction"],
     "输入: 李老板卖鱼，卖了三十框鱼\t李老板赚翻了\n分类: entailment，contradiction\n输出: [GEN]"),
    ("The smooth Borealis basin in the Northern Hemisphere covers 40%", "ext", ["百分比", "方向"],
     "输入: The smooth Borealis basin in the Northern Hemisphere covers 40%\n抽取: 百分比，方向\n输出: [GEN]"),
    ("  MELBOURNE 1996-12-06 \n", "ext", ["LOC", "PER", "ORG", "MISC"],
     "输入: MELBOURNE 1996-12-06\n抽取: LOC，PER，ORG，MISC\n输出: [GEN]"),
    ("杭州欢迎你。", "ext", ["地名"], "输入: 杭州欢迎你。\n抽取: 地名\n输出: [GEN]"),
])
def test_prompt_strings_are_byte_exact_to_the_reference(text, task, labels, expected):
    prompts = prompts_for(doc(text, task, labels))
    assert [p.text.encode() for p in prompts] == [expected.encode()]


def test_seven_extraction_labels_make_two_prompts_of_four_and_three():
    text = "童装红蜻蜓团体温州儿童用品有限公司是红蜻蜓团体旗下全资子公司，创立于2003年中温州和红蜻蜓的关系是什么？"
    labels = ["饰演", "祖籍", "毕业院校", "创始人", "首都", "代言人", "总部地点"]
    prompts = prompts_for(doc(text, "ext", labels))
    assert [p.text for p in prompts] == [
        f"输入: {text}\n抽取: 饰演，祖籍，毕业院校，创始人\n输出: [GEN]",
        f"输入: {text}\n抽取: 首都，代言人，总部地点\n输出: [GEN]",
    ]
    assert [p.labels for p in prompts] == [tuple(labels[:4]), tuple(labels[4:])]


def test_classification_keeps_every_label_in_one_prompt():
    labels = [f"L{i}" for i in range(9)]
    assert len(prompts_for(doc("x", "cls", labels))) == 1


@pytest.mark.parametrize("n", range(1, 31))
def test_label_chunks_follow_numpy_array_split(n):
    labels = [f"l{i}" for i in range(n)]
    expected = [list(c) for c in np.array_split(labels, math.ceil(n / 6))]
    assert chunk_labels(labels) == expected
    assert all(len(c) <= 6 for c in chunk_labels(labels))


def test_chunk_sizes_for_thirteen_labels():
    assert [len(c) for c in chunk_labels([str(i) for i in range(13)])] == [5, 4, 4]


def test_ascii_commas_become_fullwidth_separators_as_in_the_reference():
    assert normalise_labels(["LOC,PER", " ORG "]) == ["LOC", "PER", "ORG"]
    assert normalise_labels(["LOC,PER，ORG"]) == ["LOC", "PER", "ORG"]
    assert prompts_for(doc("t", "cls", ["a,b"]))[0].text == "输入: t\n分类: a，b\n输出: [GEN]"


def test_english_markers_are_an_opt_in():
    prompt = prompts_for(doc("t", "ext", ["LOC"]), markers="en")[0].text
    assert prompt == "Input: t\nExtract: LOC\nOutput: [GEN]"
    with pytest.raises(InputError, match="markers"):
        prompts_for(doc("t", "ext", ["LOC"]), markers="fr")


def test_empty_text_gives_no_prompt_and_is_not_an_error():
    validate(doc("   ", "ext", ["LOC"]))
    assert prompts_for(doc("   ", "ext", ["LOC"])) == []


@pytest.mark.parametrize("task, labels, text, message", [
    ("ext", [], "t", "non-empty list"),
    ("ext", None, "t", "non-empty list"),
    ("ext", ["LOC", 3], "t", "every label must be a string, but one is a number: 3"),
    ("ext", ["LOC", None], "t", "one is null: null"),
    ("ext", ["LO\nC"], "t", "line break"),
    ("ext", ["time: start"], "t", "colon"),
    ("ext", ["时间：开始"], "t", "colon"),
    ("ext", ["LOC", " "], "t", "empty"),
    ("ext", ["LOC,"], "t", "empty"),
    ("ext", ["LOC", "LOC"], "t", "twice"),
    ("summarise", ["LOC"], "t", "unknown task"),
    (None, ["LOC"], "t", "\"task\" is missing"),
    ("ext", ["LOC"], None, "must be a string"),
    ("ext", ["LOC"], 12, "must be a string"),
    ("nli", ["entailment"], "no tab here", "TAB"),
])
def test_bad_input_is_an_input_error_naming_the_line(task, labels, text, message):
    with pytest.raises(InputError, match=message) as e:
        validate(doc(text, task, labels, line=42))
    assert e.value.line == 42
    assert str(e.value).startswith("line 42:")


def test_label_chunk_size_must_be_positive():
    with pytest.raises(InputError):
        prompts_for(doc("t", "ext", ["a"]), label_batch=0)
