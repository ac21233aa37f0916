"""Compile caches on disk beside the history database, pointed at by the launcher before torch is imported, so a
second process finds what the first compiled (Triton's own cache lookup, on the CPU: no kernel is compiled)."""
from __future__ import annotations

import os
import subprocess
import sys

from workstation.settings import ROOT

# A child as launcher.main sets itself up, then Triton's cache manager: where it looks, and whether it finds the
# entry the previous child put there.
PROBE = """
import sys
import launcher
launcher.point_compile_caches()
assert "torch" not in sys.modules and "triton" not in sys.modules
from triton.runtime.cache import get_cache_manager
cache = get_cache_manager("ab" * 32)
print(cache.cache_dir)
print(cache.get_file("kernel.bin") is not None)
cache.put(b"compiled", "kernel.bin")
"""


def probe(env: dict) -> tuple[str, bool]:
    clean = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                                                              "IEW_CACHE_DIR", "IEW_SETTINGS")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                          timeout=120, check=True, cwd=ROOT)
    folder, found = done.stdout.split()
    return folder, found == "True"


def test_a_second_process_finds_in_the_cache_beside_the_history_what_the_first_put_there(tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[storage]\ndatabase = "{tmp_path / "store" / "runs.db"}"\n', "utf-8")
    first_folder, first_found = probe({"IEW_SETTINGS": str(settings)})
    second_folder, second_found = probe({"IEW_SETTINGS": str(settings)})
    assert first_folder == second_folder and first_folder.startswith(str(tmp_path / "store" / "cache" / "triton"))
    assert (first_found, second_found) == (False, True)


def test_iew_cache_dir_moves_the_caches_and_a_users_triton_cache_dir_wins(tmp_path):
    folder, _ = probe({"IEW_CACHE_DIR": str(tmp_path / "moved")})
    assert folder.startswith(str(tmp_path / "moved" / "triton"))
    folder, _ = probe({"IEW_CACHE_DIR": str(tmp_path / "moved"), "TRITON_CACHE_DIR": str(tmp_path / "mine")})
    assert folder.startswith(str(tmp_path / "mine"))
