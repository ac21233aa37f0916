"""Casting a network to fp16/bf16 and back without losing its fp32 weights.

`module.to(bfloat16)` drops the low bits of every weight, and `.to(float32)` cannot bring them back: a user
who switched precision on and off again would run an "fp32" path on bf16-rounded weights, whose outputs
differ from a freshly loaded model's. So the first cast down keeps the fp32 tensors on the host, and the
cast back copies them in (in place: parameters keep their identity).
"""
from __future__ import annotations

import torch


class MasterWeights:
    """The fp32 floating-point tensors of one module, held on the host while it runs reduced."""

    def __init__(self) -> None:
        self.saved: dict[str, torch.Tensor] | None = None

    def cast(self, module: torch.nn.Module, dtype: torch.dtype) -> None:
        if dtype != torch.float32:
            if self.saved is None:                  # fp16 → bf16 keeps the fp32 copy of the first cast
                self.saved = {name: tensor.detach().to("cpu", copy=True)
                              for name, tensor in tensors(module) if tensor.dtype == torch.float32}
            module.to(dtype)
            return
        module.to(torch.float32)
        if self.saved is not None:
            with torch.no_grad():
                for name, tensor in tensors(module):
                    if name in self.saved:
                        tensor.copy_(self.saved[name])
            self.saved = None


def tensors(module: torch.nn.Module):
    """Parameters and buffers by name, a tied one once (SeqGPT's output layer is its 1 GB embedding table)."""
    yield from module.named_parameters()
    yield from module.named_buffers()
