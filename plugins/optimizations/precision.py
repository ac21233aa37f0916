"""fp16 / bf16 weights and activations; RexUniNLU's span head and other fragile parts stay fp32."""
from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization


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
        return True, "casts the loaded weights in place"

    def enable(self, model, dtype: str = "bf16", **_):
        if model.knobs.dtype != dtype:      # every run settles its knobs: a cast (and dropped graphs) only on a change
            model.set_dtype(dtype)
        return dtype

    def disable(self, model):
        if model.knobs.dtype != "fp32":
            model.set_dtype("fp32")


@hookimpl
def register_optimizations(register):
    register(Precision())
