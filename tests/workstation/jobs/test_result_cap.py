"""At most max_tuples_per_document tuples per document, with a warning, on every surface (engine.run)."""
from __future__ import annotations

from tests.workstation.jobs.test_job_runner import create, documents
from workstation import engine, settings
from workstation.jobs import JobRunner
from workstation.run_config import RunConfig


def test_a_document_with_more_tuples_than_the_cap_keeps_the_first_and_says_so(fake, weights):
    model = engine.load_model("fake", weights, "cpu")
    report = engine.run(model, documents(2), RunConfig(batch_size=4, max_tuples=3, options={'tuples': 5}))
    for result in report.results:
        assert len(result.tuples) == 3
        assert result.warnings == ["2 more tuple(s) were dropped: at most 3 are kept per document "
                                   "([results] max_tuples_per_document in settings.toml)"]
    untouched = engine.run(model, documents(1), RunConfig(batch_size=4, max_tuples=5, options={'tuples': 5})).results[0]
    assert len(untouched.tuples) == 5 and untouched.warnings == []
    no_limit = RunConfig(batch_size=4, max_tuples=0, options={'tuples': 7})
    assert len(engine.run(model, documents(1), no_limit).results[0].tuples) == 7   # 0: no limit


def test_a_batch_job_stores_results_capped_by_settings_toml(store, fake, weights, tmp_path, monkeypatch):
    path = tmp_path / "settings.toml"
    path.write_text("[results]\nmax_tuples_per_document = 2\n", encoding="utf-8")
    monkeypatch.setattr(settings, "DEFAULT_PATH", path)
    job_id = create(store, weights, n=3, options={"tuples": 4})
    runner = JobRunner(store, slice_size=2)
    runner.submit(job_id)
    assert runner.wait(job_id, timeout=60)
    job = store.get_job(job_id)
    assert job.status == "done", job.error
    for _, result in store.get_run(job.run_id).items:
        assert len(result.tuples) == 2 and "2 more tuple(s) were dropped" in result.warnings[0]


def test_the_default_cap_is_ten_thousand_tuples():
    assert settings.Settings().max_tuples_per_document == 10_000


def test_a_finished_job_is_recorded_in_chunks_and_an_interrupted_copy_resumes(store, fake, weights, monkeypatch):
    from tests.workstation.jobs.test_job_runner import assert_each_document_once_in_order
    docs = documents(10)
    job_id = create(store, weights, docs=docs)
    store.CHUNK_DOCUMENTS = 3
    real, copies = type(store)._copy_chunk, []

    def interrupted(self, job, run):
        copies.append(run)
        if len(copies) == 2:
            raise RuntimeError("killed while copying")
        return real(self, job, run)

    monkeypatch.setattr(type(store), "_copy_chunk", interrupted)
    runner = JobRunner(store, slice_size=4)
    assert runner.run_job(job_id).status == "failed"
    assert store.search_runs() == []                     # the part-written run is not in History
    monkeypatch.setattr(type(store), "_copy_chunk", real)
    assert store.requeue_job(job_id)
    runner.run_job(job_id)
    job, run = assert_each_document_once_in_order(store, job_id, docs)
    assert job.run_id == copies[0] and [r.id for r in store.search_runs()] == [job.run_id]
