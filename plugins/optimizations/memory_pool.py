"""Reuse memory across requests: static shape buckets captured as CUDA graphs in one shared pool.

The allocator's expandable segments (less fragmentation under varying shapes) can only be set
before CUDA starts: this optimization declares PYTORCH_CUDA_ALLOC_CONF as its `environment`, which the
launcher sets when it is enabled in settings.toml, so switching that part takes a restart.
"""
import os

from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization


def expandable_segments_on() -> bool:
    return "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")


class MemoryPool(Optimization):
    name = "memory-pool"
    title = "Memory pool (CUDA graphs, shape buckets)"
    description = ("Pads batches to a few static shapes, captures each once as a CUDA graph sharing one "
                   "private memory pool, and replays it: no per-request launch overhead. SeqGPT keeps a "
                   "static KV cache and replays its whole decode step (network, token choice, beam reorder) "
                   "per token. Identical outputs in fp32; in fp16/bf16 the padded shapes can round differently. "
                   "Expandable allocator segments (restart) keep reserved memory close to what is used.")
    switch = "live"
    lossless = True
    environment = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}     # read by the CUDA allocator

    def applies_to(self, model):
        if Capability.CUDA_GRAPHS not in model.capabilities:
            return False, f"{model.family.name} does not support CUDA graph capture"
        if not model.device.startswith("cuda"):
            return False, "CUDA graphs need a CUDA GPU"
        seg = "on" if expandable_segments_on() else "off (enable in settings.toml and restart)"
        scope = model.graph_scope or "CUDA graphs per shape bucket"
        return True, f"{scope}; expandable segments {seg}"

    def enable(self, model, **_):
        model.knobs.cuda_graphs = True
        return "cuda graphs" + (" + expandable segments" if expandable_segments_on() else "")

    def disable(self, model):
        model.knobs.cuda_graphs = False


@hookimpl
def register_optimizations(register):
    register(MemoryPool())
