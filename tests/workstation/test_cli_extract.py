"""`launcher.py extract` end to end, in-process through workstation.cli.main."""
import json

import pytest

from workstation.cli import main

NER = {"人物": None, "地理位置": None, "组织机构": None}


def write_lines(path, lines):
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l, ensure_ascii=False)) + "\n"
                            for l in lines), "utf-8")
    return path


def extract(tmp_path, weights, inp, *extra):
    out = tmp_path / "out.jsonl"
    code = main(["extract", "--model", "rexuninlu", "--weights", str(weights), "--input", str(inp),
                 "--output", str(out), "--device", "cpu", "--no-record", *extra])
    return code, out


def test_jsonl_in_jsonl_out_same_order_with_ids(tmp_path, rex_tiny, rex_model):
    from contracts.domain import Document
    lines = [{"id": "a", "text": "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "schema": NER},
             {"id": 7, "text": "[CLASSIFY]很好看", "schema": {"正向": None, "负向": None}},
             {"id": "n", "text": "北京", "schema": NER}]
    code, out = extract(tmp_path, rex_tiny, write_lines(tmp_path / "in.jsonl", lines), "--batch-size", "2")
    assert code == 0
    got = [json.loads(l) for l in out.read_text("utf-8").splitlines()]
    assert [g["id"] for g in got] == ["a", "7", "n"]
    expected = [r.to_json()["output"] for r in rex_model.extract(
        [Document(str(l["id"]), l["text"], l["schema"]) for l in lines])]
    assert [g["output"] for g in got] == expected
    assert got[1]["output"][0][0]["span"] == "[CLASSIFY]"


def test_blank_lines_of_a_txt_file_are_not_documents(tmp_path, rex_tiny):
    texts = [f"张三{i}在北京" for i in range(25)]
    (tmp_path / "in.txt").write_text("\n".join(texts[:10]) + "\n\n  \n" + "\n".join(texts[10:]) + "\n\n\n", "utf-8")
    code, out = extract(tmp_path, rex_tiny, tmp_path / "in.txt", "--schema", json.dumps(NER))
    assert code == 0 and len(out.read_text("utf-8").splitlines()) == 25


@pytest.mark.parametrize("text", ["", "   ", "\t\n "])
def test_blank_text_is_refused_with_its_line(tmp_path, rex_tiny, capsys, text):
    inp = write_lines(tmp_path / "in.jsonl", [{"id": "ok", "text": "好", "schema": NER},
                                              {"id": "e", "text": text, "schema": NER}])
    code, out = extract(tmp_path, rex_tiny, inp)
    assert code == 2 and not out.exists()
    assert "line 2: document 'e' has no text" in capsys.readouterr().err
    code, out = extract(tmp_path, rex_tiny, inp, "--skip-invalid")
    assert code == 0 and [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["ok"]


def test_txt_and_csv_inputs_take_the_schema_option(tmp_path, rex_tiny):
    (tmp_path / "in.txt").write_text("张三在北京\n李四去上海\n", "utf-8")
    code, out = extract(tmp_path, rex_tiny, tmp_path / "in.txt", "--schema", json.dumps(NER))
    assert code == 0 and [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["1", "2"]
    (tmp_path / "schema.json").write_text(json.dumps(NER), "utf-8")
    (tmp_path / "in.csv").write_text("id,text\nx,张三在北京\n", "utf-8")
    code, out = extract(tmp_path, rex_tiny, tmp_path / "in.csv", "--schema", str(tmp_path / "schema.json"))
    assert code == 0 and json.loads(out.read_text().splitlines()[0])["id"] == "x"


@pytest.mark.parametrize("bad, message", [
    ('{"id": 1, "text": "x", "schema": ', "line 2: malformed JSON"),
    # A label list where a schema belongs is named as what it is (what the model reads is a schema).
    ({"id": 1, "text": "x", "schema": ["人物"]}, "line 2: rexuninlu reads \"schema\" .* gives a list of labels"),
    ({"id": 1, "text": "x", "schema": "人物"}, "line 2: schema must be a JSON object"),
    ({"id": 1, "text": "x", "schema": {}}, "line 2: schema is empty"),
    ({"id": 1, "text": "x", "schema": {"[TYPE]": None}}, "line 2: .*reserved token"),
    ({"id": 1, "schema": NER}, "line 2: missing \"text\""),
    ({"id": 1, "text": "x"}, "line 2: no schema"),
    ({"id": 1, "text": " ", "schema": NER}, "line 2: document '1' has no text"),
    ([1, 2], "line 2: expected a JSON object"),
])
def test_bad_line_is_named_and_no_output_is_written(tmp_path, rex_tiny, capsys, bad, message):
    inp = write_lines(tmp_path / "in.jsonl", [{"id": 0, "text": "好", "schema": NER}, bad])
    code, out = extract(tmp_path, rex_tiny, inp)
    assert code == 2
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))
    import re
    assert re.search(message, capsys.readouterr().err)


def test_skip_invalid_writes_the_good_lines_and_reports_the_bad(tmp_path, rex_tiny, capsys):
    inp = write_lines(tmp_path / "in.jsonl", [{"id": "ok", "text": "好", "schema": NER}, "{broken",
                                              {"id": "no", "text": "x", "schema": {}}])
    code, out = extract(tmp_path, rex_tiny, inp, "--skip-invalid")
    assert code == 0
    assert [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["ok"]
    err = capsys.readouterr().err
    assert "line 2: malformed JSON" in err and "line 3: schema is empty" in err


def test_missing_weights_and_unknown_model_are_clear_errors(tmp_path, capsys):
    inp = write_lines(tmp_path / "in.jsonl", [{"id": 0, "text": "好", "schema": NER}])
    code, out = extract(tmp_path, tmp_path / "none", inp)
    assert code == 1 and "does not exist" in capsys.readouterr().err and not out.exists()
    code = main(["extract", "--model", "nosuch", "--input", str(inp), "--output", str(tmp_path / "o")])
    assert code == 2 and "unknown model 'nosuch'" in capsys.readouterr().err


def test_fp16_on_cpu_is_refused_with_a_reason(tmp_path, rex_tiny, capsys):
    inp = write_lines(tmp_path / "in.jsonl", [{"id": 0, "text": "好", "schema": NER}])
    code, out = extract(tmp_path, rex_tiny, inp, "--dtype", "bf16")
    assert code == 2 and "needs a CUDA device" in capsys.readouterr().err and not out.exists()


def test_demo_weights_command_writes_marked_checkpoints(tmp_path):
    assert main(["demo-weights", "--model", "rexuninlu", "--size", "tiny", "--out", str(tmp_path)]) == 0
    d = tmp_path / "rexuninlu-tiny"
    assert {"config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
            "pytorch_model.bin", "RANDOM_DEMO_WEIGHTS.txt"} <= {p.name for p in d.iterdir()}
    assert "RANDOM DEMO WEIGHTS" in (d / "RANDOM_DEMO_WEIGHTS.txt").read_text()
