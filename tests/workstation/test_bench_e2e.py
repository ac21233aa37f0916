"""bench rex-e2e on CPU with tiny weights: densities are calibrated, every row's outputs are checked."""
import json

from benchmarks import main as bench_main


def test_rex_e2e_profiles_stages_at_calibrated_densities(rex_tiny, tmp_path):
    out = tmp_path / "e2e.json"
    code = bench_main(["rex-e2e", "--weights", str(rex_tiny), "--device", "cpu", "--docs", "10",
                       "--batch-sizes", "4", "--densities", "sparse,dense",
                       "--variants", "fp32 eager;fp32 eager, batch 4, before",    # 'before' rows only when named
                       "--out", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    sparse, dense = result["tables"]
    assert (sparse["density"], dense["density"]) == ("sparse", "dense")
    assert dense["tuples_per_doc"] > 5 * max(sparse["tuples_per_doc"], 0.2)
    assert dense["calibrated_spans_per_char_per_type"] > sparse["calibrated_spans_per_char_per_type"]
    for table in result["tables"]:
        names = [r["variant"] for r in table["rows"]]
        assert names == ["fp32 eager, one window at a time (traditional), before", "fp32 eager, batch 4, before",
                         "fp32 eager, batch 4", "fp32 eager + host workers, batch 4"]
        assert table["rows"][2]["identical_to_before"] is True
        for row in table["rows"]:
            assert row["outputs_identical"], row
            assert set(row["stages_s"]) == {"prepare", "device", "decode", "write"}
            assert row["stages_s"]["device"] > 0 and row["docs_per_s"] > 0
