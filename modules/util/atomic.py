"""Atomic file writes: write a temp file beside the target, fsync, rename over it.

A crash or a kill at any moment leaves either the old file or the new one, never half of one. What
a killed write leaves behind (its hidden temp file, or a folder swap stopped half-way) is cleaned up
by the next write of the same target.

Results get the permissions of any normal file (0644 / 0755 under umask 022): `tempfile` makes its
files 0600 and folders 0700, which would hide outputs from a ComfyUI service running as another user.
Temp names hold no digits: opencv's writers read a digit run in a name as an image-sequence pattern.
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import random
import shutil
import string
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

logger = logging.getLogger(__name__)

# A temp file this old belongs to a write that was killed: no live write of a cache entry, LoRA or
# model shard takes an hour, and a younger one may be another process writing the same target now.
STALE_AFTER_S = 3600.0


_UMASK_LOCK = threading.Lock()
_TEMP_NAME_LETTERS = string.ascii_lowercase


def current_umask() -> int:
    """The process umask (Linux reads it without changing it; elsewhere it is set and restored under a lock)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~current_umask()


def folder_mode() -> int:
    return 0o777 & ~current_umask()


def _temp_name(prefix: str, suffix: str) -> str:
    letters = "".join(random.SystemRandom().choice(_TEMP_NAME_LETTERS) for _ in range(10))
    return f"{prefix}{letters}{suffix}"


def _make_temp(folder: Path, prefix: str, suffix: str, make: Callable[[Path], None]) -> Path:
    """Create a fresh temp file or folder (exclusive, like tempfile) with a digit-free name."""
    for _ in range(100):
        candidate = folder / _temp_name(prefix, suffix)
        try:
            make(candidate)
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp name in {folder}")


def _create_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies


def remove_stale_temps(folder: Path, pattern: str) -> int:
    """Delete leftovers of killed writes (files or folders matching `pattern`, older than STALE_AFTER_S)."""
    removed = 0
    now = time.time()
    for leftover in folder.glob(pattern):
        try:
            if now - leftover.stat().st_mtime < STALE_AFTER_S:
                continue
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
            removed += 1
        except OSError:  # gone already, or not ours to delete: leave it
            continue
    if removed:
        logger.info("removed %d leftover temp file(s) of an interrupted write in %s", removed, folder)
    return removed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path (same folder, same suffix) to write; it replaces `path` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, f".{glob.escape(path.stem)}.*.tmp{glob.escape(path.suffix)}")
    tmp_path = _make_temp(path.parent, f".{path.stem}.", f".tmp{path.suffix}", _create_file)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp_path, file_mode())  # a writer may have made its own file in place of ours
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp folder beside `path` to fill; it is swapped in for `path` when the block ends without
    an error (the old folder is removed after), and removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.with_name(f".{path.name}.old")
    if old.exists() and not path.exists():  # a swap killed between its two renames: the old one is the good one
        os.replace(old, path)
        logger.warning("restored %s from an interrupted write", path)
    remove_stale_temps(path.parent, f".{glob.escape(path.name)}.*.tmp")
    tmp = _make_temp(path.parent, f".{path.name}.", ".tmp", lambda p: p.mkdir(0o777))  # the umask applies
    try:
        yield tmp
        _normalise_modes(tmp)
        if old.exists():
            shutil.rmtree(old)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        if old.exists():
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _normalise_modes(folder: Path) -> None:
    """Files that libraries wrote inside a temp folder with their own temp-file modes get normal ones."""
    files_mode, folders_mode = file_mode(), folder_mode()  # the umask once, not per entry
    os.chmod(folder, folders_mode)
    for root, folders, files in os.walk(folder):
        for name in folders:
            os.chmod(Path(root) / name, folders_mode)
        for name in files:
            os.chmod(Path(root) / name, files_mode)


def atomic_write_dir(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Let `write` fill a temp folder, then swap it in for `path` (see `atomic_dir`)."""
    with atomic_dir(path) as tmp:
        write(tmp)
