"""engine.run is the one run path: documents streamed and checked once, the model taken only after the first
checks, the knobs settled once, the attention kernel that ran recorded, and every surface going through it."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

from contracts.domain import Document, InputError
from contracts.model import Knobs
from tests.threads import errors_on_threads
from tests.workstation.jobs.fake_model import FakeFamily, FakeModel, registered
from workstation import engine
from workstation.run_config import RunConfig


class CountingFamily(FakeFamily):
    """The fake model's family, counting every document it checks."""

    def __init__(self):
        self.checked: list[str] = []

    def validate(self, document: Document) -> None:
        self.checked.append(document.id)
        super().validate(document)


class KernelModel(FakeModel):
    """Asks for a kernel it cannot run in fp32, as RexUniNLU's Triton attention on CUDA: SDPA runs instead.
    Like the real plugins it answers in resolve_attention alone, the hook both the run and the fused-attention
    optimization ask."""

    attention_backends = ("eager", "sdpa", "triton")

    def resolve_attention(self, wanted: str) -> tuple[str, str]:
        if wanted == "triton" and self.knobs.dtype == "fp32":
            return "sdpa", "the Triton kernel has no exact fp32 path"
        return wanted, ""


def documents(n: int, bad: int | None = None) -> list[Document]:
    return [Document(str(i), " " if i == bad else f"甲乙{i}", line=i + 1) for i in range(n)]


def test_a_long_input_is_read_slice_by_slice_and_each_document_is_checked_once(tmp_path):
    family = CountingFamily()
    model = family.load(tmp_path, "cpu")
    read: list[int] = []

    def stream():
        for doc in documents(1000):
            read.append(int(doc.id))
            yield doc
    read_at_first_result: list[int] = []

    def written(document, result):
        assert result.document_id == document.id
        if not read_at_first_result:
            read_at_first_result.append(len(read))
    report = engine.run(model, stream(), RunConfig(batch_size=1), on_result=written, keep_results=False)
    assert report.documents == 1000 and report.results == []                 # nothing held
    assert read_at_first_result == [engine.slice_size(1)]                    # one slice read, not the input
    assert family.checked == [str(i) for i in range(1000)]                  # each document checked once


def test_a_bad_document_mid_stream_stops_the_run_naming_its_line_or_is_skipped_with_on_invalid(tmp_path):
    model = FakeFamily().load(tmp_path, "cpu")
    written = []
    with pytest.raises(InputError, match="line 301: document '300' has no text"):
        engine.run(model, iter(documents(600, bad=300)), RunConfig(batch_size=1),
                   on_result=lambda d, r: written.append(d.id))
    assert len(written) == engine.slice_size(1)          # the slices before it ran; the caller discards them
    skipped = []
    report = engine.run(model, iter(documents(600, bad=300)), RunConfig(batch_size=1),
                        on_invalid=lambda doc, error: skipped.append((doc.id, error.line)))
    assert report.documents == 599 and skipped == [("300", 301)]
    assert [r.document_id for r in report.results] == [str(i) for i in range(600) if i != 300]


def test_a_bad_first_document_is_refused_before_the_model_is_taken(tmp_path):
    family = FakeFamily()
    model = family.load(tmp_path, "cpu")
    taken = []

    @contextmanager
    def lend():
        taken.append(model)
        yield model
    with pytest.raises(InputError, match="line 1"):
        engine.run(lend, [Document("a", "  ", line=1)], family=family)
    assert taken == []                                    # a bad schema or blank text costs no load
    report = engine.run(lend, [Document("a", "好", line=1)], family=family)
    assert taken == [model] and report.documents == 1
    with pytest.raises(TypeError, match="family="):
        engine.run(lend, [Document("a", "好")])


def test_the_attention_recorded_is_the_kernel_that_ran_not_the_one_asked_for(tmp_path):
    model = KernelModel(FakeFamily(), tmp_path, "cpu", "fp32")
    model.knobs.attention = "triton"
    assert engine.run(model, documents(2)).attention == "sdpa"
    model.knobs.dtype = "bf16"
    assert engine.run(model, documents(2)).attention == "triton"


@pytest.mark.parametrize("dtype, kernel", [("fp32", "sdpa"), ("bf16", "triton")])
def test_the_fused_attention_optimization_records_the_kernel_the_run_records_once_the_dtype_is_set(
        tmp_path, dtype, kernel):
    """The real optimization on a model "on a GPU" (the double never touches one): the dtype is set after
    the optimizations are enabled, and what the run records for both comes from the model after that."""
    model = KernelModel(FakeFamily(), tmp_path, "cuda:0", "fp32")
    active = engine.settle(model, ["flash-attention"], configured_dtype=dtype)
    assert active == {"flash-attention": kernel} and model.attention_kernel() == kernel


