"""Triton's compiles handed to a thread pool before a model's first pass: launches inside `ahead` compile and run
nothing, the compiles run side by side, and `ahead` returns once all are done."""
import threading

import pytest
import torch

from contracts.torch import triton_ahead

triton = pytest.importorskip("triton")
async_compile = pytest.importorskip("triton.runtime._async_compile")
tl = pytest.importorskip("triton.language")


@triton.jit
def _fill_ones(X, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(X + cols, 1.0, mask=cols < n)


def test_a_launch_inside_ahead_runs_nothing_and_outside_it_runs():
    x = torch.zeros(8)
    assert triton_ahead.ahead(lambda: triton_ahead.launch(_fill_ones, (1,), x, 8, BLOCK=8))
    assert x.sum() == 0                          # Triton's warm-up call: compiled (not in the interpreter), not run
    triton_ahead.launch(_fill_ones, (1,), x, 8, BLOCK=8)
    assert x.sum() == 8


class CompilingKernel:
    """What a @triton.jit kernel does with a warm-up call under AsyncCompileMode (triton/runtime/jit.py, 3.6): hand
    its compile to the mode, keyed on its specialisation, and keep the result once the compile is done."""

    def __init__(self, compile_fn):
        self.compile_fn, self.compiled = compile_fn, {}

    def run(self, *args, grid, warmup, **meta):
        assert warmup
        key = (args, tuple(sorted(meta.items())))
        mode = async_compile.active_mode.get()
        return mode.submit(key, lambda: self.compile_fn(key), lambda kernel: self.compiled.update({key: kernel}))


def test_the_compiles_run_side_by_side_and_are_all_done_when_ahead_returns():
    both = threading.Barrier(3, timeout=10)    # passed only by three compiles running at once

    def compile_fn(key):
        both.wait()
        return f"binary for {key}"
    kernel = CompilingKernel(compile_fn)
    assert triton_ahead.ahead(lambda: [triton_ahead.launch(kernel, (1,), n, L=n) for n in (128, 256, 384, 128)],
                              threads=3)
    assert sorted(k[0] for k in kernel.compiled) == [(128,), (256,), (384,)]    # one compile per specialisation


def test_a_triton_without_async_compiles_leaves_the_passes_to_compile_as_before(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "triton.runtime._async_compile", None)       # an import that fails
    ran = []
    assert not triton_ahead.ahead(lambda: ran.append(1))
    assert not ran


def test_the_scorer_compiles_each_captured_length_once_before_its_first_capture(rex_model, monkeypatch):
    # The real fused path on Triton's interpreter: every launch of the throwaway passes is a warm-up call (nothing
    # runs), the passes survive outputs nobody wrote, and the attention kernel is met at each captured length.
    from triton.runtime.interpreter import InterpretedFunction

    from plugins.rexuninlu.scoring import GRAPH_QUANTUM
    calls = []
    run = InterpretedFunction.run

    def recorded(self, *args, grid, warmup, **meta):
        calls.append((self.fn.__name__, warmup, meta.get("L")))
        return run(self, *args, grid=grid, warmup=warmup, **meta)
    monkeypatch.setattr(InterpretedFunction, "run", recorded)
    scorer, net = rex_model.scorer, rex_model.network
    monkeypatch.setattr(scorer, "batch_rows", 16)
    monkeypatch.setattr(scorer, "_compiled_ahead", set())
    monkeypatch.setattr(net, "attention_backend", "eager")
    scorer.compile_ahead()
    assert calls == [] and not scorer._compiled_ahead                 # no Triton kernel on this path: nothing to do
    monkeypatch.setattr(net, "attention_backend", "triton")
    scorer.compile_ahead()
    scorer.compile_ahead()                                            # once per dtype
    assert calls and all(warmup for _, warmup, _ in calls)
    lengths = [L for name, _, L in calls if name == "_disentangled_fwd"]         # one call per layer and length
    assert list(dict.fromkeys(lengths)) == list(range(4 * GRAPH_QUANTUM, 0, -GRAPH_QUANTUM))
    assert {name for name, _, _ in calls} == {"_disentangled_fwd", "_add_norm_fwd", "_taps_fwd"}
    before = len(calls)
    monkeypatch.setattr(scorer.knobs, "dtype", "fp16")                 # another dtype: its kernels are others
    scorer.compile_ahead()
    assert len(calls) == 2 * before


def test_a_failed_compile_ahead_leaves_the_compiles_to_the_first_passes(rex_model, monkeypatch, caplog):
    def broken(passes, threads=None):
        raise RuntimeError("a compile thread failed")
    monkeypatch.setattr(triton_ahead, "ahead", broken)
    monkeypatch.setattr(rex_model.scorer, "_compiled_ahead", set())
    monkeypatch.setattr(rex_model.network, "attention_backend", "triton")
    rex_model.scorer.compile_ahead()
    assert "a compile thread failed" in caplog.text


class Compiled:
    """What a compile gives (triton.compiler.CompiledKernel): its source, whose argument types the launcher follows."""

    def __init__(self, types):
        self.src = type("Source", (), {"signature": dict(enumerate(types))})()
        self.metadata = type("Metadata", (), {"tensordesc_meta": None})()


def test_each_compile_builds_its_launcher_ahead_once_per_signature_side_by_side(monkeypatch):
    # A kernel's launcher is a C module Triton builds with the host compiler where the kernel is first launched, one
    # after another on the launching thread; built in the compile threads, the first launches find it on disk.
    from triton.runtime.driver import driver
    both = threading.Barrier(2, timeout=10)      # passed only by two launchers built at once
    built = []

    class Driver:
        def launcher_cls(self, src, metadata):
            both.wait()
            built.append((threading.current_thread().name, tuple(src.signature.values())))
    monkeypatch.setattr(driver, "_active", Driver())
    kernel = CompilingKernel(lambda key: Compiled(("*bf16", "i32") if key[0][0] < 300 else ("*fp32", "i32")))
    assert triton_ahead.ahead(lambda: [triton_ahead.launch(kernel, (1,), n) for n in (128, 256, 384, 512)],
                              threads=4)
    assert sorted(types for _, types in built) == [("*bf16", "i32"), ("*fp32", "i32")]    # once each, before return
    assert all(name.startswith("triton-compile") for name, _ in built)


def test_a_launcher_that_fails_to_build_ahead_is_left_to_the_first_launch(monkeypatch):
    from triton.runtime.driver import driver

    class Driver:
        def launcher_cls(self, src, metadata):
            raise RuntimeError("no C compiler")
    monkeypatch.setattr(driver, "_active", Driver())
    kernel = CompilingKernel(lambda key: Compiled(("*bf16",)))
    assert triton_ahead.ahead(lambda: triton_ahead.launch(kernel, (1,), 128))
    assert len(kernel.compiled) == 1                        # the compile itself stands


def fake_utilities(monkeypatch, build):
    import sys
    import types
    module = types.ModuleType("triton.backends.nvidia.driver")
    module.CudaUtils = build
    monkeypatch.setitem(sys.modules, "triton.backends.nvidia.driver", module)


def test_tritons_utilities_are_built_in_a_thread_while_the_model_loads(monkeypatch):
    from triton.runtime.driver import driver
    built = []
    fake_utilities(monkeypatch, lambda: built.append(threading.current_thread().name))
    monkeypatch.setattr(driver, "_default", None)               # no compile has created Triton's driver yet
    triton_ahead.build_utilities_meanwhile().join(10)
    assert built == ["triton-utilities"]


def test_a_driver_already_made_or_a_failed_build_leaves_the_utilities_to_the_first_compile(monkeypatch):
    from triton.runtime.driver import driver
    built = []
    fake_utilities(monkeypatch, lambda: built.append(1))
    monkeypatch.setattr(driver, "_default", object())           # created: it built or loaded them already
    triton_ahead.build_utilities_meanwhile().join(10)
    assert built == []

    def broken():
        raise RuntimeError("no C compiler")
    fake_utilities(monkeypatch, broken)
    monkeypatch.setattr(driver, "_default", None)
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    thread = triton_ahead.build_utilities_meanwhile()
    thread.join(10)
    assert not thread.is_alive() and raised == []               # ended quietly: only a saving was lost
