"""No work for tokens that cannot matter: pack short sequences together instead of padding them."""
from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization


class SparseMask(Optimization):
    name = "sparse-mask"
    title = "Sparse mask (pack instead of pad)"
    description = ("Packs short windows end to end in one row, kept apart by the attention mask (and, "
                   "for RexUniNLU, by the ConvLayer), so padding is not computed. Lossless.")
    switch = "live"
    lossless = True

    def applies_to(self, model):
        if Capability.UNPAD not in model.capabilities:
            return False, f"{model.family.name} does not support packing"
        return True, "packs windows of several documents into shared rows"

    def enable(self, model, **_):
        model.knobs.unpad = True
        return "packed rows"

    def disable(self, model):
        model.knobs.unpad = False


@hookimpl
def register_optimizations(register):
    register(SparseMask())
