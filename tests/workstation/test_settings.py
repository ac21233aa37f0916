"""settings.toml checked against its schema: unknown keys and wrong types are one error naming the key and the file;
IEW_* environment variables override the file; relative paths are relative to the file's folder."""
from __future__ import annotations

import os

import pytest

from workstation import cli
from workstation import settings as settings_module
from workstation.settings import SettingsError, load_settings
from workstation.weights import settings_file


@pytest.fixture
def settings_toml(tmp_path, monkeypatch):
    """A settings.toml in tmp_path, what load_settings() reads by default; no IEW_* override from outside."""
    for name in [n for n in os.environ if n.upper().startswith("IEW_") and "__" in n]:
        monkeypatch.delenv(name)
    path = tmp_path / "conf" / "settings.toml"
    path.parent.mkdir()
    monkeypatch.setattr(settings_module, "DEFAULT_PATH", path)
    return path


def refused(path, text: str) -> str:
    path.write_text(text, "utf-8")
    with pytest.raises(SettingsError) as e:
        load_settings(path)
    return str(e.value)


def test_a_misspelt_model_key_is_refused_naming_the_file_the_table_and_the_known_keys(settings_toml):
    message = refused(settings_toml, "[models.rexuninlu]\nbatchsize = 8\n")
    assert message == (f"{settings_toml}: [models.rexuninlu] has no setting 'batchsize'; "
                       "known: weights, device, dtype, batch_size")


def test_an_unknown_section_and_a_stray_top_level_key_are_refused(settings_toml):
    assert refused(settings_toml, "[storge]\ndatabase = 'x.db'\n").startswith(
        f"{settings_toml}: has no section 'storge'; known: models, optimizations, storage,")
    assert "has no section 'batchsize'" in refused(settings_toml, "batchsize = 8\n")


