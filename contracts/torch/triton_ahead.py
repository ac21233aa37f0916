"""A model's Triton kernels compiled side by side before its first pass, instead of one after another inside it.

On a machine that never ran a kernel, each variant a pass meets (RexUniNLU's attention has one per captured length)
is compiled where the pass first launches it, one after the other: most of a first run's 4.4–5.4 s of warm-up on
an H100 (docs/benchmarks.md). Most of a compile, LLVM's code generation and ptxas, runs without Python's interpreter
lock, so several can run at once in threads.

`ahead(passes)` runs the model's passes once with every launch made through `launch` turned into a compile handed to
Triton's own AsyncCompileMode (a thread pool), then waits for them all. The passes' other work still runs, on inputs
nothing reads, so each kernel meets the tensors, strides and constants the real passes give it, and the compiles
found are the ones those passes need. A later launch finds its kernel compiled, in memory and in Triton's on-disk
cache. Each compile also builds its kernel's launcher: a small C module Triton otherwise builds with the host's C
compiler where a kernel of that signature is first launched, one after another on the launching thread (1.4 s of a
4.7 s cold warm-up on an H100, docs/benchmarks.md); built here, side by side, it waits in Triton's disk cache. A
Triton without AsyncCompileMode (a private module) compiles as before, inside the passes."""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Callable

log = logging.getLogger(__name__)

_compiling_ahead: ContextVar[bool] = ContextVar("compiling_ahead", default=False)


def launch(kernel, grid, *args, **meta) -> None:
    """`kernel[grid](*args, **meta)`, as a model's module launches it; inside `ahead`, its compile is handed off and
    nothing runs (Triton's warm-up call: it compiles for these arguments, or finds the kernel compiled)."""
    if _compiling_ahead.get():
        kernel.run(*args, grid=grid, warmup=True, **meta)
    else:
        kernel[grid](*args, **meta)


def ahead(passes: Callable[[], object], threads: int | None = None) -> bool:
    """Run `passes` (the model's forward passes, outputs thrown away) with their Triton launches compiled in up to
    `threads` threads at once, and return once every compile is done. False where this Triton cannot compile
    asynchronously: then nothing ran."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return False
    with _CompileAndBuildLauncher(max_workers=threads or min(8, os.cpu_count() or 1),
                                  thread_name_prefix="triton-compile") as pool:
        with AsyncCompileMode(pool):         # its exit waits for every compile it was handed
            token = _compiling_ahead.set(True)
            try:
                passes()
            finally:
                _compiling_ahead.reset(token)
    return True


def build_utilities_meanwhile() -> threading.Thread:
    """Start building Triton's CUDA utilities in a thread, for a model loading onto a GPU. They are a C module Triton
    builds with the host's C compiler where its first compile creates its driver, on that compile's thread (0.39 s
    of a 4.69 s cold warm-up on an H100). Built here while the model loads, into Triton's disk cache, they are only
    loaded then. Only a saving: a failure, or a driver created meanwhile, leaves them to the first compile."""
    def work():
        try:
            from triton.runtime.driver import driver
            if getattr(driver, "_default", None) is not None:         # created already: built or loaded
                return
            from triton.backends.nvidia.driver import CudaUtils
            CudaUtils()           # one instance per process; a second construction only loads the built module
        except Exception as e:      # noqa: BLE001  (a private interface of Triton's: any failure only loses the saving)
            log.debug("building Triton's CUDA utilities ahead failed (%s); its first compile builds them", e)
    thread = threading.Thread(target=work, name="triton-utilities", daemon=True)
    thread.start()
    return thread


class _CompileAndBuildLauncher(ThreadPoolExecutor):
    """The pool AsyncCompileMode hands its compiles to: each compile, once done, builds its kernel's launcher in the
    same thread (one per distinct signature; the host compiler runs as a process of its own, without the lock)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._claimed: set[str] = set()
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        def compile_then_build_launcher():
            kernel = fn(*args, **kwargs)
            self.build_launcher(kernel)
            return kernel
        return super().submit(compile_then_build_launcher)

    def build_launcher(self, kernel) -> None:
        """What a kernel's first launch builds (CompiledKernel._init_handles: driver.active.launcher_cls), made here
        so that Triton's disk cache holds it; the launch then only loads it. Only a saving: a failure leaves the
        build to the first launch, as before."""
        try:
            src, metadata = kernel.src, kernel.metadata
            # Triton 3.6 writes a launcher from the argument types alone; a Triton that also wrote constants in would
            # only see its other variants built at their first launch, as before.
            key = repr((tuple(src.signature.values()), getattr(metadata, "tensordesc_meta", None)))
            with self._lock:
                if key in self._claimed:
                    return
                self._claimed.add(key)
            from triton.runtime.driver import driver
            driver.active.launcher_cls(src, metadata)
        except Exception as e:      # noqa: BLE001  (a private interface of Triton's: any failure only loses the saving)
            log.debug("building a Triton launcher ahead failed (%s); its first launch builds it", e)
