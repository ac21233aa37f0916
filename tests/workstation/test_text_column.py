"""Input files whose text is under another name (`content`, `body`): `text_column` says which."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contracts.domain import InputError
from workstation.inputs import read_documents
from workstation.ui.file_preview import preview


def test_a_csv_is_read_from_the_named_text_column(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,content\na,张三在北京\nb,李四\n", "utf-8")
    docs, _ = read_documents(path, text_column="content")
    assert [(d.id, d.text, d.line) for d in docs] == [("a", "张三在北京", 2), ("b", "李四", 3)]


def test_a_csv_without_the_text_column_names_the_columns_it_has_and_what_to_do(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,content\na,x\n", "utf-8")
    with pytest.raises(InputError, match=r"in.csv has no 'text' column \(columns: id, content\); name the column"):
        read_documents(path)
    with pytest.raises(InputError, match="has no 'body' column"):
        read_documents(path, text_column="body")


def test_jsonl_and_parquet_read_the_named_key(tmp_path):
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"id": 1, "content": "甲"}, ensure_ascii=False) + "\n", "utf-8")
    assert [d.text for d in read_documents(jsonl, text_column="content")[0]] == ["甲"]
    with pytest.raises(InputError, match='line 1: missing "text"'):
        read_documents(jsonl)
    parquet = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["p"], "body": ["乙"]}), parquet)
    assert [d.text for d in read_documents(parquet, text_column="body")[0]] == ["乙"]


def test_the_preview_counts_rows_lists_columns_and_guesses_the_text_column():
    seen = preview("id,Content,n\n1,\"a, b\",2\n2,c,3\n".encode("utf-8-sig"), ".csv")
    assert (seen.rows, seen.columns, seen.text_guess()) == (2, ["id", "Content", "n"], "Content")
    assert seen.head["Content"].tolist() == ["a, b", "c"]
    lines = preview(b'{"id": 1, "body": "x", "schema": {"a": null}}\n\n{"id": 2, "body": "y"}\n', ".jsonl")
    assert (lines.rows, lines.columns, lines.text_guess()) == (2, ["id", "body", "schema"], "body")
    assert preview(b"one\n\ntwo\n", ".txt").rows == 2 and preview(b"one\n", ".txt").columns == []
    assert preview(b"\xff\xfe", ".csv").problem.startswith("not UTF-8")
