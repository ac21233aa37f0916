"""`bench cli-e2e`: launcher.py extract in new processes, cold and with its caches warm, timed from outside."""
from __future__ import annotations

import argparse
import shutil

from benchmarks import cli_e2e


def args(tmp_path, weights, **over) -> argparse.Namespace:
    values = {"device": "cpu", "weights": str(weights), "sizes": [6], "docs": 6, "densities": ["sparse"],
              "variants": ["fp32 eager"], "batch_sizes": [4], "seed": 0, "out": tmp_path / "cli-e2e.json"}
    return argparse.Namespace(**{**values, **over})


def test_each_run_is_a_new_extract_process_cold_then_with_its_caches_warm(tmp_path, rex_tiny, monkeypatch):
    def as_is(weights, out, density, device, seed):      # calibration is rex-e2e's, tested there; not timed here
        shutil.copytree(weights, out)
        return out, {"target_spans_per_char_per_type": 0}
    monkeypatch.setattr(cli_e2e, "calibrated_weights", as_is)
    result = cli_e2e.cli_e2e(args(tmp_path, rex_tiny))
    cold, second = result["rows"]
    assert (cold["caches"], cold["caches_warm"], second["caches"], second["caches_warm"]) == (
        "cold", False, "second run", True)
    for row in (cold, second):
        assert row["output_lines"] == row["documents_reported"] == 6 and row["same_output_as_cold_run"]
        assert row["process_wall_s"] > row["run_s"] > 0 and row["process_wall_s"] > row["first_result_s"] > 0
        assert row["model_load_s"] > 0 and row["warm_up_s"] == 0          # no graphs are captured on the CPU
        assert row["command"].startswith("launcher.py extract --model rexuninlu")
        assert row["commit"] and row["machine"]["cpus"] and row["machine"]["gpu"] is None
    assert (tmp_path / "cli-e2e.json").exists()


def test_the_report_is_read_from_the_lines_extract_prints():
    stderr = ("1,000 documents in 2.50s (400.0 docs/s) on cuda (bf16, attention triton); output: o.jsonl\n"
              "time: prepare 0.10s · device 2.00s · decode 0.50s · write 0.20s · device busy 80% of 2.50s\n"
              "process: model load 1.25s · warm-up 0.75s · first result 4.10s · done 6.00s after the process started\n")
    assert cli_e2e.parse_report(stderr) == {
        "documents_reported": 1000, "run_s": 2.5, "run_docs_per_s": 400.0, "device_busy_%": 80,
        "model_load_s": 1.25, "warm_up_s": 0.75, "first_result_s": 4.1, "sat_out": [], "host_workers_after": None}


def test_a_report_without_its_process_line_is_an_error():
    import pytest
    with pytest.raises(RuntimeError, match="process line"):
        cli_e2e.parse_report("3 documents in 0.10s (30.0 docs/s) on cpu (fp32, attention sdpa); output: o\n")


def test_an_optimization_that_sat_the_run_out_is_named_in_the_row():
    stderr = ("12 documents in 0.50s (24.0 docs/s) on cpu (fp32, attention sdpa); output: o\n"
              "process: model load 0.90s · warm-up 0.00s · first result 3.00s · done 3.60s after the process started\n"
              "note: host-workers off for this run: 12 documents, fewer than 20,000 (starting the workers costs more)\n")
    assert cli_e2e.parse_report(stderr)["sat_out"] == ["host-workers"]


def test_host_workers_that_took_a_run_over_say_after_how_many_documents():
    stderr = ("3,000 documents in 2.50s (1,200.0 docs/s) on cuda (bf16, attention triton); output: o\n"
              "process: model load 0.90s · warm-up 0.50s · first result 3.00s · done 5.60s after the process started\n"
              "note: host-workers handed over to the worker processes after 1,212 documents (decoding and writing "
              "took 58% of the run's own thread)\n")
    row = cli_e2e.parse_report(stderr)
    assert row["host_workers_after"] == 1212 and row["sat_out"] == []
