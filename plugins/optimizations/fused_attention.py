"""Fused attention: FlashAttention-2 where a model's attention maps onto it, else the best fused kernel."""
import importlib.util

from workstation.hookspecs import hookimpl
from workstation.optimizations import Optimization

# Preference order; a model lists the kernels its attention can be expressed with.
KERNELS = ("flash", "triton", "sdpa")


def flash_attn_available() -> bool:
    import torch
    return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


class FusedAttention(Optimization):
    name = "flash-attention"
    title = "FlashAttention-2 / fused attention"
    description = ("Fused attention kernel. SeqGPT's ALiBi maps onto flash-attn 2 when it is installed; "
                   "RexUniNLU's disentangled attention (relative bias over prompt positions, isolation mask) "
                   "cannot, so it runs PyTorch SDPA with the bias instead — the chosen kernel is shown.")
    switch = "live"
    lossless = True

    def kernel_for(self, model) -> str | None:
        for kernel in KERNELS:
            if kernel not in model.attention_backends:
                continue
            if kernel == "flash" and not (flash_attn_available() and model.device.startswith("cuda")):
                continue
            if kernel == "triton" and not model.device.startswith("cuda"):
                continue
            return kernel
        return None

    def applies_to(self, model):
        kernel = self.kernel_for(model)
        if kernel is None:
            return False, f"{model.family.name} offers no fused attention kernel"
        note = "" if kernel == "flash" or "flash" not in model.attention_backends else \
            " (flash-attn is not installed or no CUDA GPU: falling back)"
        return True, f"runs the {kernel} kernel{note}"

    def enable(self, model, **_):
        model.knobs.attention = self.kernel_for(model)
        return model.knobs.attention

    def disable(self, model):
        model.knobs.attention = model.attention_backends[0]


@hookimpl
def register_optimizations(register):
    register(FusedAttention())
