"""Every optimization is pinned to the fp32 eager path; on CPU for everything that runs on CPU."""
import pytest
import torch

from tests.plugins.rexuninlu.test_model import ONE_STEP, assert_same_outputs, mixed_documents, outputs
from workstation import engine, plugins


@pytest.fixture()
def fresh_rex(rex_tiny):
    model = engine.load_model("rexuninlu", rex_tiny, "cpu")
    yield model


def test_all_five_optimizations_are_registered_with_honest_descriptions():
    opts = plugins.optimizations()
    assert {"precision", "flash-attention", "sparse-mask", "memory-pool", "gradient-checkpointing"} <= set(opts)
    for opt in opts.values():
        assert opt.description and opt.switch in ("live", "reload", "restart")
    assert "no effect" in opts["gradient-checkpointing"].description


def test_applicability_on_cpu_says_why_not(fresh_rex):
    opts = plugins.optimizations()
    ok, reason = opts["precision"].applies_to(fresh_rex)
    assert not ok and "CUDA" in reason
    ok, reason = opts["memory-pool"].applies_to(fresh_rex)
    assert not ok and "CUDA" in reason
    ok, reason = opts["flash-attention"].applies_to(fresh_rex)
    assert ok and "sdpa" in reason
    with pytest.raises(Exception, match="does not apply"):
        engine.apply_optimizations(fresh_rex, ["precision"])


def test_lossless_stack_on_cpu_matches_fp32_eager(fresh_rex):
    docs = mixed_documents(20, seed=7)
    baseline = outputs(fresh_rex, docs, 4)
    active = engine.apply_optimizations(fresh_rex, ["flash-attention", "sparse-mask", "gradient-checkpointing"])
    assert active["flash-attention"] == "sdpa" and fresh_rex.knobs.unpad
    assert "gradient-checkpointing" not in active and fresh_rex.knobs.checkpointing   # training only: not recorded
    assert_same_outputs(outputs(fresh_rex, docs, 4), baseline, ONE_STEP)     # SDPA adds in another order
    engine.apply_optimizations(fresh_rex, [])
    assert fresh_rex.knobs.attention == "eager" and not fresh_rex.knobs.unpad
    assert outputs(fresh_rex, docs, 4) == baseline


def test_shape_buckets_for_graph_capture_are_lossless(fresh_rex):
    """CUDA graphs pad rows to powers of two and lengths to multiples of 128; on CPU the same
    padding runs without capture, so the bucketing logic is pinned here."""
    docs = mixed_documents(12, seed=8)
    baseline = outputs(fresh_rex, docs, 3)
    fresh_rex.knobs.cuda_graphs = True
    from plugins.rexuninlu.pipeline import document_run
    windows = [document_run(fresh_rex.prompter, d.text, d.schema).send(None)[0] for d in docs[:3]]
    p = fresh_rex.scorer.pack([[w] for w in windows])
    assert p.ids.shape[0] == 4 and p.ids.shape[1] % 128 == 0
    assert outputs(fresh_rex, docs, 3) == baseline


def test_graphs_are_captured_largest_bucket_first_and_blank_batches_change_nothing(fresh_rex, monkeypatch):
    """The first capture is the largest bucket (rows for the batch size, full length) so later graphs
    reuse its freed blocks in the shared pool; the padding-only batch used for it scores no window."""
    from plugins.rexuninlu import scoring
    captured = []

    class Recorder:
        def __init__(self, network, example, siblings):
            captured.append(tuple(example.ids.shape))
            self.out = scoring.run_network(network, example)
    monkeypatch.setattr(scoring, "CapturedForward", Recorder)
    fresh_rex.knobs.cuda_graphs = True
    scorer = fresh_rex.scorer
    scorer.batch_rows = 6
    from plugins.rexuninlu.pipeline import document_run
    windows = [document_run(fresh_rex.prompter, text, {"地点": None}).send(None)[0] for text in ("北大西洋", "巴塞罗那闭幕")]
    small = scorer.pack([[w] for w in windows])
    scorer.graph_for(small)
    scorer.graph_for(small)
    assert captured == [(8, 512), (8, 128)] and tuple(small.ids.shape) == (8, 128)
    blank = scorer.blank(2, 64)
    assert not blank.valid.any() and blank.ids.shape == (2, 64)
    links = scorer.selected_links(scoring.run_network(fresh_rex.network, blank), blank, torch.zeros_like(blank.valid))
    assert not links.other.any() and not links.spans.any()


