"""Which attention kernel runs: one answer (LoadedRex.resolve_attention) for the run's `attention` and for what
the fused-attention optimization records. The decision on CPU with the real plugins (the device is named a
GPU, nothing runs there); on a CUDA GPU (skipped elsewhere; CUDA_VISIBLE_DEVICES set, TRITON_INTERPRET=0) a
real run whose record must agree with itself."""
import pytest
import torch

from contracts.domain import Document
from contracts.names import Kernel
from plugins.optimizations.fused_attention import FusedAttention
from plugins.rexuninlu import triton_attention
from plugins.rexuninlu.family import RexUniNLU
from workstation import engine
from workstation.run_config import RunConfig


@pytest.fixture
def on_gpu(rex_tiny, monkeypatch):
    """A fresh tiny RexUniNLU named as being on a GPU with Triton installed: the decision only."""
    model = RexUniNLU().load(rex_tiny)
    model.device = "cuda:0"
    monkeypatch.setattr(triton_attention, "available", lambda: True)
    return model


def test_in_fp32_the_optimization_asks_for_triton_and_says_sdpa_runs_as_the_model_does(on_gpu):
    flash = FusedAttention()
    assert flash.kernel_for(on_gpu) == Kernel.TRITON
    assert flash.enable(on_gpu) == Kernel.SDPA == on_gpu.attention_kernel() == flash.running(on_gpu)
    applies, reason = flash.applies_to(on_gpu)
    assert applies and reason.startswith("asks for the triton kernel; sdpa runs now") and "fp32" in reason
    assert on_gpu.describe()["attention"] == Kernel.SDPA


def test_in_bf16_triton_runs_and_both_records_say_so(on_gpu):
    flash = FusedAttention()
    flash.enable(on_gpu)
    on_gpu.knobs.dtype = "bf16"               # as set_dtype leaves it (no cast needed for the decision)
    assert on_gpu.attention_kernel() == Kernel.TRITON == flash.running(on_gpu)
    assert flash.applies_to(on_gpu) == (True, "runs the triton kernel")


@pytest.mark.parametrize("device, available, why", [
    ("cpu", True, "needs a CUDA GPU"), ("cuda:0", False, "Triton is not installed")])
def test_triton_that_cannot_run_falls_back_to_sdpa_and_says_why(rex_tiny, monkeypatch, device, available, why):
    model = RexUniNLU().load(rex_tiny)
    model.device, model.knobs.dtype = device, "bf16"
    monkeypatch.setattr(triton_attention, "available", lambda: available)
    runs, reason = model.resolve_attention(Kernel.TRITON)
    assert runs == Kernel.SDPA and why in reason
    assert model.resolve_attention(Kernel.EAGER) == (Kernel.EAGER, "")


on_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@on_cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_on_cuda_the_recorded_optimization_and_the_attention_agree(tmp_path, dtype):
    from plugins.rexuninlu import demo
    # The full-size architecture (random weights), whose heads the compiled kernel is built for, as in
    # test_triton_attention_cuda.py.
    model = RexUniNLU().load(demo.write(tmp_path / "full", "full", seed=0), "cuda")
    docs = [Document(str(i), "张三生于北京。", schema={"人物": None, "地点": None}) for i in range(4)]
    report = engine.run(model, docs, RunConfig(batch_size=2, optimizations=["flash-attention"], dtype=dtype))
    expected = Kernel.TRITON if dtype == "bf16" and triton_attention.available() else Kernel.SDPA
    assert report.optimizations["flash-attention"] == report.attention == expected
    assert model.network.attention_backend == expected        # the kernel the forward pass was given


@on_cuda
def test_on_cuda_seqgpt_records_the_same_kernel_for_both(tmp_path):
    from plugins.seqgpt.family import SeqGPT
    model = SeqGPT().load(SeqGPT().write_demo_weights(tmp_path / "seqgpt-tiny", "tiny"), "cuda")
    docs = [Document("1", "张三生于北京。", task="ext", labels=["人物"])]
    report = engine.run(model, docs, RunConfig(batch_size=1, optimizations=["flash-attention"], dtype="fp32",
                                               options={"max_new_tokens": 4}))
    # flash-attn (when installed) has fp16/bf16 kernels only: SDPA runs, and both records say so
    assert report.optimizations["flash-attention"] == report.attention == Kernel.SDPA
