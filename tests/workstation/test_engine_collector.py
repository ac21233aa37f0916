"""engine.run keeps what existed before the run out of the cyclic garbage collector while it runs, and only then."""
from __future__ import annotations

import gc
import threading

import pytest

from contracts.domain import Document
from tests.workstation.test_empty_spans import QuirkyModel
from workstation import engine


def test_objects_from_before_the_run_are_set_aside_during_it_and_given_back_after():
    before = gc.get_freeze_count()
    during = []
    engine.run(QuirkyModel(), [Document("1", "张三生于北京。")], on_result=lambda *_: during.append(gc.get_freeze_count()))
    assert during and during[0] > before
    assert gc.get_freeze_count() == before


def test_a_failing_run_gives_them_back_too():
    before = gc.get_freeze_count()

    def fail(*_):
        raise RuntimeError("writer failed")
    with pytest.raises(RuntimeError, match="writer failed"):
        engine.run(QuirkyModel(), [Document("1", "张三生于北京。")], on_result=fail)
    assert gc.get_freeze_count() == before


def test_concurrent_runs_give_them_back_when_the_last_one_ends():
    before = gc.get_freeze_count()
    inside, release = threading.Event(), threading.Event()

    def slow(*_):
        inside.set()
        release.wait(10)
    first = threading.Thread(target=engine.run, args=(QuirkyModel(), [Document("1", "张三")]), kwargs={"on_result": slow})
    first.start()
    assert inside.wait(10)
    engine.run(QuirkyModel(), [Document("2", "李四")])          # starts and ends inside the first run
    assert gc.get_freeze_count() > before                      # the first run still holds them aside
    release.set()
    first.join(10)
    assert gc.get_freeze_count() == before
