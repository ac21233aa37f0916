"""`weights fetch` with the real clients (huggingface_hub for SeqGPT, modelscope for RexUniNLU) against the fake hub."""
from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.fake_hub import Cut
from workstation.settings import load_settings
from workstation.weights import fetch as fetching
from workstation.weights.fetch import fetch, folder_name
from workstation.weights.folders import SOURCE_FILE
from workstation.weights.hubs import FetchError, hub_for

MODELS = ["rexuninlu", "seqgpt"]          # one per hub: ModelScope, Hugging Face


def _fetch(families, name, settings_file, tmp_path, **kw):
    return fetch(families[name], load_settings(settings_file), tmp_path / "weights", **kw)


def _untouched(settings_file: Path) -> bool:
    return 'weights = ""' in settings_file.read_text("utf-8") and "seqgpt" not in settings_file.read_text("utf-8")


@pytest.mark.parametrize("name", MODELS)
def test_fetch_downloads_verifies_and_switches_settings_keeping_its_comments(name, hub, families, settings_file,
                                                                            tmp_path, tiny_checkpoints):
    seen = []
    folder, description = _fetch(families, name, settings_file, tmp_path, report=lambda p: seen.append(p.stage))

    assert folder.parent == tmp_path / "weights" and not (tmp_path / "weights" / ".staging" / folder.name).exists()
    official = families[name].official
    assert sorted(p.name for p in folder.iterdir()) == sorted((*official.files, SOURCE_FILE))
    assert (folder / "pytorch_model.bin").read_bytes() == (tiny_checkpoints[name] / "pytorch_model.bin").read_bytes()
    source = json.loads((folder / SOURCE_FILE).read_text())
    assert (source["hub"], source["repo_id"], source["revision"]) == (official.hub, official.repo_id, official.revision)
    assert "2 layers" in description and {"listing", "downloading", "checking", "done"} <= set(seen)
    text = settings_file.read_text("utf-8")
    assert "# the RexUniNLU checkpoint" in text and 'device = "cpu"        # stays' in text   # layout kept
    assert load_settings(settings_file).weights_for(name) == (folder, False)
    families[name].load(folder)                  # the strict loader takes what was fetched


def test_fetching_again_reuses_the_verified_folder_without_downloading(hub, families, settings_file, tmp_path):
    first, _ = _fetch(families, "seqgpt", settings_file, tmp_path)
    hub.requests.clear()
    again, _ = _fetch(families, "seqgpt", settings_file, tmp_path)
    assert again == first and not [r for r in hub.requests if "/resolve/" in r[1]]


@pytest.mark.parametrize("name", MODELS)
def test_an_interrupted_fetch_resumes_where_it_stopped_and_changes_nothing_until_done(name, hub, families,
                                                                                   settings_file, tmp_path):
    hub.cut["pytorch_model.bin"] = Cut(after=300_000, times=100)
    with pytest.raises(FetchError) as failure:
        _fetch(families, name, settings_file, tmp_path)
    assert "\n" not in str(failure.value) and "again" in str(failure.value)
    staging = tmp_path / "weights" / ".staging"
    partial = list(staging.rglob("pytorch_model.bin.incomplete"))
    assert partial and partial[0].stat().st_size >= 65_536, "the bytes already received are kept"
    assert _untouched(settings_file) and not [p for p in (tmp_path / "weights").iterdir() if p.name != ".staging"]

    hub.cut.clear()
    hub.requests.clear()
    folder, _ = _fetch(families, name, settings_file, tmp_path)
    assert hub.resumed("pytorch_model.bin") >= 1, "the second fetch asks only for the rest of the file"
    assert not any(r[2] in ("", "bytes=0-") for r in hub.requests if r[1].endswith("pytorch_model.bin")
                   and r[0] == "GET")
    families[name].load(folder)


@pytest.mark.parametrize("name", MODELS)
def test_a_corrupted_download_is_refused_and_never_used(name, hub, families, settings_file, tmp_path):
    hub.corrupt.add("pytorch_model.bin")
    with pytest.raises(FetchError, match="pytorch_model.bin") as failure:
        _fetch(families, name, settings_file, tmp_path)
    assert "\n" not in str(failure.value)
    assert _untouched(settings_file)
    assert not (tmp_path / "weights" / folder_name(name, families[name].official.revision)).exists()
    assert not list((tmp_path / "weights").rglob("pytorch_model.bin")), "the damaged file is not kept as finished"


