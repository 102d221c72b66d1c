"""Start-up checks of the paths a config names: inputs are what they should be (a folder, a file) and
every output location can be created and written — found in a second, not after an hour of training.

Each check raises a one-line `UserError` that names the config key (or a command-line option such as
`--output`), what the path is, and what to do.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterable

from modules.util.errors import UserError
from modules.util.write_errors import write_failure


def _label(key: str) -> str:
    """A config key is named as such; anything else ('--output', 'sample output') is shown as given."""
    plain = key.replace(".", "").replace("_", "").replace("[", "").replace("]", "")
    return f"config key '{key}'" if plain.isalnum() else key


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


# --------------------------------------------------------------------------------- outputs that are inputs


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what `path` names (links followed), None when nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _files_of(path: Path) -> list[Path]:
    """`path` itself, or every file under a folder (a model folder: its transformer shards, configs, ...)."""
    if not path.is_dir():
        return [path]
    found = []
    for root, _, names in os.walk(path):  # symlinked sub-folders are not followed; symlinked files are stat'ed
        found.extend(Path(root) / name for name in names)
    return found


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_not_an_input(option: str, outputs: Iterable[str | os.PathLike],
                       inputs: Iterable[tuple[str, str | os.PathLike]]) -> None:
    """Refuse, in one line and before anything loads, an output that would overwrite an input: the same file by
    resolved path (symlinks) or by device and inode (hard links), a file inside an input folder that is one of its
    files, or an output folder (replaced as a whole) that is or holds an input. `inputs`: (how the user gave it,
    path) pairs, e.g. ("--lora", "a.safetensors"); a folder input counts with every file under it."""
    given = [(key, Path(path)) for key, path in inputs if path not in (None, "")]
    for output in map(Path, outputs):
        out_real = Path(os.path.realpath(output))
        out_id = _identity(output)
        for key, path in given:
            real = Path(os.path.realpath(path))
            if _within(real, out_real):
                what = "the same path as" if real == out_real else "a folder holding"
                raise UserError(f"{option} '{output}' is {what} {_label(key)} '{path}': writing it would overwrite "
                                "that input; choose another output path")
            for file in _files_of(path):
                if Path(os.path.realpath(file)) == out_real or (out_id is not None and _identity(file) == out_id):
                    inside = "" if file == path else f" (its file '{file}')"
                    raise UserError(f"{option} '{output}' is the same file as {_label(key)} '{path}'{inside}: "
                                    "writing it would overwrite that input; choose another output path")
