"""A count of one is worded in the singular on every surface (issue #28: "started with 1 documents")."""
from __future__ import annotations

from contracts.exporter import ExportReport
from contracts.words import agree, plural
from tests.workstation.ui.test_batch_page import PAGE, jsonl, start, wait_done
from workstation.ui import state


def test_counts_of_one_are_singular_and_others_plural():
    assert [plural(n, "document") for n in (0, 1, 2, 1200)] == ["0 documents", "1 document", "2 documents",
                                                                  "1,200 documents"]
    assert plural(1, "child", "children") == "1 child" and plural(3, "child", "children") == "3 children"
    assert (agree(1, "was", "were"), agree(0, "was", "were")) == ("was", "were")


def test_a_job_of_one_document_says_so_in_the_singular(app):
    at = app.run().switch_page(PAGE).run()
    at.file_uploader(key="batch_upload").set_value(("one.jsonl", jsonl({"id": "a", "text": "Alice"}),
                                                    "application/jsonl")).run()
    start(at)
    [job] = state.store().list_jobs()
    assert [t.value for t in at.toast] == [f"Job {job.id} started with 1 document."]
    wait_done(job.id)
    at.run()
    assert any(p.proto.text.startswith("1 / 1 document ·") for p in at.get("progress"))


def test_an_export_of_one_document_and_one_span_is_singular():
    message = ExportReport(documents=1, spans=1, skipped=1, invalid=1).message()
    assert message.startswith("1 document, 1 span; 1 span without a position in the text was skipped; "
                              "1 tuple was left out because")


def test_the_command_line_reports_one_document_in_the_singular(rex_tiny, tmp_path, capsys):
    from workstation import cli
    source = tmp_path / "one.txt"
    source.write_text("张三在北京工作\n", "utf-8")
    assert cli.main(["extract", "--model", "rexuninlu", "--weights", str(rex_tiny), "--input", str(source),
                     "--output", str(tmp_path / "out.jsonl"), "--schema", '{"人物": null}', "--device", "cpu",
                     "--no-record"]) == 0
    assert capsys.readouterr().err.startswith("1 document in ")
