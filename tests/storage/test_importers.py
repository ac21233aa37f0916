"""Importing gold datasets: our JSONL, Label Studio and doccano exports; round trips; broken files."""
from __future__ import annotations

import json

import pytest

from contracts.domain import Document, InputError, Result, Span
from tests.storage.sample_runs import make_report, ner_run
from workstation import exports
from workstation import importers as im

TEXT = "马云创办了阿里巴巴。7月28日，天津泰达在德比战中以0-1负于天津天海。🙂张三在北京"
SCHEMA = {"人物": None, "组织机构": {"创始人(人物)": None}, "胜负(事件触发词)": {"时间": None, "败者": None},
          "地理位置": None}


def spans(*items):
    return [Span(t, TEXT[a:b], (a, b), 0.9) for t, a, b in items]


def at(word: str, nth: int = 0) -> tuple[int, int]:
    start = -1
    for _ in range(nth + 1):
        start = TEXT.index(word, start + 1)
    return start, start + len(word)


def rich_result() -> Result:
    """Entities, a relation (head first) and an event with two arguments, after an emoji."""
    return Result("doc-1", [
        spans(("人物", *at("马云"))),
        spans(("组织机构", *at("阿里巴巴")), ("创始人(人物)", *at("马云"))),
        spans(("胜负(事件触发词)", *at("负")), ("时间", *at("7月28日"))),
        spans(("胜负(事件触发词)", *at("负")), ("败者", *at("天津泰达"))),
        spans(("地理位置", *at("北京"))),
    ])


def gold_of(result: Result) -> list:
    return [[{"type": s.type, "span": s.span, "offset": list(s.offset)} for s in t] for t in result.tuples]


def rex_validate(document, output):
    from plugins.rexuninlu.family import RexUniNLU
    return RexUniNLU().validate_gold(document, output)


@pytest.fixture
def rich_run(store):
    return store, store.record_run(make_report([rich_result()]), [Document("doc-1", TEXT, SCHEMA)], "ui")


@pytest.mark.parametrize("fmt", ["label-studio", "doccano"])
def test_exporting_a_run_and_importing_the_file_gives_back_its_tuples(rich_run, tmp_path, fmt):
    store, run_id = rich_run
    path = tmp_path / f"export.{fmt}"
    exports.export_runs(store, [run_id], fmt, path)
    parsed = im.parse(path.read_bytes(), path.name)
    assert parsed.format == fmt
    [example] = parsed.examples
    assert (example.doc_id, example.text) == ("doc-1", TEXT)
    assert example.output == gold_of(rich_result())                   # same tuples, same order
    assert parsed.suggested_schema() == {"人物": None, "组织机构": {"创始人(人物)": None},
                                         "胜负(事件触发词)": {"时间": None, "败者": None}, "地理位置": None}
    prepared = im.prepare(parsed, rex_validate, schema=parsed.suggested_schema())
    assert prepared.examples[0][1] == gold_of(rich_result())


def test_the_awkward_run_round_trips_its_placed_spans(recorded, tmp_path):
    store, run_id = recorded
    for fmt in ("label-studio", "doccano"):
        path = tmp_path / f"awkward-{fmt}"
        exports.export_runs(store, [run_id], fmt, path)
        first, second = im.parse(path.read_bytes(), fmt=fmt).examples
        _, results = ner_run()
        assert first.output == gold_of(results[0])
        # the ungrounded '七' is not in the export, so its tuple comes back as the placed span alone
        assert second.output == [[{"type": "公式", "span": "=SUM(A1:A9)", "offset": [0, 11]}],
                                 [{"type": "数字", "span": "-5", "offset": [15, 17]}]]


def test_our_jsonl_reads_schema_and_labels_lines():
    lines = [{"id": "a", "text": "张三在北京", "schema": {"人物": None},
              "output": [[{"type": "人物", "span": "张三", "offset": [0, 2], "confidence": 0.5}]]},
             {"id": "b", "text": "Alice met Bob.", "task": "ext", "labels": ["person"],
              "output": [[{"type": "person", "span": "Alice", "offset": [0, 5]}]]}]
    parsed = im.parse("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n\n")
    assert parsed.format == "jsonl" and parsed.needs_schema() and parsed.needs_labels()
    a, b = parsed.examples
    assert a.schema == {"人物": None} and a.output == [[{"type": "人物", "span": "张三", "offset": [0, 2]}]]
    assert (b.task, b.labels, b.line) == ("ext", ["person"], 2)


def test_a_line_separator_inside_a_json_string_does_not_split_the_line():
    text = "第一句\u2028第二句里有张三"
    line = {"id": "a", "text": text, "schema": {"人物": None},
            "output": [[{"type": "人物", "span": "张三", "offset": [9, 11]}]]}
    parsed = im.parse(json.dumps(line, ensure_ascii=False) + "\n", fmt="jsonl")
    assert [e.text for e in parsed.examples] == [text]


