"""Switching precision on and off again gives back the fp32 model, bit for bit (contracts.torch.precision)."""
import torch

from contracts.torch.precision import MasterWeights
from plugins.rexuninlu.family import RexUniNLU
from tests.plugins.rexuninlu.test_model import mixed_documents, outputs


def weights(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def same_bits(a, b):
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def test_a_round_trip_through_bf16_and_fp16_restores_every_weight_in_place():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16))
    module.register_buffer("scale", torch.rand(16))
    before, parameter = weights(module), module[0].weight
    plain = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16))
    plain.load_state_dict({k: v for k, v in before.items() if k != "scale"})
    plain.to(torch.bfloat16).to(torch.float32)                  # what a plain cast does: bits lost
    assert not torch.equal(plain[0].weight, before["0.weight"])

    master = MasterWeights()
    master.cast(module, torch.bfloat16)
    assert module[0].weight.dtype == torch.bfloat16 and module.scale.dtype == torch.bfloat16
    master.cast(module, torch.float16)                          # reduced to reduced: the fp32 copy stays
    master.cast(module, torch.float32)
    assert same_bits(weights(module), before) and module[0].weight is parameter
    assert master.saved is None                                 # nothing held while the module is fp32


def test_a_tied_weight_is_kept_once_and_restored_in_both_places():
    torch.manual_seed(0)
    embed, head = torch.nn.Embedding(32, 8), torch.nn.Linear(8, 32, bias=False)
    head.weight = embed.weight
    module = torch.nn.ModuleDict({"embed": embed, "head": head})
    before = embed.weight.detach().clone()
    master = MasterWeights()
    master.cast(module, torch.bfloat16)
    assert list(master.saved) == ["embed.weight"]
    master.cast(module, torch.float32)
    assert head.weight is embed.weight and torch.equal(embed.weight, before)


def test_rexuninlu_back_in_fp32_gives_a_fresh_models_outputs(rex_tiny):
    model = RexUniNLU().load(rex_tiny)
    before, docs = weights(model.network), mixed_documents(12, seed=3)
    expected = outputs(model, docs, 8)
    model.device = "cuda:0"        # reduced precision is refused on the CPU; the casts themselves run here
    try:
        model.set_dtype("bf16")
        assert model.network.plm.embeddings.word_embeddings.weight.dtype == torch.bfloat16
        assert model.network.ffnq.weight.dtype == torch.float32               # the span head stays fp32
        model.set_dtype("fp32")
    finally:
        model.device = "cpu"
    assert same_bits(weights(model.network), before)
    assert outputs(model, docs, 8) == expected



def test_weights_that_fp16_holds_exactly_are_not_copied_and_still_come_back_through_bf16():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16))
    with torch.no_grad():                                      # as loaded from an fp16 checkpoint (SeqGPT's)
        for p in module.parameters():
            p.copy_(p.half().float())
    before, parameter = weights(module), module[0].weight
    master = MasterWeights()
    master.cast(module, torch.float16)
    assert master.saved == {} and module[0].weight.dtype == torch.float16      # nothing copied off the device
    master.cast(module, torch.float32)
    assert same_bits(weights(module), before) and module[0].weight is parameter
    master.cast(module, torch.float16)
    master.cast(module, torch.bfloat16)                        # lossy: the fp32 weights are kept now
    assert master.saved and module[0].weight.dtype == torch.bfloat16
    master.cast(module, torch.float32)
    assert same_bits(weights(module), before) and master.saved is None


def test_weights_fp16_cannot_hold_are_copied():
    torch.manual_seed(0)
    module = torch.nn.Linear(16, 16)
    before = weights(module)
    master = MasterWeights()
    master.cast(module, torch.float16)
    assert set(master.saved) == {"weight", "bias"}
    master.cast(module, torch.float32)
    assert same_bits(weights(module), before)
