"""Triton's installation hash is computed by the first process and read back by later ones, until the installation
changes."""
import json
import types

import pytest

from contracts.torch import triton_key


def package(tmp_path):
    """A stand-in for Triton's package folder, with code in it."""
    folder = tmp_path / "triton"
    (folder / "runtime").mkdir(parents=True)
    (folder / "_C").mkdir()
    (folder / "runtime" / "cache.py").write_text("# cache\n")
    (folder / "_C" / "libtriton.so").write_bytes(b"\0" * 64)
    return folder


def process(folder, key):
    """triton.runtime.cache as a new process finds it: Triton's own triton_key, which counts its calls."""
    calls = []

    def compute():
        calls.append(key)
        return key
    module = types.ModuleType("triton.runtime.cache")
    module.__file__, module.triton_key = str(folder / "runtime" / "cache.py"), compute
    return module, calls


def test_a_second_process_reads_the_key_the_first_one_kept(tmp_path):
    folder = package(tmp_path)
    first, calls = process(folder, "3.6.0-a")
    assert triton_key.remember(first, tmp_path / "cache" / triton_key.FILE)
    assert first.triton_key() == first.triton_key() == "3.6.0-a" and calls == ["3.6.0-a"]
    assert not triton_key.remember(first, tmp_path / "cache" / triton_key.FILE)          # once per process
    later, calls = process(folder, "computed again")
    triton_key.remember(later, tmp_path / "cache" / triton_key.FILE)
    assert later.triton_key() == "3.6.0-a" and calls == []


def test_a_changed_installation_or_a_broken_file_computes_the_key_again(tmp_path):
    folder = package(tmp_path)
    first, _ = process(folder, "old")
    triton_key.remember(first, tmp_path / "cache" / triton_key.FILE)
    first.triton_key()
    (folder / "_C" / "libtriton.so").write_bytes(b"\1" * 65)          # an upgrade: another size
    upgraded, calls = process(folder, "new")
    triton_key.remember(upgraded, tmp_path / "cache" / triton_key.FILE)
    assert upgraded.triton_key() == "new" and calls == ["new"]
    saved = tmp_path / "cache" / triton_key.FILE
    assert json.loads(saved.read_text())["key"] == "new"
    saved.write_text("{not json")
    broken, calls = process(folder, "newer")
    triton_key.remember(broken, tmp_path / "cache" / triton_key.FILE)
    assert broken.triton_key() == "newer" and calls == ["newer"]


def test_the_kept_key_is_tritons_own(tmp_path):
    cache = pytest.importorskip("triton.runtime.cache")
    own = cache.triton_key()
    module = types.ModuleType("triton.runtime.cache")
    module.__file__, module.triton_key = cache.__file__, getattr(cache.triton_key, "__wrapped__", cache.triton_key)
    triton_key.remember(module, tmp_path / triton_key.FILE)
    assert module.triton_key() == own
    assert json.loads((tmp_path / triton_key.FILE).read_text())["key"] == own


def test_a_model_loading_onto_a_gpu_has_the_key_found_in_a_thread_meanwhile(tmp_path, monkeypatch):
    import sys
    runtime = pytest.importorskip("triton.runtime")
    module, calls = process(package(tmp_path), "3.6.0-meanwhile")
    monkeypatch.setitem(sys.modules, "triton.runtime.cache", module)
    monkeypatch.setattr(runtime, "cache", module, raising=False)
    monkeypatch.setenv("IEW_CACHE_DIR", str(tmp_path / "cache"))
    thread = triton_key.remember_triton_key(background=True)
    thread.join(10)
    assert calls == ["3.6.0-meanwhile"]                       # computed once, by the thread, and kept
    assert json.loads((tmp_path / "cache" / triton_key.FILE).read_text())["key"] == "3.6.0-meanwhile"
    assert module.triton_key() == "3.6.0-meanwhile" and calls == ["3.6.0-meanwhile"]