def label_studio_task(text, result, key="annotations", **extra):
    return {"id": 7, "data": {"text": text}, key: [{"result": result, **extra}]}


def region(rid, start, end, label, text=None):
    value = {"start": start, "end": end, "labels": [label]}
    if text is not None:
        value["text"] = text
    return {"id": rid, "from_name": "label", "to_name": "text", "type": "labels", "value": value}


def test_label_studio_project_labels_become_rexuninlu_relation_types():
    text = "张三在北京工作"
    task = label_studio_task(text, [region("a", 0, 2, "人物", "张三"), region("b", 3, 5, "地理位置", "北京"),
                                    {"type": "relation", "from_id": "a", "to_id": "b", "labels": ["工作地点"]}])
    parsed = im.parse(json.dumps([task]))
    assert parsed.examples[0].output == [
        [{"type": "人物", "span": "张三", "offset": [0, 2]}, {"type": "工作地点(地理位置)", "span": "北京", "offset": [3, 5]}],
        [{"type": "地理位置", "span": "北京", "offset": [3, 5]}]]           # the tail is an entity of its own too
    assert parsed.suggested_schema() == {"人物": {"工作地点(地理位置)": None}, "地理位置": None}
    im.prepare(parsed, rex_validate, schema=parsed.suggested_schema())
    as_roles = im.parse(json.dumps([task]), relation_style="label").examples[0].output
    assert as_roles[0][1]["type"] == "工作地点"


def test_label_studio_predictions_are_used_only_without_annotations_and_the_notes_say_so():
    text = "Alice met Bob"
    tasks = [label_studio_task(text, [region("a", 0, 5, "person")]),
             label_studio_task(text, [region("b", 10, 13, "person")], key="predictions"),
             {"id": 9, "data": {"text": text}, "annotations": [], "predictions": []},
             {"id": 10, "data": {"text": text}, "annotations": [{"was_cancelled": True, "result": []}]}]
    parsed = im.parse(json.dumps(tasks))
    assert [e.output[0][0]["span"] for e in parsed.examples] == ["Alice", "Bob"]
    assert (parsed.annotations_used, parsed.predictions_used) == (1, 1)
    assert "1 from predictions" in parsed.summary()
    assert any("predictions were used" in n for n in parsed.notes)
    assert any("2 task(s) without annotations" in n for n in parsed.notes)


def test_label_studio_utf16_offsets_after_an_emoji_are_converted():
    text = "🙂 Alice"
    parsed = im.parse(json.dumps([label_studio_task(text, [region("a", 3, 8, "person", "Alice")])]))
    assert parsed.examples[0].output == [[{"type": "person", "span": "Alice", "offset": [2, 7]}]]


def test_doccano_sequence_labelling_relations_and_classification_shapes():
    seq = {"id": 1, "text": "Alice met Bob", "label": [[0, 5, "person"], [10, 13, "person"]]}
    rel = {"id": 2, "text": "张三在北京工作",
           "entities": [{"id": 11, "label": "人物", "start_offset": 0, "end_offset": 2},
                        {"id": 12, "label": "地理位置", "start_offset": 3, "end_offset": 5}],
           "relations": [{"id": 1, "from_id": 11, "to_id": 12, "type": "工作地点"}]}
    cls = {"id": 3, "text": "great phone", "label": ["positive"]}
    parsed = im.parse("\n".join(json.dumps(x, ensure_ascii=False) for x in (seq, rel, cls)))
    assert parsed.format == "doccano"
    a, b, c = parsed.examples
    assert [t[0]["span"] for t in a.output] == ["Alice", "Bob"]
    assert b.output[0][1] == {"type": "工作地点(地理位置)", "span": "北京", "offset": [3, 5]}
    assert c.output == [[{"type": "positive", "span": "positive", "offset": None}]]
    assert parsed.suggested_labels() == ["person", "人物", "工作地点(地理位置)", "地理位置", "positive"]


