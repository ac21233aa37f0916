"""On a CUDA GPU only (skipped elsewhere; run with TRITON_INTERPRET=0): the kernels compiled ahead, and their launchers,
are the ones the captures then launch, at every captured shape, whatever its rows (contracts/torch/triton_ahead.py)."""
import pytest
import torch

from plugins.rexuninlu import triton_attention

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and triton_attention.available()),
                                reason="needs a CUDA GPU and triton")


def test_compiling_ahead_leaves_no_kernel_for_the_captures_to_compile(tmp_path, monkeypatch):
    import triton

    from plugins.rexuninlu import demo
    from plugins.rexuninlu.family import RexUniNLU
    model = RexUniNLU().load(demo.write(tmp_path / "full", "full", seed=0), device="cuda")
    model.set_dtype("bf16")
    model.network.attention_backend = model.knobs.attention = "triton"
    model.knobs.cuda_graphs = True
    from triton.runtime import build
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))      # a machine's first run: nothing on disk
    misses = []             # a kernel not in Triton's memory: compiled, or read from its disk cache, there and then
    monkeypatch.setattr(triton.knobs.runtime, "jit_cache_hook", lambda **hook: misses.append(hook["fn"].name))
    launchers = []          # a C module built with the host compiler: a kernel's launcher, or Triton's own utilities
    real_build = build._build
    monkeypatch.setattr(build, "_build", lambda name, *rest: launchers.append(name) or real_build(name, *rest))
    scorer = model.scorer
    scorer.batch_rows = 64
    scorer.compile_ahead()
    assert "_disentangled_fwd" in misses and "_rotary_parts_fwd" in misses
    misses.clear()
    launchers.clear()
    scorer.capture_all()
    assert len(scorer.graphs) == len(scorer.graph_shapes())
    assert misses == [] and launchers == []         # every kernel and its launcher came ready from the compiles ahead