def test_a_checkpoint_that_fails_the_strict_check_is_refused(hub, families, settings_file, tmp_path,
                                                           tiny_checkpoints):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoints["rexuninlu"], broken)
    state = torch.load(broken / "pytorch_model.bin", weights_only=True)
    del state["ffnq.weight"]
    torch.save(state, broken / "pytorch_model.bin")
    official = families["rexuninlu"].official
    hub.add(official.repo_id, broken, "e" * 40, refs=(official.revision,), extra={"configuration.json": b"{}"})
    with pytest.raises(FetchError, match="does not load.*ffnq.weight"):
        _fetch(families, "rexuninlu", settings_file, tmp_path)
    assert _untouched(settings_file) and not list((tmp_path / "weights").rglob("pytorch_model.bin"))


@pytest.mark.parametrize("name", MODELS)
def test_a_repo_missing_from_the_hub_is_one_line_naming_it(name, hub, families, settings_file, tmp_path):
    hub.repos.clear()
    with pytest.raises(FetchError, match="not found.*404") as failure:
        _fetch(families, name, settings_file, tmp_path)
    assert families[name].official.repo_id in str(failure.value) and "\n" not in str(failure.value)
    assert _untouched(settings_file)


@pytest.mark.parametrize("name", MODELS)
def test_a_wrong_revision_is_one_line_naming_it(name, hub, families, settings_file, tmp_path):
    with pytest.raises(FetchError, match="revision 'no-such-tag' .* does not exist") as failure:
        _fetch(families, name, settings_file, tmp_path, revision="no-such-tag")
    assert "\n" not in str(failure.value) and _untouched(settings_file)


@pytest.mark.parametrize("name", MODELS)
def test_an_unreachable_hub_is_one_line_and_the_weights_in_use_stay(name, hub, families, settings_file, tmp_path,
                                                                   monkeypatch):
    from tests.workstation.api.conftest import free_port
    dead = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", dead)
    with pytest.raises(FetchError, match="could not download.*check the network") as failure:
        _fetch(families, name, settings_file, tmp_path)
    assert dead in str(failure.value) and "\n" not in str(failure.value) and _untouched(settings_file)


def test_a_full_disk_is_refused_before_downloading(hub, families, settings_file, tmp_path, monkeypatch):
    monkeypatch.setattr(fetching.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    with pytest.raises(FetchError, match="disk is full.*--dir"):
        _fetch(families, "seqgpt", settings_file, tmp_path)
    assert not [r for r in hub.requests if "/resolve/" in r[1]] and _untouched(settings_file)


def test_a_disk_filling_up_during_the_download_is_one_line(families):
    hub = hub_for(families["seqgpt"].official)
    assert "disk" not in str(hub.fail(RuntimeError("write failed"), "main"))
    full = OSError(errno.ENOSPC, "No space left on device", "/x/pytorch_model.bin.incomplete")
    wrapped = RuntimeError("download failed")
    wrapped.__cause__ = full
    assert str(hub.fail(wrapped, "main")).startswith("the disk is full while downloading DAMO-NLP/SeqGPT-560M@main")


def test_the_endpoint_comes_from_the_environment_then_settings(monkeypatch):
    from workstation.weights.hubs import endpoint_for
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("MODELSCOPE_ENDPOINT", raising=False)
    monkeypatch.delenv("MODELSCOPE_DOMAIN", raising=False)
    assert endpoint_for("huggingface", "") is None
    assert endpoint_for("huggingface", "https://hf-mirror.com/") == "https://hf-mirror.com"
    monkeypatch.setenv("MODELSCOPE_DOMAIN", "www.modelscope.cn")
    assert endpoint_for("modelscope", "https://ignored") == "https://www.modelscope.cn"
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert endpoint_for("huggingface", "https://hf-mirror.com") == "http://127.0.0.1:9"


def test_an_unknown_weights_setting_is_an_error_naming_it(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('[weights]\nhf_endpoint = "https://hf-mirror.com"\n', "utf-8")
    with pytest.raises(ValueError, match=r"\[weights\] has no setting 'hf_endpoint'; known: dir, huggingface_endpoint"):
        load_settings(path)