@pytest.mark.parametrize("content, fmt, message", [
    ('{"text": "ab", "output": [[{"type": "x", "span": "a", "offset": [0, 1]}]]}\n{"text": "ab", "output": [[{"ty',
     None, "line 2: malformed JSON"),
    ('{"text": "ab", "output": [[{"type": "x", "span": "a", "offset": [0, 9]}]]}', None,
     "line 1, output tuple 1: offset [0, 9] is not inside the text"),
    ('{"text": "ab"}', "jsonl", "line 1: each line needs \"text\" and \"output\""),
    ('[{"id": 4, "data": {"txt": "x"}, "annotations": []}]', None, "task 1 (id 4): no data.text"),
    ('[{"data": {"text": "Alice"}, "annotations": [{"result": [{"id": "r", "type": "labels", '
     '"value": {"start": 0, "end": 3, "text": "Alice", "labels": ["p"]}}]}]}]', None,
     "task 1, result 1 (id r): offsets [0, 3) cover 'Ali' but the region says 'Alice'"),
    ('[{"data": {"text": "Alice"}, "annotations": [{"result": [{"type": "relation", "from_id": "x", "to_id": "y"}]}]}]',
     None, "task 1: a relation's from region 'x' is not among the labelled spans"),
    ('{"text": "Alice", "label": [[0, 9, "p"]]}', None, "line 1, label 1: offset [0, 9] is not inside the text"),
    ('{"text": "Alice", "entities": [{"id": 1, "label": "p", "start_offset": 4, "end_offset": 0}]}', None,
     "line 1, entity 1: offset [4, 0] is an empty or reversed span"),
    ('{"text": "ab", "output": [[{"type": "x", "span": "", "offset": [1, 0]}]]}', None,
     "line 1, output tuple 1: offset [1, 0] is an empty or reversed span"),
    ('{"text": "ab", "output": [[{"type": "x", "span": "b", "offset": [0, 1]}]]}', None,
     "line 1: output tuple 1: offset [0, 1] covers 'a', not the span 'b'"),
    ('[{"data": {"text": "Alice"}, "annotations": [{"result": [{"id": "r", "type": "labels", '
     '"value": {"start": 5, "end": 0, "labels": ["p"]}}]}]}]', None,
     "task 1, result 1 (id r): offsets [5, 0) are an empty or reversed span"),
    ('{"text": "Alice", "label": [[0, 2]]}', "doccano", "line 1: label 1 must be [start, end, \"TYPE\"]"),
    ("[1, 2", None, "not a Label Studio JSON export"),
    ("", None, "f is empty"),
    ("[]", None, "f holds no examples"),
])
def test_a_broken_file_is_refused_with_its_line_or_task(content, fmt, message):
    with pytest.raises(InputError) as error:
        im.parse(content.encode(), "f", fmt)
    assert message in str(error.value)


def test_a_failed_validation_imports_nothing_not_even_the_new_dataset(store):
    good = {"id": "a", "text": "张三在北京", "output": [[{"type": "人物", "span": "张三", "offset": [0, 2]}]]}
    bad = {"id": "b", "text": "李四", "output": [[{"type": "人物", "span": "李", "offset": [0, 2]}]]}
    data = "\n".join(json.dumps(x, ensure_ascii=False) for x in (good, good, bad)).encode()
    with pytest.raises(InputError, match=r"line 3: .*covers '李四', not the span '李'"):
        im.import_dataset(store, data, "rexuninlu", "people", name="people.jsonl", validate=rex_validate)
    assert store.list_datasets() == []
    report = im.import_dataset(store, data.rsplit(b"\n", 1)[0], "rexuninlu", "people", validate=rex_validate)
    assert report.examples == 2
    [example, _] = store.gold_examples(report.dataset_id)
    assert example.schema == {"人物": None} and example.source == "jsonl"


def test_a_schema_edited_in_the_dialog_can_leave_types_out(store):
    data = json.dumps([label_studio_task("张三在北京", [region("a", 0, 2, "人物"), region("b", 3, 5, "地点")])])
    with pytest.raises(InputError, match="task 1 \\(id 7\\): .*'地点' is not in the schema"):
        im.import_dataset(store, data.encode(), "rexuninlu", "d", schema={"人物": None}, validate=rex_validate)
    report = im.import_dataset(store, data.encode(), "rexuninlu", "d", schema={"人物": None}, drop_unknown=True,
                               validate=rex_validate)
    assert (report.examples, report.dropped) == (1, 1)
    assert store.gold_examples(report.dataset_id)[0].output == [[{"type": "人物", "span": "张三", "offset": [0, 2]}]]


def test_label_driven_models_get_task_and_labels_from_the_file(store):
    seen = []

    def validate(document, output):
        seen.append((document.task, document.labels, document.schema))
        return output
    data = json.dumps({"text": "Alice met Bob", "label": [[0, 5, "person"]]}).encode()
    report = im.import_dataset(store, data, "seqgpt", "people", validate=validate)
    assert seen == [("ext", ["person"], None)]
    example = store.gold_examples(report.dataset_id)[0]
    assert example.gold_line() == {"id": "1", "text": "Alice met Bob", "task": "ext", "labels": ["person"],
                                   "output": [[{"type": "person", "span": "Alice", "offset": [0, 5]}]]}
