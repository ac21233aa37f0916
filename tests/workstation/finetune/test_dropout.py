"""Dropout at the config's rates acts in train mode only; in eval (inference) it changes no bit."""
import pytest
import torch

from plugins.rexuninlu.family import RexUniNLU
from plugins.rexuninlu.scoring import isolation_mask
from plugins.rexuninlu.training import examples as rex_examples
from plugins.seqgpt.family import SeqGPT
from tests.workstation.finetune.conftest import with_dropout


@pytest.fixture(scope="module")
def rex_pair(rex_tiny, rex_tiny_no_dropout):
    with_p, without = RexUniNLU().load(rex_tiny), RexUniNLU().load(rex_tiny_no_dropout)
    assert with_p.network.config.hidden_dropout_prob == 0.1 == with_p.network.config.attention_probs_dropout_prob
    window = rex_examples(with_p.prompter, "张三在北京工作", {"人物": None, "地理位置": None}, [])[0].window
    packed = with_p.scorer.pack([[window]])
    return with_p.network, without.network, (packed.ids, packed.positions, isolation_mask(packed), packed.valid)


@pytest.fixture(scope="module")
def bloom_pair(seqgpt_tiny, tmp_path_factory):
    with_p = SeqGPT().load(with_dropout(seqgpt_tiny, tmp_path_factory.mktemp("bloom") / "dropout", 0.1, 0.1))
    without = SeqGPT().load(seqgpt_tiny)
    ids = torch.tensor(with_p.tokenizer(["输入: 张三在北京工作\n抽取: 人物\n输出: [GEN]"])["input_ids"])
    return with_p.network, without.network, ids


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_rexuninlu_dropout_is_off_in_eval_and_on_in_train(rex_pair, backend):
    net, plain, inputs = rex_pair
    net.attention_backend = plain.attention_backend = backend
    with torch.no_grad():
        net.eval()
        assert torch.equal(net(*inputs), plain(*inputs))          # inference: not a bit changed
        net.train()
        plain.train()
        assert not torch.equal(net(*inputs), net(*inputs))       # two draws, two results
        assert torch.equal(plain(*inputs), plain(*inputs))       # p = 0: nothing drawn
    net.eval()
    plain.eval()


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_bloom_dropout_is_off_in_eval_and_on_in_train(bloom_pair, attention):
    net, plain, ids = bloom_pair
    mask = torch.ones_like(ids)
    with torch.no_grad():
        net.eval()
        assert torch.equal(net(ids, mask, attention=attention, last_only=False),
                           plain(ids, mask, attention=attention, last_only=False))
        net.train()
        plain.train()
        assert not torch.equal(net(ids, mask, attention=attention, last_only=False),
                               net(ids, mask, attention=attention, last_only=False))
        assert torch.equal(plain(ids, mask, attention=attention, last_only=False),
                           plain(ids, mask, attention=attention, last_only=False))
    net.eval()
    plain.eval()


def test_bloom_reads_the_dropout_rates_from_config_json(bloom_pair):
    net, plain, _ = bloom_pair
    assert (net.config.hidden_dropout, net.config.attention_dropout) == (0.1, 0.1)
    assert (plain.config.hidden_dropout, plain.config.attention_dropout) == (0.0, 0.0)   # what SeqGPT ships


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_attention_dropout_alone_acts_on_both_kernels(rex_tiny, seqgpt_tiny, tmp_path, attention):
    rex = RexUniNLU().load(with_dropout(rex_tiny, tmp_path / "rex", 0.0, 0.5)).network
    bloom = SeqGPT().load(with_dropout(seqgpt_tiny, tmp_path / "bloom", 0.0, 0.5)).network
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    mask = torch.ones_like(ids)
    rex.attention_backend = attention
    inputs = (ids, torch.arange(6)[None], torch.ones(1, 6, 6, dtype=torch.bool), mask.bool())
    with torch.no_grad():
        for net, run in ((rex, lambda: rex(*inputs)), (bloom, lambda: bloom(ids, mask, attention=attention))):
            net.eval()
            assert torch.equal(run(), run())
            net.train()
            assert not torch.equal(run(), run())
