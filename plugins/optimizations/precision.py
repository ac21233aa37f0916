"""fp16 / bf16 weights and activations; RexUniNLU's span head and other fragile parts stay fp32."""
import torch

from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization


def reduced_dtype(capability: tuple[int, int]) -> str:
    """The reduced precision a GPU of this compute capability runs best: bf16 from 8.0 on (Ampere; Ada, the
    RTX 4090, is 8.9; Hopper 9.0), whose tensor cores take it natively; fp16 before that, where bf16 is
    emulated. Both paths keep the same fp32 parts and overflow guards whatever the GPU."""
    return "bf16" if tuple(capability) >= (8, 0) else "fp16"


class Precision(Optimization):
    name = "precision"
    title = "Reduced precision (bf16 / fp16)"
    description = ("Runs weights and activations in bf16 (or fp16); numerically fragile parts stay fp32. "
                   "Outputs may move: agreement with fp32 is measured, not assumed.")
    switch = "live"
    lossless = False

    def applies_to(self, model):
        if Capability.REDUCED_PRECISION not in model.capabilities:
            return False, f"{model.family.name} does not support reduced precision"
        if not model.device.startswith("cuda"):
            return False, "bf16/fp16 need a CUDA GPU here (on CPU they are slower than fp32)"
        dtype = reduced_dtype(torch.cuda.get_device_capability(model.device))
        return True, f"casts the loaded weights in place to {dtype} (this GPU's choice; fp16 on request)"

    def enable(self, model, dtype: str | None = None, **_):
        dtype = dtype or reduced_dtype(torch.cuda.get_device_capability(model.device))
        # Re-enabling on every run (the UI and the API apply the selection per run) must not re-cast the
        # weights: a cast drops the model's captured CUDA graphs, which would then be captured again.
        if model.knobs.dtype != dtype:
            model.set_dtype(dtype)
        return dtype

    def running(self, model):
        return model.knobs.dtype            # an asked --dtype is set after enable() and wins (engine.settle)

    def disable(self, model):
        if model.knobs.dtype != "fp32":
            model.set_dtype("fp32")


@hookimpl
def register_optimizations(register):
    register(Precision())
