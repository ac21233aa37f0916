"""bf16 and fp16 on the user's RTX 4090 (Ada, compute capability 8.9), with the GPU's capability faked on the CPU."""
from pathlib import Path

import pytest
import torch

from plugins.optimizations.precision import reduced_dtype
from workstation import plugins


@pytest.mark.parametrize("capability, dtype", [((8, 9), "bf16"), ((9, 0), "bf16"), ((8, 0), "bf16"),
                                               ((8, 6), "bf16"), ((7, 5), "fp16"), ((6, 1), "fp16")])
def test_the_reduced_precision_is_bf16_from_ampere_on_ada_included_and_fp16_before(capability, dtype):
    assert reduced_dtype(capability) == dtype


class FakeGpuModel:
    """What the precision plugin reads of a loaded model, on a CUDA device that is not there."""

    def __init__(self, device):
        from contracts.names import Capability
        self.device, self.capabilities, self.casts = device, frozenset({Capability.REDUCED_PRECISION}), []
        self.knobs = type("Knobs", (), {"dtype": "fp32"})()

    def set_dtype(self, dtype):
        self.casts.append(dtype)
        self.knobs.dtype = dtype


def test_precision_without_a_dtype_takes_the_choice_of_the_models_own_gpu(monkeypatch):
    capabilities = {"cuda:0": (7, 5), "cuda:1": (8, 9)}         # a Turing card beside an Ada one
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: asked.append(d) or capabilities[d])
    precision = plugins.optimizations()["precision"]
    ada, turing = FakeGpuModel("cuda:1"), FakeGpuModel("cuda:0")
    ok, reason = precision.applies_to(ada)
    assert ok and "bf16" in reason
    assert precision.enable(ada) == "bf16" and ada.casts == ["bf16"]
    assert precision.enable(turing) == "fp16" and turing.casts == ["fp16"]
    assert precision.enable(ada, dtype="fp16") == "fp16" and ada.casts == ["bf16", "fp16"]     # asked for: kept
    assert set(asked) == {"cuda:0", "cuda:1"}


def test_the_fp16_paths_overflow_guards_are_the_same_code_on_every_gpu():
    """fp16's guards (scores masked at the dtype's finite minimum, not -inf; the span head and norms in fp32)
    hold on an Ada card exactly as on the H200, where the CUDA tests check them, because no model code asks
    which GPU it runs on: only the precision plugin reads the capability, to pick bf16 or fp16."""
    root = Path(__file__).resolve().parents[3]
    readers = sorted(str(p.relative_to(root)) for folder in ("plugins", "contracts") for p in (root / folder).rglob("*.py")
                     if "get_device_capability" in p.read_text("utf-8"))
    assert readers == ["plugins/optimizations/precision.py"]