@pytest.mark.parametrize("batch_rows, rows", [(64, [64, 32, 16, 8]), (6, [8]), (1, [1]), (3, [4])])
def test_every_batch_a_run_can_pack_has_a_shape_that_capture_all_captures(fresh_rex, monkeypatch, batch_rows, rows):
    """Host workers' batches are shaped by timing, so all graph shapes are captured before their run: the few
    buckets must hold every shape pack() gives, and capture_all must capture exactly those, largest first."""
    import random

    from plugins.rexuninlu.decoding import Window
    scorer = fresh_rex.scorer
    fresh_rex.knobs.cuda_graphs, scorer.batch_rows = True, batch_rows
    shapes = scorer.graph_shapes()
    assert shapes == [(r, n) for r in rows for n in (512, 384, 256, 128)]
    rng = random.Random(0)
    for _ in range(200):
        n, length = rng.randint(1, batch_rows), rng.randint(1, 512)
        window = Window([0] * length, [0] * length, [0] * length, [0] * length, [], 1, None, "")
        monkeypatch.setattr(scorer, "fill", lambda rows, B, L: (B, L))
        assert scorer.pack([[window]] * n) in shapes
    captured = []
    monkeypatch.setattr(scorer, "device", torch.device("cuda"))     # the guard only; nothing runs on a GPU
    monkeypatch.setattr(scorer, "blank", lambda r, n: (r, n))
    # Under inference mode, as launch() captures: with autograd on, each graph kept all its activations
    # (37 GB for the 16 shapes on the H200).
    monkeypatch.setattr(scorer, "_capture", lambda shape: captured.append((shape, torch.is_inference_mode_enabled())))
    scorer.capture_all()
    assert captured == [(shape, True) for shape in shapes]
    scorer.graphs = {scorer.graph_key(shape): "captured" for shape in shapes[:3]}
    captured.clear()
    scorer.capture_all()                                          # what is captured already is not built again
    assert captured == [(shape, True) for shape in shapes[3:]]

    def short_of_memory(shape):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(scorer, "_capture", short_of_memory)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    scorer.capture_all()                                          # left to the run, which backs off where it must
    monkeypatch.setattr(scorer, "_capture", lambda shape: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        scorer.capture_all()


def test_gradient_checkpointing_gives_the_same_gradients(fresh_rex, monkeypatch):
    from plugins.rexuninlu import modeling
    from plugins.rexuninlu.pipeline import document_run
    from plugins.rexuninlu.scoring import isolation_mask
    net = fresh_rex.network
    windows = document_run(fresh_rex.prompter, "北大西洋议会春季会议在巴塞罗那闭幕", {"地点": None}).send(None)
    p = fresh_rex.scorer.pack([[w] for w in windows])

    layer_calls, layer_forward = [], modeling.Layer.forward

    def counted(self, *args):
        layer_calls.append(1)
        return layer_forward(self, *args)
    monkeypatch.setattr(modeling.Layer, "forward", counted)
    layers = len(net.plm.encoder.layer)

    def grads(checkpointing):
        net.zero_grad()
        torch.manual_seed(0)                    # the same dropout masks in both runs
        net.train()
        net.plm.encoder.checkpointing = checkpointing
        layer_calls.clear()
        net(p.ids, p.positions, isolation_mask(p), p.valid).square().mean().backward()
        net.eval()
        return {n: q.grad.clone() for n, q in net.named_parameters() if q.grad is not None}, len(layer_calls)
    (plain, plain_calls), (ckpt, ckpt_calls) = grads(False), grads(True)
    # Checkpointing really ran: every layer was recomputed in backward (else this compares a run with itself).
    assert (plain_calls, ckpt_calls) == (layers, 2 * layers)
    assert plain.keys() == ckpt.keys() and len(plain) > 10
    for name in plain:
        assert torch.allclose(plain[name], ckpt[name], atol=1e-6, rtol=1e-5), name
    net.plm.encoder.checkpointing = False


def test_precision_enabled_again_does_not_recast_the_weights_or_drop_captured_graphs():
    # The UI and the API apply the selection before every run; a re-cast would drop the CUDA graphs
    # each time (measured on the H200: the API's full stack served 13 requests/s instead of ~40).
    calls = []

    class Model:
        class knobs:
            dtype = "fp32"

        def set_dtype(self, dtype):
            calls.append(dtype)
            self.knobs.dtype = dtype
    precision, model = plugins.optimizations()["precision"], Model()
    assert precision.enable(model, dtype="bf16") == "bf16" and calls == ["bf16"]
    assert precision.enable(model, dtype="bf16") == "bf16" and calls == ["bf16"]
    assert precision.enable(model, dtype="fp16") == "fp16" and calls == ["bf16", "fp16"]
