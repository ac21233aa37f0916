"""Gradient checkpointing: recompute block activations in the backward pass instead of storing them."""
from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization


class GradientCheckpointing(Optimization):
    name = "gradient-checkpointing"
    title = "Gradient checkpointing (training only)"
    description = ("Wraps each encoder layer (RexUniNLU) or decoder block (SeqGPT) so its activations are "
                   "recomputed during backward. Saves memory only when fine-tuning: at inference nothing is "
                   "kept for a backward pass, so it has no effect on extraction.")
    switch = "live"
    lossless = True
    inference = False
    training = True

    def applies_to(self, model):
        if Capability.CHECKPOINTING not in model.capabilities:
            return False, f"{model.family.name} does not support gradient checkpointing"
        return True, (f"applies to {model.family.name} fine-tuning runs (launcher.py finetune), trading "
                      "recomputation time for activation memory; no effect on inference")

    def enable(self, model, **_):
        model.knobs.checkpointing = True
        return "on"

    def disable(self, model):
        model.knobs.checkpointing = False


@hookimpl
def register_optimizations(register):
    register(GradientCheckpointing())