@pytest.mark.parametrize("text, expected", [
    ('[ui]\nport = "high"\n', "[ui] port: Input should be a valid integer"),
    ('[models.seqgpt]\ndtype = "fp8"\n', "[models.seqgpt] dtype: Input should be 'fp32', 'fp16' or 'bf16' (got 'fp8')"),
    ('[models.seqgpt]\nbatch_size = "lots"\n', '[models.seqgpt] batch_size: batch size must be a whole number or "auto"'),
    ('[storage]\ndemo_size = "huge"\n', "[storage] demo_size: Input should be 'auto', 'full' or 'tiny'"),
    ("[results]\nmax_tuples_per_document = -1\n", "[results] max_tuples_per_document: Input should be greater than"),
    ('[api]\ncors_origins = "http://x"\n', "[api] cors_origins: Input should be a valid list (got 'http://x')"),
    ("[monitor]\ninterval_s = 0\n", "[monitor] interval_s: Input should be greater than 0"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_the_key(settings_toml, text, expected):
    assert refused(settings_toml, text).startswith(f"{settings_toml}: {expected}")


def test_a_file_that_is_not_toml_is_refused_naming_it(settings_toml):
    assert refused(settings_toml, "[ui\nport = 1\n").startswith(f"{settings_toml}: not valid TOML:")


def test_the_shipped_settings_toml_is_valid_and_a_missing_file_means_the_defaults(settings_toml):
    s = load_settings(settings_module.ROOT / "settings.toml")
    assert s.model("seqgpt").batch_size == 8 and s.api.port == 8502 and s.ui_port == 8501
    assert load_settings(settings_toml).database == "data/runs.db"


def test_environment_variables_override_the_file_section_by_section(settings_toml, monkeypatch):
    settings_toml.write_text('[ui]\nport = 8600\nhost = "127.0.0.1"\n[models.seqgpt]\ndevice = "cuda"\nbatch_size = 4\n',
                             "utf-8")
    monkeypatch.setenv("IEW_UI__PORT", "8700")
    monkeypatch.setenv("IEW_MODELS__SEQGPT__DEVICE", "cpu")
    monkeypatch.setenv("IEW_API__CORS_ORIGINS", '["http://localhost:8080"]')
    s = load_settings()
    assert (s.ui_port, s.ui_host) == (8700, "127.0.0.1")                     # the file's host stays
    assert (s.model("seqgpt").device, s.model("seqgpt").batch_size) == ("cpu", 4)
    assert s.api.cors_origins == ["http://localhost:8080"]


def test_a_bad_environment_override_is_refused_naming_the_variable(settings_toml, monkeypatch):
    settings_toml.write_text("[ui]\nport = 8600\n", "utf-8")
    monkeypatch.setenv("IEW_UI__PORT", "high")
    with pytest.raises(SettingsError, match=r"^environment variable IEW_UI__PORT: Input should be a valid integer"):
        load_settings()
    monkeypatch.delenv("IEW_UI__PORT")
    monkeypatch.setenv("IEW_STORAGE__DATABSE", "x.db")
    with pytest.raises(SettingsError, match=r"^environment variable IEW_STORAGE__DATABSE: \[storage\] has no "
                                            r"setting 'databse'; known: database,"):
        load_settings()


def test_an_environment_list_that_is_not_json_is_refused_naming_the_variable(settings_toml, monkeypatch):
    monkeypatch.setenv("IEW_API__MODELS", "rexuninlu")
    with pytest.raises(SettingsError, match=r"^environment variable IEW_API__MODELS: .*written as JSON"):
        load_settings()
    monkeypatch.setenv("IEW_API__MODELS", '["rexuninlu"]')
    assert load_settings().api.models == ["rexuninlu"]


def test_relative_paths_resolve_against_the_settings_files_folder(settings_toml, tmp_path):
    settings_toml.write_text('[storage]\ndemo_weights_dir = "demo"\ndatabase = "db/runs.db"\n'
                             '[models.seqgpt]\nweights = "../w/seqgpt"\n', "utf-8")
    s = load_settings()
    assert s.weights_for("rexuninlu")[0].parent == tmp_path / "conf" / "demo"
    assert s.path(s.database) == tmp_path / "conf" / "db" / "runs.db"
    assert s.weights_for("seqgpt") == (tmp_path / "conf" / ".." / "w" / "seqgpt", False)


def test_weights_use_writes_a_folder_relative_to_the_settings_file_that_reads_back(settings_toml, tmp_path):
    settings_toml.write_text("# kept\n[models.seqgpt]\ndevice = \"cpu\"\n", "utf-8")
    (tmp_path / "conf" / "w").mkdir()
    settings_file.set_weights(settings_toml, "seqgpt", tmp_path / "conf" / "w")
    assert 'weights = "w"' in settings_toml.read_text("utf-8") and "# kept" in settings_toml.read_text("utf-8")
    assert load_settings().weights_for("seqgpt") == (tmp_path / "conf" / "w", False)


def test_the_cli_prints_one_line_and_exits_2_on_a_bad_settings_file(settings_toml, capsys):
    settings_toml.write_text("[models.rexuninlu]\nbatchsize = 8\n", "utf-8")
    assert cli.main(["demo-weights", "--model", "rexuninlu"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {settings_toml}: [models.rexuninlu] has no setting 'batchsize'; " \
                  "known: weights, device, dtype, batch_size\n"


def test_the_launcher_puts_the_compile_caches_beside_a_relative_database_of_the_settings_file(settings_toml, tmp_path,
                                                                                             monkeypatch):
    import launcher
    settings_toml.write_text('[storage]\ndatabase = "db/runs.db"\n', "utf-8")
    monkeypatch.setenv("IEW_SETTINGS", str(settings_toml))
    for name in ("IEW_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    launcher.point_compile_caches()
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "conf" / "db" / "cache" / "triton")
    assert load_settings().path("db/cache") == tmp_path / "conf" / "db" / "cache"     # where the settings put it
