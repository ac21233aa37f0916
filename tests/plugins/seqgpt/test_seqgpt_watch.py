"""One long document watched and stopped while it is inside the model (the Extract page's progress and Cancel)."""
import threading

import pytest

from contracts.domain import Document
from contracts.stages import Cancelled
from workstation import engine
from workstation.run_config import RunConfig

SETTINGS = dict(num_beams=2, max_new_tokens=8, label_batch=1)
LABELS = ["人物", "地点", "组织机构", "时间", "产品", "事件"]


def long_document() -> Document:
    return Document("1", "童装红蜻蜓团体温州儿童用品有限公司是红蜻蜓团体旗下全资子公司，创立于2003年。",
                    task="ext", labels=LABELS)


class CancelAfter(threading.Event):
    """A cancel event that reads as set from its n-th check on (a person pressing Cancel mid-run, without
    a race against the clock)."""

    def __init__(self, checks: int):
        super().__init__()
        self.left = checks

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0 or super().is_set()


def test_a_run_counts_its_prompts_tokens_and_steps(loaded):
    clocks = []
    engine.run(loaded, [long_document()], RunConfig(batch_size=1, options=SETTINGS), on_clock=clocks.append)
    progress = clocks[0].progress()
    assert progress["prompts_planned"] == progress["prompts_done"] == len(LABELS)     # one prompt per label
    assert progress["tokens_generated"] > 0 and progress["steps"] >= len(LABELS)


def test_a_cancel_stops_one_document_between_its_decoding_steps(loaded):
    clocks = []
    engine.run(loaded, [long_document()], RunConfig(batch_size=1, options=SETTINGS), on_clock=clocks.append)
    full_steps = clocks[0].steps
    with pytest.raises(Cancelled):
        engine.run(loaded, [long_document()], RunConfig(batch_size=1, options=SETTINGS), on_clock=clocks.append,
                   cancel=CancelAfter(4))
    # the engine checks once before the slice; the model's device brackets check the rest
    assert 0 < clocks[1].steps < full_steps
    assert clocks[1].progress()["prompts_done"] < len(LABELS)
