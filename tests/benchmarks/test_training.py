"""The train-step benchmark runs on CPU with tiny checkpoints and shapes, so it cannot rot."""
import json

import pytest
import torch

import benchmarks as bench


@pytest.mark.parametrize("weights", ["rex_tiny", "seqgpt_tiny"])
def test_train_step_benchmark_runs_on_tiny_checkpoints(weights, request, tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path / "train-step.json"
        assert bench.main(["train-step", "--weights", str(request.getfixturevalue(weights)), "--device", "cpu",
                           "--train-batch", "2", "--train-len", "40", "--train-steps", "2", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    result = json.loads(out.read_text("utf-8"))
    name = {"rex_tiny": "rexuninlu", "seqgpt_tiny": "seqgpt"}[weights]
    assert result["shapes"][name]["batch"] == 2 and result["shapes"][name]["tokens_per_row"] == [40]
    off, on = result["rows"]
    assert (off["model"], off["checkpointing"], on["checkpointing"]) == (name, "off", "on")
    assert on["grads_agree"] is True and on["grads_max_rel_diff"] < 1e-5
    assert off["step_ms_p50"] > 0 and on["step_ms_p50"] > 0
    assert on["largest_batch_24GB"] == "n/a (CUDA only)" and on["peak_allocated_MiB"] is None
