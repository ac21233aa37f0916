"""The Triton kernels on the user's GPU, an RTX 4090 (Ada, sm_89): every configuration the code can launch
fits an Ada block's shared memory and registers, and a device with less shared memory never gets a
configuration that cannot fit. Limits from NVIDIA's Ada tuning guide (docs/performance.md §6)."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from plugins.rexuninlu import triton_attention
from plugins.rexuninlu.modeling import RexConfig
from plugins.rexuninlu.triton_attention import TILES, Tiles, shared_bytes, tiles_for

ROOT = Path(__file__).resolve().parents[3]
ADA_SHARED_PER_BLOCK = 99 * 1024          # opt-in dynamic shared memory per block, compute capability 8.9
ADA_REGISTERS_PER_THREAD = 255
ADA_REGISTERS_PER_BLOCK = 64 * 1024
HEAD_DIM = RexConfig().head_dim

needs_triton = pytest.mark.skipif(not triton_attention.available(), reason="needs triton")


@pytest.mark.parametrize("element_bytes", [4, 2])
def test_every_attention_tile_fits_an_ada_block_by_the_shared_memory_model(element_bytes):
    for tiles in TILES:
        assert shared_bytes(tiles, element_bytes, HEAD_DIM) <= ADA_SHARED_PER_BLOCK, tiles
        assert tiles.num_warps * 32 <= 1024


def test_an_ada_block_gets_the_fastest_tiles_for_every_dtype():
    assert tiles_for(ADA_SHARED_PER_BLOCK, 4, HEAD_DIM) == TILES[0]
    assert tiles_for(ADA_SHARED_PER_BLOCK, 2, HEAD_DIM) == TILES[0]


def test_tiles_over_a_devices_shared_memory_are_pruned_in_table_order():
    fp32_first = shared_bytes(TILES[0], 4, HEAD_DIM)
    smaller = tiles_for(fp32_first - 1, 4, HEAD_DIM)
    assert smaller == next(t for t in TILES if shared_bytes(t, 4, HEAD_DIM) < fp32_first)
    assert shared_bytes(smaller, 4, HEAD_DIM) <= fp32_first - 1
    assert tiles_for(fp32_first - 1, 2, HEAD_DIM) == TILES[0]          # bf16's tiles are half the bytes
    with pytest.raises(RuntimeError, match="shared memory per block; this GPU offers 1024"):
        tiles_for(1024, 4, HEAD_DIM)


def test_a_larger_configuration_past_the_limit_is_never_chosen(monkeypatch):
    big = Tiles(128, 64, 8, 3)          # ~192 KB in fp32 by the model: a Hopper block holds it, an Ada block not
    monkeypatch.setattr(triton_attention, "TILES", (big, *TILES))
    assert shared_bytes(big, 4, HEAD_DIM) > ADA_SHARED_PER_BLOCK
    assert tiles_for(ADA_SHARED_PER_BLOCK, 4, HEAD_DIM) == TILES[0]
    assert tiles_for(227 * 1024, 4, HEAD_DIM) == big


def test_the_limit_is_the_devices_reported_shared_memory_not_its_name(monkeypatch):
    props = {0: SimpleNamespace(name="NVIDIA H200", shared_memory_per_block_optin=48 * 1024),
             1: SimpleNamespace(name="NVIDIA GeForce RTX 4090", shared_memory_per_block_optin=ADA_SHARED_PER_BLOCK)}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props[index])
    triton_attention.device_shared_limit.cache_clear()
    try:
        assert triton_attention.device_shared_limit(0) == 48 * 1024
        assert triton_attention.device_shared_limit(1) == ADA_SHARED_PER_BLOCK
        assert tiles_for(triton_attention.device_shared_limit(0), 4, HEAD_DIM) != TILES[0]
    finally:
        triton_attention.device_shared_limit.cache_clear()


def compiled_for(capability: int, *flags: str) -> list[dict]:
    """Every kernel and configuration compiled for the target by tests/plugins/rexuninlu/kernel_targets.py."""
    done = subprocess.run([sys.executable, "-m", "tests.plugins.rexuninlu.kernel_targets", str(capability), *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@needs_triton
def test_every_kernel_compiled_for_sm89_fits_an_ada_block():
    """Cross-compiled with Triton's own ptxas: runs without a GPU, so CI checks it on every change."""
    rows = compiled_for(89)
    assert {r["kernel"] for r in rows} == {"attention", "add_norm", "conv_taps", "rotary_parts"}
    assert sum(r["kernel"] == "attention" for r in rows) == 3 * len(TILES)
    for r in rows:
        where = f"{r['kernel']} {r['variant']}"
        assert r["shared"] <= ADA_SHARED_PER_BLOCK, where
        assert r["registers"] <= ADA_REGISTERS_PER_THREAD, where
        assert r["registers"] * r["threads"] <= ADA_REGISTERS_PER_BLOCK, where
        assert r["local_bytes"] == 0, f"{where} spills registers to local memory"
        if r["kernel"] == "attention":      # the model the runtime prunes by is an upper bound of the compiler's
            dtype, tiles = r["variant"].split(" ", 1)
            model = shared_bytes(Tiles(*json.loads(tiles.replace("(", "[").replace(")", "]"))),
                                 4 if dtype == "fp32" else 2, HEAD_DIM)
            assert r["shared"] <= model, where


@needs_triton
def test_the_first_runs_kernels_compile_to_the_same_binaries_in_threads_side_by_side():
    """What compile_ahead relies on (contracts/torch/triton_ahead.py): Triton's compiler run in several threads at
    once gives each kernel the binary it gives alone. For sm_90 (an H100's), without a GPU."""
    rows = compiled_for(90, "--side-by-side")
    assert [r["variant"] for r in rows if r["kernel"] == "attention"] == [f"bf16 L={n}" for n in (512, 384, 256, 128)]
    assert {r["kernel"] for r in rows} == {"attention", "add_norm", "conv_taps", "rotary_parts"}
    assert all(r["same_binary"] for r in rows), [r for r in rows if not r["same_binary"]]


@pytest.mark.skipif(not (torch.cuda.is_available() and triton_attention.available()),
                    reason="needs a CUDA GPU and triton (run with CUDA_VISIBLE_DEVICES set and TRITON_INTERPRET=0)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_the_gpu_every_tile_runs_and_agrees_and_the_chosen_one_fits_the_device(dtype):
    from tests.plugins.rexuninlu.test_triton_attention_cuda import packed_rows
    positions, groups, types, segments = (t.cuda() for t in packed_rows())
    B, L = segments.shape
    H, D, S = 12, HEAD_DIM, 256
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(B, H, L, D, device="cuda", generator=g).to(dtype) for _ in range(3))
    c2p, p2c = (torch.randn(B, H, L, 2 * S, device="cuda", generator=g).to(dtype) for _ in range(2))
    codes = triton_attention.kernel_codes(positions, groups, types, segments)
    chosen = triton_attention.disentangled_attention(q, k, v, c2p, p2c, codes, 0.07)
    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    assert shared_bytes(tiles_for(limit, q.element_size(), D), q.element_size(), D) <= limit
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    for tiles in TILES:
        got = triton_attention.disentangled_attention(q, k, v, c2p, p2c, codes, 0.07, *tiles)
        torch.testing.assert_close(got, chosen, atol=tolerance, rtol=tolerance)
    major, minor = torch.cuda.get_device_capability(0)
    assert all(r["shared"] <= limit for r in compiled_for(10 * major + minor))      # and for this GPU itself
