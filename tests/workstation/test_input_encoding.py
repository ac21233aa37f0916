"""Input text as files carry it: a UTF-8 byte-order mark is accepted in every text format; a lone UTF-16
surrogate (JSON's "\\ud800") is refused where it is read, naming the line, never a traceback later."""
from __future__ import annotations

import json

import pytest

from contracts.domain import InputError
from workstation.inputs import json_line, parse_schema_arg, read_documents
from workstation.ui import schema_editor
from workstation.unicode_text import lone_surrogate

BOM = "\ufeff"
NER = {"人物": None}


@pytest.mark.parametrize("name, content", [
    ("in.jsonl", '{"id": "a", "text": "张三在北京"}\n{"id": "b", "text": "李四"}\n'),
    ("in.json", '{"id": "a", "text": "张三在北京"}\n{"id": "b", "text": "李四"}\n'),
    ("in.txt", "张三在北京\n李四\n"),
    ("in.csv", "id,text\na,张三在北京\nb,李四\n"),
])
def test_a_byte_order_mark_is_accepted_in_every_text_format(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(BOM + content, "utf-8")
    documents, errors = read_documents(path)
    assert errors == [] and [d.text for d in documents] == ["张三在北京", "李四"]
    assert documents[0].id in ("a", "1")                     # the mark is not part of the first id or text


def test_a_schema_file_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(BOM + json.dumps(NER, ensure_ascii=False), "utf-8")
    assert parse_schema_arg(str(path)) == NER


def test_an_empty_csv_says_it_is_empty(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"")
    with pytest.raises(InputError) as e:
        read_documents(path, name="upload.csv")
    assert str(e.value).startswith("upload.csv is empty") and "None" not in str(e.value)


@pytest.mark.parametrize("line, where", [
    ('{"id": "a", "text": "ab\\ud800cd"}', "text"),
    ('{"id": "a", "text": "abcd", "schema": {"\\udc00": null}}', "a key of schema"),
    ('{"id": "\\ud800", "text": "abcd"}', "id"),
    ('{"id": "a", "text": "abcd", "schema": {"x": [{"y": "\\udfff"}]}}', "schema.x[0].y"),
])
def test_a_lone_surrogate_in_a_jsonl_line_is_refused_naming_the_line_and_the_place(tmp_path, line, where):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "ok", "text": "好"}\n' + line + "\n", "utf-8")
    with pytest.raises(InputError) as e:
        read_documents(path)
    assert e.value.line == 2 and str(e.value).startswith(f"line 2: {where} holds a lone UTF-16 surrogate")


def test_a_surrogate_pair_is_text_not_a_lone_surrogate():
    assert json_line('{"text": "\\ud83d\\ude00"}', 1) == {"text": "😀"}
    assert lone_surrogate({"a": ["b", {"c": "😀"}]}) is None


def test_a_lone_surrogate_in_a_schema_argument_or_the_schema_box_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"^--schema: a key of the schema holds a lone UTF-16 surrogate \(\\ud800\)"):
        parse_schema_arg('{"\\ud800": null}')
    with pytest.raises(InputError, match="lone UTF-16 surrogate"):
        schema_editor.parse_schema('{"人物": {"\\udbff": null}}')


def test_the_cli_names_the_line_of_a_lone_surrogate_and_writes_nothing(tmp_path, capsys):
    from workstation.cli import main
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text(json.dumps({"id": 1, "text": "张三", "schema": NER}) + "\n"
                   + '{"id": 2, "text": "ab\\ud800cd", "schema": {"人物": null}}\n', "utf-8")
    code = main(["extract", "--model", "rexuninlu", "--input", str(inp), "--output", str(out),
                 "--device", "cpu", "--no-record"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert "line 2" in err and "lone UTF-16 surrogate" in err and not out.exists()


@pytest.mark.parametrize("depth", [5000, 100_000])
def test_a_line_nested_thousands_deep_is_an_input_error_not_a_recursion_error(tmp_path, depth):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "a", "schema": ' + '{"a": ' * depth + "null" + "}" * depth + "}\n", "utf-8")
    with pytest.raises(InputError, match=r"^line 1: malformed JSON \(nested too deeply to read"):
        read_documents(path)
    with pytest.raises(InputError, match="nested too deeply"):
        parse_schema_arg("[" * depth + "]" * depth)


def test_a_gold_file_and_a_thresholds_file_with_a_byte_order_mark_are_read(tmp_path, rex_tiny):
    from plugins.rexuninlu.family import RexUniNLU
    from workstation.cli import read_thresholds
    from workstation.finetune.trainer import read_gold
    gold = tmp_path / "gold.jsonl"
    line = {"id": "a", "text": "张三在北京", "schema": NER, "output": [[{"type": "人物", "span": "张三", "offset": [0, 2]}]]}
    gold.write_text(BOM + json.dumps(line, ensure_ascii=False) + "\n", "utf-8")
    [(document, output)] = read_gold(gold, RexUniNLU())
    assert document.id == "a" and output[0][0]["span"] == "张三"
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(BOM + json.dumps({"人物": 0.4}, ensure_ascii=False), "utf-8")
    assert read_thresholds(str(thresholds), None, "rexuninlu", rex_tiny) == {"人物": 0.4}
