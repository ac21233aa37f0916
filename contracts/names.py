"""Named constants of the contracts: what a model reads, what it can do, its attention kernels.

They are `StrEnum`s, so each member is also the plain string stored in runs and settings ("sdpa", "unpad").
"""
from __future__ import annotations

from enum import StrEnum


class Reads(StrEnum):
    """What a model's documents carry besides the text; the host builds inputs and forms from it."""

    SCHEMA = "schema"          # Document.schema: a dict of types (RexUniNLU: nested for relations/events)
    LABELS = "labels"          # Document.task ("ext" | "cls") and Document.labels: a list of label names

    def fields(self) -> str:
        """What a document gives for such a model, in the words of the input formats (for error messages)."""
        if self is Reads.LABELS:
            return '"task" and "labels" (a list of label names, such as ["人物", "地点"])'
        return '"schema" (a JSON object of types, such as {"人物": null})'


class Capability(StrEnum):
    """What a loaded model lets optimizations switch (LoadedModel.capabilities)."""

    UNPAD = "unpad"                            # pack sequences / bucket by length (sparse mask)
    CUDA_GRAPHS = "cuda_graphs"                # capture static shape buckets (memory pool)
    CHECKPOINTING = "checkpointing"            # gradient checkpointing (fine-tuning)
    REDUCED_PRECISION = "reduced_precision"    # fp16 / bf16 weights and activations
    HOST_WORKERS = "host_workers"              # host work (tokenising, decoding) in worker processes


class Kernel(StrEnum):
    """Attention kernels a model may offer (LoadedModel.attention_backends) and a run records."""

    EAGER = "eager"            # the reference arithmetic
    SDPA = "sdpa"              # torch.nn.functional.scaled_dot_product_attention
    TRITON = "triton"          # our fused Triton kernel (RexUniNLU's disentangled attention)
    FLASH = "flash"            # flash-attn's FlashAttention-2 kernels (SeqGPT's ALiBi attention)
