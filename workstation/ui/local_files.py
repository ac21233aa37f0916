"""Which files on the server the Batch page may read by path ("A file on this machine").

Reading by path runs as the server's user, so anyone who can open the UI could read what that user can.
It is therefore only offered when the UI listens on a loopback address (the person at the keyboard is
the person using it), and then only inside the folders listed in settings.toml ([batch] input_folders).
"""
from __future__ import annotations

import ipaddress
from pathlib import Path

from contracts.domain import InputError
from workstation.settings import Settings


def is_loopback(host: str | None) -> bool:
    """127.0.0.0/8, ::1 or "localhost"; an empty host or 0.0.0.0 listens on every interface."""
    if not host:
        return False
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False                     # a host name: it may resolve to a public interface


def input_folders(settings: Settings) -> list[Path]:
    return [settings.path(f).resolve() for f in settings.input_folders]


def refusal(settings: Settings, bound_host: str | None) -> str | None:
    """Why reading by path is off, or None when it is on."""
    if not is_loopback(bound_host):
        return (f"Reading files by path is off because the UI listens on {bound_host or 'every interface'}, "
                "beyond this machine: upload the file instead.")
    if not settings.input_folders:
        return ("No folder is open to the Batch page: list folders in settings.toml ([batch] input_folders), "
                "or upload the file.")
    return None


def local_file(text: str, settings: Settings, bound_host: str | None) -> Path:
    """The file `text` names, if reading by path is on and it lies inside a configured folder (after
    resolving `..` and symbolic links). Raises InputError saying what to do otherwise."""
    why = refusal(settings, bound_host)
    if why:
        raise InputError(why)
    path = Path(text.strip()).expanduser()
    folders = input_folders(settings)
    if not path.is_absolute():
        path = folders[0] / path
    resolved = path.resolve()
    if not any(resolved.is_relative_to(folder) for folder in folders):
        raise InputError(f"{path} is not inside a folder open to the Batch page "
                         f"({', '.join(str(f) for f in folders)}; [batch] input_folders in settings.toml)")
    return resolved
