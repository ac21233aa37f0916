"""Messages a person can act on: duplicate keys, JSON errors, folders, uploads, devices, schema shapes."""
from __future__ import annotations

import json
import re

import pytest

from contracts.domain import InputError
from workstation import engine
from workstation.inputs import loads, parse_schema_arg, read_documents
from workstation.ui import schema_editor

NER = {"人物": None}


def test_a_key_given_twice_is_refused_with_the_key_and_its_line_and_column():
    with pytest.raises(json.JSONDecodeError) as e:
        loads('{"人物": null,\n "组织": {"x": null,\n  "x": {}}}')
    assert "'x' is given twice" in e.value.msg and (e.value.lineno, e.value.colno) == (3, 3)
    assert loads('[{"k": 1}, {"k": 2}]') == [{"k": 1}, {"k": 2}]          # the same key in two objects is fine
    with pytest.raises(InputError, match=r"'人物' is given twice at line 2, column 2"):
        schema_editor.parse_schema('{"人物": null,\n "人物": {}}')
    with pytest.raises(InputError, match="--schema is not valid JSON: the key 'a' is given twice"):
        parse_schema_arg('{"a": null, "a": null}')


def test_a_jsonl_line_with_a_key_given_twice_is_named(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1, "text": "a"}\n{"id": 2, "text": "b", "text": "c"}\n', "utf-8")
    with pytest.raises(InputError, match=r"line 2: malformed JSON \(the key 'text' is given twice at column 24\)"):
        read_documents(path)


@pytest.mark.parametrize("source", ['{"a": "unterminated', '{"a" 1}', '{"a": 1,}'])
def test_json_errors_never_say_at_at(source, tmp_path):
    (tmp_path / "in.jsonl").write_text(source + "\n", "utf-8")
    for call in (lambda: schema_editor.parse_schema(source), lambda: parse_schema_arg(source),
                 lambda: read_documents(tmp_path / "in.jsonl")):
        with pytest.raises(InputError) as e:
            call()
        assert " at at " not in str(e.value) and re.search(r"column \d+", str(e.value))


def test_a_folder_is_called_a_folder_and_an_upload_by_its_own_name(tmp_path):
    with pytest.raises(InputError, match="is a folder, not a file"):
        read_documents(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        read_documents(tmp_path / "missing.jsonl")
    binary = tmp_path / "input.jsonl"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    with pytest.raises(InputError) as e:
        read_documents(binary, name="photo.jsonl")
    assert str(e.value).startswith("photo.jsonl is not UTF-8 text") and str(tmp_path) not in str(e.value)


def test_cuda_without_a_gpu_is_an_input_error_on_one_line():
    with pytest.raises(InputError, match="no CUDA GPU") as e:
        engine.resolve_device("cuda:1")
    assert "\n" not in str(e.value)
    assert engine.resolve_device("cpu") == "cpu" and engine.resolve_device("auto") == "cpu"


def test_cli_extract_on_cuda_without_a_gpu_prints_one_line_and_fails(tmp_path, capsys):
    from workstation.cli import main
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": 1, "text": "张三", "schema": NER}) + "\n", "utf-8")
    code = main(["extract", "--model", "rexuninlu", "--input", str(inp), "--output", str(tmp_path / "o.jsonl"),
                 "--device", "cuda", "--no-record"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: device 'cuda'") and "Traceback" not in err


def test_the_schema_box_says_what_the_task_takes():
    from plugins.rexuninlu.family import RexUniNLU
    from plugins.seqgpt.family import SeqGPT
    from workstation.ui.runs import document_for
    rex, seq = RexUniNLU(), SeqGPT()
    for schema, kind in ((["人物"], "a list"), (None, "null")):
        with pytest.raises(InputError, match=f"this task takes a JSON object of types .*; it holds {kind}$"):
            document_for(rex, rex.tasks["ner"], schema, "张三")
    with pytest.raises(InputError, match="this task takes a list of labels .*; it holds a JSON object$"):
        document_for(seq, seq.tasks["ext"], {"人物": None}, "张三")
    doc = document_for(seq, seq.tasks["ext"], [1, None, {"a": "b:c"}], "张三")
    with pytest.raises(InputError, match="every label must be a string, but one is a number: 1"):
        seq.check(doc)
