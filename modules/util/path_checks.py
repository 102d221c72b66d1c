"""Start-up checks of the paths a config names: inputs are what they should be (a folder, a file) and
every output location can be created and written — found in a second, not after an hour of training.

Each check raises a one-line `UserError` that names the config key (or a command-line option such as
`--output`), what the path is, and what to do.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

from modules.util.errors import UserError
from modules.util.write_errors import write_failure


def _label(key: str) -> str:
    """A config key is named as such; anything else ('--output', 'sample output') is shown as given."""
    return f"config key '{key}'" if key.replace(".", "").replace("_", "").isalnum() else key


def path_kind(path: Path) -> str:
    """'a folder', 'a file', 'missing' or 'something else' (a socket, a device, a broken link)."""
    if path.is_dir():
        return "a folder"
    if path.is_file():
        return "a file"
    if not path.exists():
        return "missing"
    return "something else"


def check_input_folder(key: str, path: str | os.PathLike, expected: str) -> Path:
    """`path` must be an existing folder; `expected` describes it ('a diffusers Wan folder')."""
    return _check_input(key, Path(path), "a folder", expected)


def check_input_file(key: str, path: str | os.PathLike, expected: str) -> Path:
    """`path` must be an existing, readable file; `expected` describes it ('a .safetensors LoRA file')."""
    path = _check_input(key, Path(path), "a file", expected)
    if not os.access(path, os.R_OK):
        raise UserError(f"{_label(key)}: '{path}' cannot be read (permission denied): fix its permissions")
    return path


def _check_input(key: str, path: Path, wanted: str, expected: str) -> Path:
    kind = path_kind(path)
    if kind == "missing":
        raise UserError(f"{_label(key)}: '{path}' does not exist: set it to {expected}")
    if kind != wanted:
        raise UserError(f"{_label(key)}: '{path}' is {kind}, not {wanted}: set it to {expected}")
    return path


def check_writable_folder(key: str, path: str | os.PathLike) -> Path:
    """`path` is a folder we can create (if missing) and write into. Nothing is left behind by the check."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{_label(key)}: '{path}' is {path_kind(path)}, not a folder: "
                        "choose a folder path (or move the file away)")
    _probe(key, path)
    return path


def check_writable_file(key: str, path: str | os.PathLike) -> Path:
    """`path` is a file we can write: its folder can be created and written, and it is not a folder."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{_label(key)}: '{path}' is a folder, but a file is written there: "
                        "give a file path (e.g. ending in .safetensors)")
    _probe(key, path.parent, path)
    return path


def _probe(key: str, folder: Path, target: Path | None = None) -> None:
    """Write (and remove) a temp entry in `folder`, or in its nearest existing ancestor when it does not
    exist yet, so a read-only filesystem or a missing permission shows now — as root too, where
    `os.access` only looks at permission bits. `target` is the file to be written there, for the message."""
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    what = f"'{target or folder}'"
    if existing.exists() and not existing.is_dir():
        raise UserError(f"{_label(key)}: cannot create {what} because '{existing}' is {path_kind(existing)}, not a "
                        "folder: choose another path (or move that file away)")
    probe = existing / f".wantrainer-write-check-{uuid.uuid4().hex}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        where = what if existing == folder and target is None else f"{what} (in '{existing}')"
        raise UserError(f"{_label(key)}: cannot write to {where}: {write_failure(e)}; "
                        "choose a writable location") from None
