from benchmarks.memory import agreement


def test_link_agreement_counts_links_both_runs_found_over_links_either_found():
    same = [{(1, 2), (3, 4)}, set()]
    assert agreement(same, same) == (True, 1.0)
    assert agreement([set()], [set()]) == (True, 1.0)
    assert agreement([{(1, 2), (3, 4)}, {(5, 6)}], [{(1, 2)}, {(5, 6), (7, 8)}]) == (False, 0.5)


def test_every_variant_is_compared_with_the_first(monkeypatch, tmp_path):
    import argparse

    from benchmarks import memory
    runs = iter([({"peak_reserved_over_peak_allocated": 3.0}, [{(1, 2)}]),
                 ({"peak_reserved_over_peak_allocated": 1.1}, [{(1, 2)}]),
                 ({"peak_reserved_over_peak_allocated": 1.5}, [{(1, 3)}])])
    calls = []
    monkeypatch.setattr(memory, "in_child", lambda call, expandable: calls.append((call[2], expandable)) or next(runs))
    monkeypatch.setattr(memory.engine, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(memory, "environment", lambda d: {"device": d})
    args = argparse.Namespace(device="cuda", weights=str(tmp_path), variants=["pool", "expandable"], batches=3, seed=0)
    rows = memory.memory_pool(args)["rows"]
    assert [r["variant"] for r in rows] == ["no pool (default allocator)", "expandable segments only",
                                            "memory pool: cuda graphs + expandable segments"]
    assert calls == [(False, False), (False, True), (True, True)]
    assert [r["within_1.2x"] for r in rows] == [False, True, False]
    assert [r["outputs_identical"] for r in rows] == [True, True, False]
    assert rows[2]["link_agreement_%"] == 0.0