def test_only_the_first_run_on_a_loaded_model_is_marked_as_paying_its_warm_up(tmp_path, store):
    model = FakeModel(FakeFamily(), tmp_path, "cpu", "fp32")
    first, second = engine.run(model, documents(2)), engine.run(model, documents(2))
    assert first.first_after_load and not second.first_after_load
    assert engine.run(FakeModel(FakeFamily(), tmp_path, "cpu", "fp32"), documents(1)).first_after_load
    recorded = [store.record_run(r, documents(2), "cli") for r in (first, second)]
    assert [store.get_run(i).summary.stages.get("first_after_load") for i in recorded] == [True, None]


def test_the_dtype_rule_an_asked_dtype_wins_a_configured_one_applies_where_no_optimization_chose(tmp_path):
    model = FakeFamily().load(tmp_path, "cpu")
    assert engine.run(model, documents(1), RunConfig(configured_dtype="bf16")).dtype == "bf16"
    model.knobs = Knobs(dtype="fp16")                      # as if the precision optimization had chosen fp16
    assert engine.run(model, documents(1), RunConfig(configured_dtype="bf16")).dtype == "fp16"
    assert engine.run(model, documents(1), RunConfig(dtype="fp32", configured_dtype="bf16")).dtype == "fp32"
    assert engine.run(model, documents(1)).dtype == "fp32"          # nothing asked: the knobs as they are


def test_two_threads_never_run_one_model_at_once(tmp_path):
    from tests.workstation.ui.fake_plugin import FakeFamily as IeFamily
    model = IeFamily().load(IeFamily().write_demo_weights(tmp_path / "w"), "cpu")
    docs = [Document(str(i), "Alice " * 20, schema={"Alice": None}) for i in range(300)]

    def work():
        for _ in range(3):
            assert engine.run(model, docs, RunConfig(batch_size=4), keep_results=False).documents == 300
    assert errors_on_threads(work, 4) == [] and model.overlaps == 0


def test_a_model_giving_too_few_results_fails_the_run():
    class Short(FakeModel):
        def extract(self, documents, batch_size=8, on_progress=None, **options):
            yield from list(super().extract(documents, batch_size, **options))[:-1]
    model = Short(FakeFamily(), Path("."), "cpu", "fp32")
    with pytest.raises(RuntimeError, match="returned 2 results for 3 documents"):
        engine.run(model, documents(3))


# ---- every surface: a spy on engine.run ----------------------------------------------------------------

@pytest.fixture
def spy(monkeypatch):
    calls: list[int] = []
    run = engine.run

    def spied(model, docs, *args, **kwargs):
        report = run(model, docs, *args, **kwargs)
        calls.append(report.documents)
        return report
    monkeypatch.setattr(engine, "run", spied)
    return calls


@pytest.fixture
def fake_weights(tmp_path):
    with registered():
        yield FakeFamily().write_demo_weights(tmp_path / "fake-weights")


def test_the_cli_runs_through_engine_run(spy, fake_weights, tmp_path):
    from workstation.cli import main
    (tmp_path / "in.txt").write_text("甲\n乙\n", "utf-8")
    assert main(["extract", "--model", "fake", "--weights", str(fake_weights), "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.jsonl"), "--device", "cpu", "--no-record"]) == 0
    assert spy == [2]


def test_batch_jobs_run_each_slice_through_engine_run(spy, fake_weights, store):
    from workstation.jobs import JobRunner
    job_id = store.create_job(documents(10), "fake", str(fake_weights), 2, [], {}, "in.jsonl", device="cpu")
    assert JobRunner(store, slice_size=4).run_job(job_id).status == "done"
    assert spy == [4, 4, 2]


def test_the_api_runs_a_shared_pass_through_engine_run(spy, fake_weights, store):
    from workstation.api.lanes import LaneRequest, RunConfig
    from workstation.api.state import ApiState
    from workstation.settings import Settings
    state = ApiState(Settings(database=str(store.path)), store=store)
    config = RunConfig("fake", str(fake_weights), "cpu", None, (), (), 4)
    requests = [LaneRequest(config, documents(2)), LaneRequest(config, documents(3))]
    extractions = state._execute(config, requests)
    assert spy == [5] and [e.report.documents for e in extractions] == [2, 3]
    with pytest.raises(InputError, match="line 2"):       # the pass checks the documents, before the model
        state._execute(config, [LaneRequest(config, documents(2, bad=1))])


def test_the_corpus_worker_runs_each_batch_through_engine_run(spy, fake_weights):
    from workstation.corpus.work import ExtractionWorker
    job = {"model": "fake", "weights": str(fake_weights), "device": "cpu", "optimizations": [], "dtype": None,
           "configured_dtype": "fp32", "batch_size": 2, "options": {}}
    rows = [{"shard": "A", "line": n, "total": 3, "id": str(n), "text": text, "schema": None, "task": None,
             "labels": None, "error": None} for n, text in enumerate(["甲", " ", "乙"], start=1)]
    out = ExtractionWorker(job)(pa.Table.from_pylist(rows)).to_pylist()
    assert spy == [2]                                      # the blank one was checked there and skipped
    assert "has no text" in out[1]["error"] and json.loads(out[2]["output"])["id"] == "3"
