"""`bench seqgpt-e2e` runs on the CPU with the tiny demo checkpoint and a handful of documents, so it cannot rot."""
import json

import pytest
import torch

import benchmarks as bench
from benchmarks.seqgpt_e2e import e2e_documents


@pytest.fixture(autouse=True)
def one_cpu_thread():
    """As tests/plugins/seqgpt/conftest.py runs its tests: a model this small gains nothing from a second thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_documents_are_deterministic_mixed_and_some_take_two_prompts():
    from plugins.seqgpt.prompting import prompts_for
    docs = e2e_documents(40)
    assert docs == e2e_documents(40)
    assert {len(prompts_for(d)) for d in docs} == {1, 2}
    assert min(len(d.text) for d in docs) < 60 and max(len(d.text) for d in docs) > 500


def run(benchmark: str, weights, tmp_path, *argv: str) -> dict:
    """The benchmark on the CPU over the tiny checkpoint and seed 65's documents: five short ones (38-193
    characters), two of them two prompts each. Its JSON, once it exits 0."""
    out = tmp_path / f"{benchmark}.json"
    code = bench.main([benchmark, "--weights", str(weights), "--device", "cpu", "--seed", "65", *argv,
                       "--out", str(out)])
    assert code == 0
    return json.loads(out.read_text("utf-8"))


def test_the_seqgpt_e2e_benchmark_compares_every_variant_with_the_reference(seqgpt_tiny, tmp_path):
    result = run("seqgpt-e2e", seqgpt_tiny, tmp_path, "--docs", "5", "--reference-docs", "3", "--new-tokens", "6",
                 "--batch-sizes", "2", "--dtype", "bf16")
    assert (result["documents"], result["reference_documents"], result["prompts"]) == (5, 3, 7)
    reference, batched, graphs, full = result["rows"]
    assert reference["variant"].startswith("reference") and reference["docs"] == 3
    assert batched["outputs_identical"] is True and graphs["outputs_identical"] is True
    assert batched["same_as_reference"] == "3/3" and graphs["same_as_batched_fp32"] == "5/5"
    assert full["variant"].startswith("full stack: bf16") and full["outputs_identical"] is None
    for row in result["rows"]:
        assert row["docs_per_s"] > 0 and row["device_s"] > 0 and row["prepare_s"] > 0 and row["decode_s"] > 0


def test_the_seqgpt_cli_benchmark_runs_extract_processes_and_checks_them_against_the_reference(seqgpt_tiny, tmp_path):
    result = run("seqgpt-cli-e2e", seqgpt_tiny, tmp_path, "--docs", "3", "--reference-docs", "2", "--new-tokens", "4",
                 "--batch-sizes", "2", "--variants", "fp32 eager")
    reference, cold, second = result["rows"]
    assert reference["variant"].startswith("reference") and reference["documents"] == 2
    assert (cold["caches"], second["caches"]) == ("cold", "second run")
    for row in (cold, second):
        assert row["documents_reported"] == 3 and row["same_as_reference"] == "2/2" and row["same_output_as_cold_run"]
        assert row["process_wall_s"] > row["run_s"] > 0 and row["x_reference_process"] < row["x_reference_run"]
        assert row["command"].startswith("launcher.py extract --model seqgpt") and "$TMP/in.jsonl" in row["command"]
