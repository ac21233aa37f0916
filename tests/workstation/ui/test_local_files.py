"""Reading Batch input by path: loopback only, and only inside [batch] input_folders."""
from __future__ import annotations

import pytest

from contracts.domain import InputError
from workstation.settings import Settings
from workstation.ui.local_files import is_loopback, local_file, refusal


def test_only_loopback_addresses_count_as_this_machine():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", None, "192.168.1.5", "example.org"))


def test_a_file_inside_a_configured_folder_is_allowed_and_relative_paths_start_there(tmp_path):
    folder = tmp_path / "corpora"
    (folder / "sub").mkdir(parents=True)
    s = Settings(input_folders=[str(folder)])
    assert local_file(str(folder / "sub" / "a.jsonl"), s, "127.0.0.1") == folder / "sub" / "a.jsonl"
    assert local_file("sub/a.jsonl", s, "localhost") == folder / "sub" / "a.jsonl"


def test_escapes_from_the_folders_are_refused(tmp_path):
    folder = tmp_path / "corpora"
    folder.mkdir()
    (tmp_path / "secret").write_text("x")
    (folder / "link").symlink_to(tmp_path / "secret")
    s = Settings(input_folders=[str(folder)])
    for escape in ("/etc/passwd", "../secret", str(folder / ".." / "secret"), "link"):
        with pytest.raises(InputError, match="is not inside a folder open to the Batch page"):
            local_file(escape, s, "127.0.0.1")


def test_beyond_loopback_or_without_folders_reading_by_path_is_off(tmp_path):
    s = Settings(input_folders=[str(tmp_path)])
    with pytest.raises(InputError, match="listens on 0.0.0.0, beyond this machine"):
        local_file(str(tmp_path / "a.txt"), s, "0.0.0.0")
    assert "No folder is open" in refusal(Settings(), "127.0.0.1")
    assert refusal(s, "127.0.0.1") is None
