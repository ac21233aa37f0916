"""batch_size = "auto": the largest batch measured to fit the device's memory (docs/performance.md §7), picked
from the model's table by the memory the device reports; tested with a faked device."""
import json
from types import SimpleNamespace

import pytest
import torch

from contracts.batching import AUTO, DEFAULT_BATCH, auto_batch_size, batch_setting
from workstation import engine
from workstation.cli import main
from workstation.settings import load_settings

TABLE = {"fp32": ((8, 32), (24, 128), (48, 256)), "bf16": ((8, 64), (24, 256), (48, 512))}
RTX_4090_BYTES = 25_757_220_864          # what an RTX 4090 reports: 23.99 GiB, 25.8·10⁹ bytes


@pytest.mark.parametrize("device_bytes, dtype, batch", [
    (RTX_4090_BYTES, "fp32", 128), (RTX_4090_BYTES, "bf16", 256), (RTX_4090_BYTES, "fp16", 128),  # no fp16 row: fp32's
    (150_000_000_000, "fp32", 256), (8_589_934_592, "fp32", 32), (4_000_000_000, "bf16", 64), (None, "fp32", 32)])
def test_auto_takes_the_row_with_the_most_memory_the_device_has(device_bytes, dtype, batch):
    assert auto_batch_size(TABLE, dtype, device_bytes) == batch


def test_a_model_without_a_table_gets_the_default_batch():
    assert auto_batch_size({}, "fp32", RTX_4090_BYTES) == DEFAULT_BATCH


def fake_gpu(monkeypatch, total_memory: int, name: str = "NVIDIA GeForce RTX 4090"):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(name=name, total_memory=total_memory))


def test_the_engine_picks_from_the_models_table_by_the_devices_reported_memory(monkeypatch):
    rex = engine.family("rexuninlu")
    fake_gpu(monkeypatch, RTX_4090_BYTES, name="a name the choice never reads")
    expected = [b for gb, b in rex.batch_table["fp32"] if RTX_4090_BYTES >= gb * 1e9][-1]
    assert engine.batch_size_for(rex, AUTO, "cuda:1", "fp32") == expected
    assert engine.batch_size_for(rex, 12, "cuda:1", "fp32") == 12                   # a number is kept as it is
    fake_gpu(monkeypatch, 85_899_345_920)                                           # an 80 GB card: a larger row
    assert engine.batch_size_for(rex, AUTO, "cuda", "fp32") > expected


def test_both_built_in_models_have_a_table_that_grows_with_memory_for_every_dtype():
    for name in ("rexuninlu", "seqgpt"):
        table = engine.family(name).batch_table
        assert set(table) == {"fp32", "bf16", "fp16"}, name
        for rows in table.values():
            assert [gb for gb, _ in rows] == sorted(gb for gb, _ in rows) and any(gb == 24 for gb, _ in rows)
            assert [b for _, b in rows] == sorted(b for _, b in rows) and all(b >= 1 for _, b in rows)


@pytest.mark.parametrize("value, message", [("big", "whole number"), (0, "at least 1"), (True, "whole number"),
                                            (2.5, "whole number")])
def test_a_batch_size_setting_that_is_neither_a_number_nor_auto_is_refused_with_where(value, message):
    with pytest.raises(ValueError, match=f"settings.toml: \\[models.x\\] batch_size: batch size must be.*{message}"):
        batch_setting(value, "settings.toml: [models.x] batch_size")


def test_settings_toml_takes_auto_and_names_a_bad_value(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('[models.rexuninlu]\nbatch_size = "auto"\n[models.seqgpt]\nbatch_size = 4\n', "utf-8")
    s = load_settings(path)
    assert s.model("rexuninlu").batch_size == AUTO and s.model("seqgpt").batch_size == 4
    path.write_text('[models.seqgpt]\nbatch_size = "lots"\n', "utf-8")
    with pytest.raises(ValueError, match=r"\[models.seqgpt\] batch_size"):
        load_settings(path)


def test_extract_with_batch_size_auto_runs_with_the_tables_batch(tmp_path, rex_tiny, monkeypatch):
    used = []
    real_run = engine.run
    monkeypatch.setattr(engine, "run", lambda model, docs, config, **kw: used.append(config.batch_size)
                        or real_run(model, docs, config, **kw))
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": 1, "text": "北京", "schema": {"地理位置": None}}, ensure_ascii=False) + "\n", "utf-8")
    code = main(["extract", "--model", "rexuninlu", "--weights", str(rex_tiny), "--input", str(inp), "--output",
                 str(tmp_path / "out.jsonl"), "--device", "cpu", "--no-record", "--batch-size", "auto"])
    assert code == 0 and used == [engine.family("rexuninlu").batch_table["fp32"][0][1]]    # CPU: the first row
    with pytest.raises(SystemExit):
        main(["extract", "--model", "rexuninlu", "--input", str(inp), "--output", str(tmp_path / "o"),
              "--batch-size", "several"])
