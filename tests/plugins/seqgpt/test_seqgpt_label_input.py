"""SeqGPT's labels are a list on every path (CLI lines, batch-job uploads, the API), and a missing task or
missing labels are named as missing (issue #28)."""
import json

import pytest

from contracts.domain import Document, InputError
from plugins.seqgpt.family import SeqGPT
from workstation import cli
from workstation.inputs import read_valid_documents
from workstation.settings import ApiSettings, ModelSettings, Settings

GOOD = {"id": "a", "text": "张三在北京工作", "task": "ext", "labels": ["人物", "地点"]}


def write_jsonl(path, lines):
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), "utf-8")
    return path


def test_a_labels_string_is_refused_on_a_cli_line_naming_the_line(tmp_path, demo_tiny, capsys):
    source = write_jsonl(tmp_path / "docs.jsonl", [GOOD, {**GOOD, "id": "b", "labels": "人物,地点"}])
    out = tmp_path / "out.jsonl"
    assert cli.main(["extract", "--model", "seqgpt", "--weights", str(demo_tiny), "--input", str(source),
                     "--output", str(out), "--device", "cpu", "--no-record"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "\"labels\" must be a list of strings, not the string \"人物,地点\"" in err
    assert not out.exists()


def test_a_labels_string_is_refused_on_the_batch_job_path(tmp_path):
    source = write_jsonl(tmp_path / "docs.jsonl", [{**GOOD, "labels": "人物"}])
    with pytest.raises(InputError, match=r"line 1: \"labels\" must be a list of strings"):
        read_valid_documents(source, SeqGPT())
    # The default a job's form gives for lines without labels is held to the same rule.
    bare = write_jsonl(tmp_path / "bare.jsonl", [{"text": "张三在北京工作"}])
    with pytest.raises(InputError, match="must be a list of strings"):
        read_valid_documents(bare, SeqGPT(), {"task": "ext", "labels": "人物"})


@pytest.mark.parametrize("task, labels, message", [
    ("cls", None, "\"labels\" is missing (or null)"),
    (None, ["正面", "负面"], "\"task\" is missing"),
])
def test_a_missing_task_or_labels_is_named_as_missing(task, labels, message):
    with pytest.raises(InputError) as e:
        SeqGPT().check(Document("a", "好评", task=task, labels=labels, line=3))
    assert message in str(e.value) and "None" not in str(e.value)


def test_a_job_upload_with_a_task_and_no_labels_says_the_labels_are_missing(tmp_path, demo_tiny):
    from fastapi.testclient import TestClient

    from tests.fake_monitor import FakeMonitor
    from workstation.api.app import create_app
    s = Settings(database=str(tmp_path / "runs.db"), demo_weights_dir=str(tmp_path / "demo"))
    s.models["seqgpt"] = ModelSettings(weights=str(demo_tiny), device="cpu", batch_size=2)
    s.api = ApiSettings(models=["seqgpt"])
    app = create_app(s, monitor_factory=lambda: FakeMonitor.steady(gpus=1))
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.post("/v1/jobs", files={"file": ("docs.txt", "好评如潮\n".encode(), "text/plain")},
                             data={"model": "seqgpt", "task": "cls"}, headers={"X-IEW-Request": "1"})
        assert answer.status_code == 400, answer.text
        message = answer.json()["error"]["message"]
        assert message.startswith("line 1: \"labels\" is missing") and "unknown task" not in message
        assert client.get("/v1/jobs").json()["jobs"] == []
    app.state.api.store.close()


def test_a_default_task_without_labels_leaves_the_missing_labels_to_be_named(tmp_path):
    from contracts.names import Reads
    from workstation.inputs import defaults_for
    assert defaults_for(Reads.LABELS, {"task": "cls"}) == {"task": "cls"}
    bare = write_jsonl(tmp_path / "bare.jsonl", [{"text": "好评如潮"}])
    with pytest.raises(InputError, match="line 1: \"labels\" is missing"):
        read_valid_documents(bare, SeqGPT(), {"task": "cls"})
