"""Casting a network to fp16/bf16 and back without losing its fp32 weights.

`module.to(bfloat16)` drops the low bits of every weight, and `.to(float32)` cannot bring them back: a user
who switched precision on and off again would run an "fp32" path on bf16-rounded weights, whose outputs
differ from a freshly loaded model's. So the first cast down keeps the fp32 tensors on the host, and the
cast back copies them in (in place: parameters keep their identity). Where the reduced weights hold the fp32
ones exactly (a checkpoint published in fp16, such as SeqGPT-560M's, run in fp16) nothing is kept: copying
its 2.2 GB off the GPU was a second of every fp16 `extract` process.
"""
from __future__ import annotations

import torch


class MasterWeights:
    """The fp32 floating-point tensors of one module, held on the host while it runs reduced; none while the
    reduced tensors are exact (`saved` is then {}), since casting them back up gives the fp32 ones."""

    def __init__(self) -> None:
        self.saved: dict[str, torch.Tensor] | None = None

    def cast(self, module: torch.nn.Module, dtype: torch.dtype) -> None:
        if self.saved == {}:                        # exact so far: back to fp32 first, lossless, then decide anew
            module.to(torch.float32)
            self.saved = None
        if dtype != torch.float32:
            if self.saved is None:                  # fp16 → bf16 keeps the fp32 copy of the first cast
                floats = [(name, tensor) for name, tensor in tensors(module) if tensor.dtype == torch.float32]
                self.saved = {} if exact_in(dtype, [t for _, t in floats]) else \
                    {name: tensor.detach().to("cpu", copy=True) for name, tensor in floats}
            module.to(dtype)
            return
        module.to(torch.float32)
        if self.saved is not None:
            with torch.no_grad():
                for name, tensor in tensors(module):
                    if name in self.saved:
                        tensor.copy_(self.saved[name])
            self.saved = None


def exact_in(dtype: torch.dtype, values: list[torch.Tensor]) -> bool:
    """Whether every value survives a round trip through `dtype` (one host sync for all of them)."""
    if not values:
        return True
    with torch.no_grad():
        return bool(torch.stack([(t.to(dtype).to(t.dtype) == t).all() for t in values]).all())


def tensors(module: torch.nn.Module):
    """Parameters and buffers by name, a tied one once (SeqGPT's output layer is its 1 GB embedding table)."""
    yield from module.named_parameters()
    yield from module.named_buffers()
