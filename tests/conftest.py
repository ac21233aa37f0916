"""Shared test setup: CPU only, no installed third-party plugins, tiny generated checkpoints."""
import os
from pathlib import Path

import pytest

# Installed third-party plugins never load in tests, nor in the processes tests start (the CLI, job workers,
# Ray), unless a test names a distribution: a plugin another test is installing or removing meanwhile
# (tests/examples) must not be half-imported there.
os.environ.setdefault("IEW_LOAD_PLUGINS", "")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TRITON_INTERPRET", "1")   # Triton kernels run on the CPU interpreter in tests



def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives the UI or the API from Debian's Chromium (Playwright)")

def _interpreter_scalars_as_loop_bounds():
    """Triton 3.6's interpreter holds a kernel's scalars as 1-element arrays and int() of one fails under
    NumPy >= 2.3, so a loop bound loaded in the kernel (the attention kernel's key range) stops it. Compiled
    kernels are not affected; this lets the interpreter take such bounds too."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    patch = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


_interpreter_scalars_as_loop_bounds()


@pytest.fixture(scope="session")
def rex_tiny(tmp_path_factory) -> Path:
    """A tiny random RexUniNLU checkpoint in the official layout (session-wide, built once)."""
    from plugins.rexuninlu import demo
    # A sparser head than the UI's demo checkpoint: enough spans to test, few enough to stay fast.
    return demo.write(tmp_path_factory.mktemp("rex") / "rexuninlu-tiny", "tiny", seed=0, share=0.02)


@pytest.fixture(scope="session")
def rex_model(rex_tiny):
    from plugins.rexuninlu.family import RexUniNLU
    return RexUniNLU().load(rex_tiny)


@pytest.fixture(scope="session")
def seqgpt_tiny(tmp_path_factory) -> Path:
    """The tiny random SeqGPT demo checkpoint (2 layers, width 128, fp16 pytorch_model.bin)."""
    from plugins.seqgpt import demo
    return demo.write(tmp_path_factory.mktemp("seqgpt") / "seqgpt-tiny", "tiny")


@pytest.fixture
def store(tmp_path):
    """An empty history database in tmp_path (tests/storage has its own, one folder down)."""
    from storage import open_store
    s = open_store(tmp_path / "runs.db")
    yield s
    s.close()
