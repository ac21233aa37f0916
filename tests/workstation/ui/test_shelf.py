"""The model shelf: one model per device, shared, freed when replaced, never used by two runs at once."""
from __future__ import annotations

import gc
import weakref

from contracts.domain import Document
from tests.threads import errors_on_threads
from tests.workstation.ui.fake_plugin import FakeFamily
from workstation.run_config import RunConfig
from workstation.shelf import ModelShelf


def shelf_with(tmp_path):
    family = FakeFamily()
    shelf = ModelShelf(load=lambda name, weights, device, dtype: family.load(weights, device, dtype))
    a, b = family.write_demo_weights(tmp_path / "a"), family.write_demo_weights(tmp_path / "b")
    return family, shelf, a, b


def test_the_same_key_reuses_the_loaded_model(tmp_path):
    family, shelf, a, _ = shelf_with(tmp_path)
    key = ModelShelf.key("fakeie", a, "cpu", "fp32")
    with shelf.borrow(key) as first:
        pass
    with shelf.borrow(key) as second:
        assert second is first
    assert len(family.loads) == 1 and shelf.loaded() == [key]


def test_switching_weights_on_a_device_frees_the_old_model_before_loading(tmp_path):
    family, shelf, a, b = shelf_with(tmp_path)
    with shelf.borrow(ModelShelf.key("fakeie", a, "cpu", "fp32")) as old:
        gone = weakref.ref(old)
    del old
    with shelf.borrow(ModelShelf.key("fakeie", b, "cpu", "fp32")) as new:
        assert new.weights == b
    gc.collect()
    assert gone() is None                       # nothing kept the old weights alive
    assert [k[1] for k in shelf.loaded()] == [str(b)]


def test_a_reload_type_optimization_set_is_part_of_the_key(tmp_path):
    family, shelf, a, _ = shelf_with(tmp_path)
    with shelf.borrow(ModelShelf.key("fakeie", a, "cpu", "fp32")):
        pass
    with shelf.borrow(ModelShelf.key("fakeie", a, "cpu", "fp32", frozenset({"fused"}))):
        pass
    assert len(family.loads) == 2 and len(shelf.loaded()) == 1


def test_runs_from_many_threads_never_overlap_on_one_model(tmp_path):
    family, shelf, a, _ = shelf_with(tmp_path)
    key = ModelShelf.key("fakeie", a, "cpu", "fp32")
    docs = [Document(str(i), "Alice " * 50, schema={"Alice": None}) for i in range(20)]
    models = []

    def work():
        for _ in range(5):
            with shelf.borrow(key) as model:
                models.append(model)
                assert len(list(model.extract(docs))) == 20
    assert errors_on_threads(work, 6) == []
    assert len({id(m) for m in models}) == 1 and models[0].overlaps == 0


def test_evict_unloads_everything(tmp_path):
    _, shelf, a, _ = shelf_with(tmp_path)
    with shelf.borrow(ModelShelf.key("fakeie", a, "cpu", "fp32")) as model:
        gone = weakref.ref(model)
    del model
    shelf.evict()
    gc.collect()
    assert gone() is None and shelf.loaded() == []


def test_a_job_keeps_its_optimizations_while_a_page_toggles_others_between_its_slices(tmp_path, store, fake_plugin):
    """The rule (workstation/jobs.py): each slice sets the job's optimizations on the shared model under its
    lock, and a page's run in between sets its own; neither leaks into the other's runs."""
    from contextlib import contextmanager

    from workstation import engine
    from workstation.jobs import JobRunner
    weights = fake_plugin.family.write_demo_weights(tmp_path / "w")
    shelf = ModelShelf()
    page_key = ModelShelf.key("fakeie", weights, "cpu", "fp32")
    docs = [Document(str(i), "Alice in Paris", schema={"Alice": None}) for i in range(12)]
    job_id = store.create_job(docs, "fakeie", str(weights), 2, [], {}, "in.jsonl", device="cpu")
    during_job, page_reports = [], []

    @contextmanager
    def borrow(job, device):
        with shelf.borrow_for_job(job, device) as model:
            yield model
            during_job.append(dict(model.knobs.extra))    # the knobs the job's slice ran with
        # a page run between two slices, with an optimization switched on in the UI
        page_reports.append(engine.run(lambda: shelf.borrow(page_key), docs[:1],
                                       RunConfig(optimizations=["fake-fast"], only_applicable=True),
                                       family=fake_plugin.family))
    job = JobRunner(store, slice_size=4, borrow=borrow).run_job(job_id)
    assert job.status == "done" and during_job == [{}, {}, {}]
    assert [r.optimizations for r in page_reports] == [{"fake-fast": "fast path"}] * 3
    assert store.get_run(job.run_id).summary.optimizations == {}
    assert len(fake_plugin.family.loads) == 1                 # one model, taken in turns
