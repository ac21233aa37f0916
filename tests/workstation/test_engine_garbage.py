"""A run leaves no reference cycles behind. engine.run keeps the objects alive at its start out of the cyclic
collector (gc.freeze), so garbage that only a full collection frees piles up in a server that runs pass after
pass: a nested recursive function per document grew the API server by about 0.7 KiB a request."""
from __future__ import annotations

import gc

import pytest

from contracts.domain import Document
from workstation import engine
from workstation.run_config import RunConfig


@pytest.fixture(scope="module")
def seqgpt_model(seqgpt_tiny):
    from plugins.seqgpt.family import SeqGPT
    return SeqGPT().load(seqgpt_tiny)


def cyclic_garbage(run) -> list:
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.parametrize("fixture, documents", [
    ("rex_model", [Document(f"d{i}", f"{i}. 张三在北京的清华大学工作。", {"人物": None, "组织机构": {"成立日期(时间)": None}},
                            None, None, line=i + 1) for i in range(6)]),
    ("seqgpt_model", [Document(f"d{i}", f"{i}. Alice works in Paris.", None, "ext", ["person", "city"], line=i + 1)
                      for i in range(4)]),
])
def test_runs_leave_no_reference_cycles(fixture, documents, request):
    model = request.getfixturevalue(fixture)
    config = RunConfig(model=model.family.name, batch_size=4)
    engine.run(model, documents, config)                              # the first run builds what stays
    garbage = cyclic_garbage(lambda: [engine.run(model, documents, config) for _ in range(3)])
    assert not garbage, f"{len(garbage)} objects in cycles, e.g. {[type(o).__name__ for o in garbage[:8]]}"


class Node:
    def __init__(self):
        self.me = self                  # a reference cycle: only the cyclic collector frees it


def test_cycles_older_than_a_run_are_freed_by_a_run_that_ends_after_the_interval(rex_model, monkeypatch):
    # A busy server is always inside some run, so garbage that reached the oldest generation before a run's
    # freeze is never looked at, unless a run that ends after the interval collects it.
    import weakref
    documents = [Document("d0", "张三在北京工作。", {"人物": None}, None, None, line=1)]
    config = RunConfig(model="rexuninlu", batch_size=4)
    node = Node()
    gone = weakref.ref(node)
    gc.collect()                                        # the node survives into the oldest generation
    del node
    gc.disable()                                        # no automatic collection: only the run's own
    try:
        monkeypatch.setattr(engine, "FULL_COLLECTION_EVERY_S", 3600.0)
        engine.run(model=rex_model, documents=documents, config=config)
        assert gone() is not None                       # within the interval: left for later
        monkeypatch.setattr(engine, "FULL_COLLECTION_EVERY_S", 0.0)
        engine.run(model=rex_model, documents=documents, config=config)
        assert gone() is None
    finally:
        gc.enable()
