"""`launcher.py extract` end to end, in-process through workstation.cli.main."""
import json
import subprocess
import sys
import time

import pytest

from workstation.cli import main
from workstation.settings import ROOT

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


def mid_stream_input(tmp_path, bad_line: int, lines: int):
    """Good lines with one bad one far enough in that the slices before it have run (batch size 1: 256 a slice)."""
    rows = [{"id": n, "text": f"张{n}", "schema": NER} for n in range(1, lines + 1)]
    rows[bad_line - 1] = {"id": bad_line, "text": "x", "schema": {}}
    return write_lines(tmp_path / "in.jsonl", rows)


@pytest.fixture
def history(tmp_path, monkeypatch):
    """settings.toml in tmp_path (what IEW_SETTINGS points at) with the history database beside it."""
    from workstation import settings
    path = tmp_path / "settings.toml"
    path.write_text(f'[storage]\ndatabase = "{tmp_path / "runs.db"}"\n', "utf-8")
    monkeypatch.setattr(settings, "DEFAULT_PATH", path)
    return tmp_path / "runs.db"


def recorded_runs(db):
    from storage import open_store
    if not db.exists():
        return []
    store = open_store(db)
    try:
        return [store.get_run(s.id) for s in store.search_runs()]
    finally:
        store.close()


def test_a_bad_line_mid_stream_stops_the_run_naming_it_and_leaves_no_output_nor_run(tmp_path, rex_tiny, capsys,
                                                                                    history):
    inp = mid_stream_input(tmp_path, bad_line=300, lines=320)
    out = tmp_path / "out.jsonl"
    code = main(["extract", "--model", "rexuninlu", "--weights", str(rex_tiny), "--input", str(inp),
                 "--output", str(out), "--device", "cpu", "--batch-size", "1"])
    assert code == 2 and "line 300: schema is empty" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))      # the temporary output is gone
    import sqlite3
    with sqlite3.connect(history) as db:                                      # and the partly recorded run
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_skip_invalid_goes_on_past_a_bad_line_mid_stream(tmp_path, rex_tiny, capsys):
    code, out = extract(tmp_path, rex_tiny, mid_stream_input(tmp_path, bad_line=300, lines=320), "--skip-invalid",
                        "--batch-size", "1")
    assert code == 0
    ids = [json.loads(line)["id"] for line in out.read_text("utf-8").splitlines()]
    assert ids == [str(n) for n in range(1, 321) if n != 300]
    err = capsys.readouterr().err
    assert "skipped: line 300: schema is empty" in err and "1 skipped" in err


def test_the_run_is_recorded_in_the_history_by_default_and_not_with_no_record(tmp_path, rex_tiny, capsys, history):
    lines = [{"id": f"d{n}", "text": f"张三{n}在北京", "schema": NER} for n in range(5)]
    inp, out = write_lines(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    argv = ["extract", "--model", "rexuninlu", "--weights", str(rex_tiny), "--input", str(inp), "--output", str(out),
            "--device", "cpu", "--batch-size", "2"]
    assert main(argv) == 0
    [run] = recorded_runs(history)
    s = run.summary
    assert (s.source, s.model, s.documents, s.device, s.dtype, s.demo) == ("cli", "rexuninlu", 5, "cpu", "fp32", True)
    assert s.attention == "eager" and s.batch_size == 2 and s.docs_per_second > 0
    assert set(s.stages["seconds"]) == {"prepare", "device", "decode", "write"} and s.stages["device_busy"] > 0
    assert [d.id for d, _ in run.items] == [line["id"] for line in lines]
    written = [json.loads(line)["output"] for line in out.read_text("utf-8").splitlines()]
    assert [r.to_json()["output"] for _, r in run.items] == written
    assert run.settings["summary"]["documents"] == 5
    assert main([*argv, "--no-record"]) == 0
    assert len(recorded_runs(history)) == 1


def test_iew_settings_points_a_cli_run_at_another_history(tmp_path, rex_tiny):
    """The launcher in a child process, as a person runs it, recording where IEW_SETTINGS says."""
    import os
    import subprocess
    import sys

    from workstation.settings import ROOT
    db = tmp_path / "elsewhere" / "runs.db"
    (tmp_path / "settings.toml").write_text(f'[storage]\ndatabase = "{db}"\n', "utf-8")
    inp = write_lines(tmp_path / "in.jsonl", [{"id": "a", "text": "张三在北京", "schema": NER}])
    done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "extract", "--model", "rexuninlu", "--weights",
                           str(rex_tiny), "--input", str(inp), "--output", str(tmp_path / "out.jsonl"), "--device", "cpu"],
                          env={**os.environ, "IEW_SETTINGS": str(tmp_path / "settings.toml")}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [run] = recorded_runs(db)
    assert run.summary.source == "cli" and run.summary.documents == 1 and run.summary.stages["seconds"]


def test_documents_are_read_as_they_are_needed(tmp_path):
    """The reader parses a line only when asked for it: a broken line 3 is no error until it is reached."""
    from workstation.inputs import iter_documents
    inp = write_lines(tmp_path / "in.jsonl", [{"id": "a", "text": "甲"}, {"id": "b", "text": "乙"}, "{broken"])
    docs = iter_documents(inp)
    assert [next(docs).id, next(docs).id] == ["a", "b"]
    with pytest.raises(Exception, match="line 3: malformed JSON"):
        next(docs)
    skipped = []
    assert [d.id for d in iter_documents(inp, on_invalid=skipped.append)] == ["a", "b"] and len(skipped) == 1


def test_parquet_is_read_in_row_batches(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workstation import inputs
    monkeypatch.setattr(inputs, "PARQUET_ROWS", 2)
    pq.write_table(pa.Table.from_pylist([{"id": str(i), "text": f"文本{i}"} for i in range(5)]), tmp_path / "in.parquet",
                   row_group_size=2)
    assert [(d.id, d.line) for d in inputs.iter_documents(tmp_path / "in.parquet")] == [
        (str(i), i + 1) for i in range(5)]


def test_a_process_knows_when_it_started_to_within_its_own_wall_seen_from_outside():
    # extract's "first result Xs after the process started" must not exceed the wall its parent measures
    # (psutil's create_time could, by most of a second: it counts from a boot time in whole seconds).
    code = ("import time, sys; time.sleep(0.3); sys.path.insert(0, '.'); import workstation.cli as c; "
            "print(time.time() - c.process_start_time())")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    wall = time.perf_counter() - started
    assert 0.3 <= float(done.stdout.split()[-1]) <= wall
