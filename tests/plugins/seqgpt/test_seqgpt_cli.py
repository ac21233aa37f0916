"""`launcher.py extract --model seqgpt` end to end, as other tools call it (README.md, "Command line")."""
import json
import os
import subprocess
import sys
from pathlib import Path

from contracts.domain import Document
from plugins.seqgpt.family import SeqGPT

ROOT = Path(__file__).resolve().parents[3]
LINES = [
    {"id": "a", "text": "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "task": "ext",
     "labels": ["人物", "地理位置", "组织机构", "时间", "事件", "数量", "国家"]},
    {"id": "b", "text": "I want my checking balance.", "task": "cls", "labels": ["CheckBalance", "TransferMoney"]},
    {"id": "c", "text": "李老板卖鱼，卖了三十框鱼\t李老板赚翻了", "task": "cls", "labels": ["entailment", "contradiction"]},
]


def launch(tmp_path, weights, lines, *extra):
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "extract", "--model", "seqgpt",
                           "--weights", str(weights), "--input", str(source), "--output", str(output),
                           "--device", "cpu", "--no-record", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=os.environ | {"OMP_NUM_THREADS": "1"})
    return done, output


def test_cli_writes_one_line_per_document_with_raw_chunks(tmp_path, demo_tiny):
    done, output = launch(tmp_path, demo_tiny, LINES, "--num-beams", "2", "--max-new-tokens", "6")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["a", "b", "c"]
    assert [len(r["raw"]) for r in rows] == [2, 1, 1]           # 7 extraction labels -> 4 + 3
    docs = [Document(x["id"], x["text"], task=x["task"], labels=x["labels"]) for x in LINES]
    expected = SeqGPT().load(demo_tiny).extract(docs, num_beams=2, max_new_tokens=6)
    assert rows == [r.to_json() for r in expected]


def test_cli_bad_line_fails_naming_it_and_writes_nothing(tmp_path, demo_tiny):
    bad = LINES[:1] + [{"id": "x", "text": "t", "task": "ext", "labels": []}]
    done, output = launch(tmp_path, demo_tiny, bad)
    assert done.returncode != 0
    assert "line 2" in done.stderr and "labels" in done.stderr
    assert not output.exists()


def test_cli_counts_cut_documents_and_window_mode_reads_them_whole(tmp_path, demo_tiny):
    long = {"id": "long", "text": "。".join(["北大西洋议会春季会议26日在西班牙巴塞罗那闭幕，"
                                            "The Moon's orbit around Earth has changed"] * 60) + "。",
            "task": "ext", "labels": ["人物", "地理位置"]}
    lines = [LINES[1], long]
    done, output = launch(tmp_path, demo_tiny, lines, "--num-beams", "1", "--max-new-tokens", "4")
    assert done.returncode == 0, done.stderr
    assert "1 of 2 documents was cut (read partly) (--option long_text=window reads all of them)" in done.stderr
    truncated = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert truncated[1]["coverage"][0][0] > 0
    done, output = launch(tmp_path, demo_tiny, lines, "--num-beams", "1", "--max-new-tokens", "4",
                          "--option", "long_text=window")
    assert done.returncode == 0, done.stderr
    assert "0 of 2 documents were cut (read partly)" in done.stderr
    windowed = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert windowed[0] == truncated[0]                              # a short text: the reference's output
    assert windowed[1]["coverage"] == [[0, len(long["text"])]]


def test_cli_long_text_is_refused_for_a_model_without_it(tmp_path, demo_tiny, capsys):
    from workstation.cli import main
    source = tmp_path / "docs.jsonl"
    source.write_text(json.dumps({"id": "1", "text": "x", "schema": {"人物": None}}) + "\n", encoding="utf-8")
    code = main(["extract", "--model", "rexuninlu", "--weights", str(demo_tiny), "--input", str(source),
                 "--output", str(tmp_path / "o.jsonl"), "--option", "long_text=window", "--no-record"])
    assert code == 2 and not (tmp_path / "o.jsonl").exists()
    assert "rexuninlu takes no options" in capsys.readouterr().err
