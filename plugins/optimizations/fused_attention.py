"""Fused attention: FlashAttention-2 where a model's attention maps onto it, else the best fused kernel."""
import importlib.util

from contracts.hookspecs import hookimpl
from contracts.names import Kernel
from contracts.optimization import Optimization

# Preference order; a model lists the kernels its attention can be expressed with.
KERNELS = (Kernel.FLASH, Kernel.TRITON, Kernel.SDPA)


def flash_attn_available() -> bool:
    import torch
    return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


class FusedAttention(Optimization):
    name = "flash-attention"
    title = "FlashAttention-2 / fused attention"
    description = ("Fused attention kernel. SeqGPT's ALiBi maps onto flash-attn 2 (varlen prefill without the "
                   "pads, decoding from the KV cache in place, alibi_slopes) on a CUDA GPU in fp16/bf16 when "
                   "flash-attn is installed, else onto PyTorch SDPA with the ALiBi bias (same maths, prefill in "
                   "query chunks). RexUniNLU's disentangled attention (relative bias over prompt positions, "
                   "isolation mask) cannot: it runs our Triton kernel (and each block's residual add and "
                   "LayerNorm as one Triton kernel) or SDPA with the bias. The kernel that runs is shown.")
    switch = "live"
    lossless = True
    training = True           # the model's training forward runs the same kernel

    def kernel_for(self, model) -> str | None:
        for kernel in KERNELS:
            if kernel not in model.attention_backends:
                continue
            if kernel == Kernel.FLASH and not (flash_attn_available() and model.device.startswith("cuda")):
                continue
            if kernel == Kernel.TRITON and not model.device.startswith("cuda"):
                continue
            return kernel
        return None

    def applies_to(self, model):
        kernel = self.kernel_for(model)
        if kernel is None:
            return False, f"{model.family.name} offers no fused attention kernel"
        runs, why = model.resolve_attention(kernel)
        if runs != kernel:
            return True, f"asks for the {kernel} kernel; {runs} runs now: {why}"
        note = ""
        if kernel != Kernel.FLASH and Kernel.FLASH in model.attention_backends:
            why = model.resolve_attention(Kernel.FLASH)[1] or "flash-attn is not installed or no CUDA GPU"
            note = f" (flash-attn cannot run: {why})"
        return True, f"runs the {kernel} kernel{note}"

    def enable(self, model, **_):
        model.knobs.attention = self.kernel_for(model)
        return model.attention_kernel()

    def running(self, model):
        return model.attention_kernel()     # the model's own answer, as the run's `attention` records it

    def disable(self, model):
        model.knobs.attention = model.attention_backends[0]


@hookimpl
def register_optimizations(register):
    register(FusedAttention())
