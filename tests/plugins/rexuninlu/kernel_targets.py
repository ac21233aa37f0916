"""Compile every Triton kernel of the workstation, in every configuration its code can launch, for another GPU
than the one here (or none): `python -m tests.plugins.rexuninlu.kernel_targets 89` prints one JSON line per
compiled kernel with the shared memory per block Triton allocated, the registers per thread and the local
(spilled) bytes ptxas gave it.

It runs in a process of its own because the tests run Triton's CPU interpreter (TRITON_INTERPRET=1), under
which the kernels are interpreter objects that cannot be compiled. Triton's wheel carries ptxas and
cuobjdump, so no GPU and no CUDA toolkit is needed: the same check runs on a CPU-only CI machine and on a GPU.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

os.environ["TRITON_INTERPRET"] = "0"

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from plugins.rexuninlu import triton_attention, triton_norm, triton_rotary  # noqa: E402
from plugins.rexuninlu.modeling import RexConfig  # noqa: E402

DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}


def signature(kernel, pointers: dict[str, str], floats: tuple[str, ...], constexprs: dict) -> dict[str, str]:
    """Triton's signature for `kernel`: pointers by name, the named floats fp32, other runtime scalars i32."""
    return {name: "constexpr" if name in constexprs else pointers.get(name) or ("fp32" if name in floats else "i32")
            for name in kernel.arg_names}


def launches(cfg: RexConfig):
    """(kernel label, what varies, jit function, pointer types, float scalars, constexprs, num_warps,
    num_stages) for every launch the plugin's code can make with this model configuration."""
    head_dim, width = cfg.head_dim, cfg.hidden_size
    block = triton.next_power_of_2(width)
    for dtype in DTYPES:
        ptr = "*" + dtype
        tensors = dict.fromkeys(("Q", "K", "V", "C", "P", "O"), ptr)
        codes = dict.fromkeys(("POS", "GRP", "TYP", "SEG", "KLO", "KHI"), "*i32")
        for tiles in triton_attention.TILES:
            const = {"L": 512, "SPAN": cfg.position_buckets, "D": head_dim,
                     "BLOCK_M": tiles.block_m, "BLOCK_N": tiles.block_n,
                     "PRECISION": "ieee" if dtype == "fp32" else "tf32"}
            yield ("attention", f"{dtype} {tuple(tiles)}", triton_attention._disentangled_fwd, {**tensors, **codes},
                   ("scale",), const, tiles.num_warps, tiles.num_stages)
        for keep in (False, True):
            norm_ptrs = {"X": ptr, "R": ptr, "W": ptr, "B": ptr, "KEEP": "*i1" if keep else ptr, "Y": ptr}
            yield ("add_norm", f"{dtype} keep={keep}", triton_norm._add_norm_fwd, norm_ptrs, ("eps",),
                   {"BLOCK": block, "HAS_KEEP": keep}, 4 if block <= 1024 else 8, 3)
            yield ("conv_taps", f"{dtype} segments={keep}", triton_norm._taps_fwd,
                   {"E": ptr, "SEG": "*i64" if keep else ptr, "T": ptr}, (),
                   {"D": width, "K": cfg.conv_kernel_size, "HALF": (cfg.conv_kernel_size - 1) // 2,
                    "BLOCK": block, "HAS_SEG": keep}, 4, 3)
    for terms in (1, 2):              # an fp16 encoder's one product, a bf16 encoder's two (modeling.fused_head_logits)
        yield ("rotary_parts", f"terms={terms}", triton_rotary._rotary_parts_fwd,
               {"X": "*fp32", "BIAS": "*fp32", "COS": "*fp32", "SIN": "*fp32", "OUT": "*bf16"}, (),
               {"TERMS": terms, "PAIRS": width, "BLOCK": block}, 4 if block <= 1024 else 8, 3)


def resources(cubin: bytes) -> tuple[int, int]:
    """(registers per thread, local bytes per thread) from cuobjdump's resource report of a cubin."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        report = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-res-usage", fh.name],
                                capture_output=True, text=True, check=True).stdout
    return int(re.search(r"REG:(\d+)", report).group(1)), int(re.search(r"LOCAL:(\d+)", report).group(1))


def compile_all(capability: int) -> list[dict]:
    target = GPUTarget("cuda", capability, 32)
    rows = []
    for label, variant, kernel, pointers, floats, const, warps, stages in launches(RexConfig()):
        compiled = triton.compile(ASTSource(kernel, signature(kernel, pointers, floats, const), const),
                                  target=target, options={"num_warps": warps, "num_stages": stages})
        regs, local = resources(compiled.asm["cubin"])
        rows.append({"kernel": label, "variant": variant, "capability": capability, "shared": compiled.metadata.shared,
                     "registers": regs, "local_bytes": local, "threads": warps * 32, "num_stages": stages})
    return rows


HOPPER_SHARED_PER_BLOCK = 232_448          # an H100's opt-in shared memory per block: picks the attention's tiles


def first_run_launches(cfg: RexConfig):
    """The kernels a bf16 full-stack run compiles on a machine's first run (WindowScorer.compile_ahead): the attention
    kernel at each captured length, the norm and taps with and without their masks, the rotary of two terms."""
    tiles = triton_attention.tiles_for(HOPPER_SHARED_PER_BLOCK, 2, cfg.head_dim)
    for label, variant, kernel, pointers, floats, const, warps, stages in launches(cfg):
        if label == "attention" and variant == f"bf16 {tuple(tiles)}":
            for length in (512, 384, 256, 128):
                yield label, f"bf16 L={length}", kernel, pointers, floats, {**const, "L": length}, warps, stages
        elif label != "attention" and (variant.startswith("bf16") or variant == "terms=2"):
            yield label, variant, kernel, pointers, floats, const, warps, stages


def side_by_side(capability: int, threads: int = 4) -> list[dict]:
    """Those kernels compiled one after another, then again in `threads` threads at once (as contracts/torch/
    triton_ahead.py has Triton do), each time into an empty cache: whether each gave the same binary both ways."""
    target = GPUTarget("cuda", capability, 32)
    jobs = list(first_run_launches(RexConfig()))

    def compile_one(job) -> bytes:
        _, _, kernel, pointers, floats, const, warps, stages = job
        return triton.compile(ASTSource(kernel, signature(kernel, pointers, floats, const), const), target=target,
                              options={"num_warps": warps, "num_stages": stages}).asm["cubin"]
    with tempfile.TemporaryDirectory() as alone, tempfile.TemporaryDirectory() as together:
        os.environ["TRITON_CACHE_DIR"] = alone
        serial = [compile_one(job) for job in jobs]
        os.environ["TRITON_CACHE_DIR"] = together
        with ThreadPoolExecutor(threads) as pool:
            parallel = list(pool.map(compile_one, jobs))
    return [{"kernel": job[0], "variant": job[1], "same_binary": a == b} for job, a, b in zip(jobs, serial, parallel)]


if __name__ == "__main__":
    capability = int(sys.argv[1]) if len(sys.argv) > 1 else 89
    rows = side_by_side(capability) if "--side-by-side" in sys.argv else compile_all(capability)
    for row in rows:
        print(json.dumps(row), flush=True)
