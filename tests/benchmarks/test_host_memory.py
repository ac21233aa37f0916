"""`bench host-memory`: launcher.py extract in a child process, its peak RSS from the kernel, outputs checked."""
from __future__ import annotations

import argparse

from benchmarks import host_memory


def args(tmp_path, **over) -> argparse.Namespace:
    values = {"sizes": [12], "record": "on", "host_batch": 4, "weights": None, "out": tmp_path / "host-memory.json"}
    return argparse.Namespace(**{**values, **over})


def test_a_small_input_runs_in_a_child_and_is_written_and_recorded(tmp_path, rex_tiny):
    result = host_memory.host_memory(args(tmp_path, weights=str(rex_tiny)))
    [row] = result["rows"]
    assert (row["documents"], row["output_lines"], row["in_history"], row["recorded"]) == (12, 12, 12, True)
    assert row["peak_rss_MiB"] > 50 and row["seconds"] > 0
    assert (tmp_path / "host-memory.json").exists()


def test_the_growth_is_the_largest_inputs_peak_over_the_smallest(tmp_path, monkeypatch):
    peaks = iter([400 * 1024, 410 * 1024, 300 * 1024, 303 * 1024])

    def child(weights, source, out, settings, batch_size, record):
        lines = source.read_text("utf-8").count("\n")
        out.write_text("{}\n" * lines, "utf-8")
        return {"seconds": 1.0, "peak_rss_kib": next(peaks), "samples": [(0.5, 1024), (1.0, 2048)], "stderr": ""}
    monkeypatch.setattr(host_memory, "extract_in_child", child)
    monkeypatch.setattr(host_memory, "_recorded", lambda database: None)
    result = host_memory.host_memory(args(tmp_path, sizes=[3, 30], record="both", weights=str(tmp_path)))
    assert [(r["documents"], r["recorded"], r["output_lines"]) for r in result["rows"]] == [
        (3, True, 3), (3, False, 3), (30, True, 30), (30, False, 30)]
    assert result["peak_growth_recorded"] == 0.75 and result["peak_growth_not_recorded"] == 0.739
