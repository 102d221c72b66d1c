"""Atomic file writes: write a temp file beside the target, fsync, rename over it.

A crash or a kill at any moment leaves either the old file or the new one, never half of one. What
a killed write leaves behind (its hidden temp file, or a folder swap stopped half-way) is cleaned up
by the next write of the same target.
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

logger = logging.getLogger(__name__)

# A temp file this old belongs to a write that was killed: no live write of a cache entry, LoRA or
# model shard takes an hour, and a younger one may be another process writing the same target now.
STALE_AFTER_S = 3600.0


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
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
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
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


def atomic_write_dir(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Let `write` fill a temp folder, then swap it in for `path` (see `atomic_dir`)."""
    with atomic_dir(path) as tmp:
        write(tmp)
