"""Resumable backups: `workspace/backup/step-00000123/` folders, written atomically, the last N kept.

A backup holds what training changed (trainable weights), the optimizer and LR-scheduler states, the
data position (epoch, next batch) and step counters, plus fingerprints of the config and dataset so
a resume with different settings warns and names what changed. Randomness needs no saved state: every
draw of step N comes from a generator seeded by (seed, N).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from modules.util.atomic import atomic_write_dir
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

BACKUP_DIR = "backup"
STATE_FILES = ("trainable.safetensors", "optimizer.pt", "lr_scheduler.pt")


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _verify(path: Path, names: tuple[str, ...], checksums: dict[str, str]) -> None:
    """Damage a loader would not notice (a flipped bit keeps a valid file) makes the backup unreadable."""
    for name in names:
        if name in checksums and _file_sha256(path / name) != checksums[name]:
            raise ValueError(f"{name} does not match the checksum written with it")


@dataclasses.dataclass
class TrainProgress:
    epoch: int = 0  # current epoch
    epoch_batch: int = 0  # next batch index inside the epoch
    global_step: int = 0  # optimizer steps done
    micro_step: int = 0  # forward/backward passes done

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Backup:
    path: Path
    progress: TrainProgress
    trainable: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    lr_scheduler: dict[str, Any]
    fingerprints: dict[str, str]


def backup_root(workspace_dir: str | Path) -> Path:
    return Path(workspace_dir) / BACKUP_DIR


def write_backup(workspace_dir: str | Path, progress: TrainProgress, trainable: dict[str, torch.Tensor],
                 optimizer: dict[str, Any], lr_scheduler: dict[str, Any], fingerprints: dict[str, str],
                 config_dict: dict[str, Any], keep: int) -> Path:
    """`optimizer` / `lr_scheduler` are state dicts (the optimizer's may be keyed by parameter name)."""
    root = backup_root(workspace_dir)
    path = root / f"step-{progress.global_step:08d}"

    def write(folder: Path) -> None:
        save_file({k: v.contiguous().cpu() for k, v in trainable.items()}, str(folder / "trainable.safetensors"))
        torch.save(optimizer, folder / "optimizer.pt")
        torch.save(lr_scheduler, folder / "lr_scheduler.pt")  # apart: ranks of a sharded resume read only this
        checksums = {name: _file_sha256(folder / name) for name in STATE_FILES}
        (folder / "progress.json").write_text(json.dumps({"progress": progress.to_dict(), "fingerprints": fingerprints,
                                                          "sha256": checksums}, indent=2))
        (folder / "config.json").write_text(json.dumps(config_dict, indent=4))

    for stale in root.glob(".step-*.tmp"):  # a write killed mid-way (SIGKILL, power loss) left it behind
        shutil.rmtree(stale, ignore_errors=True)
    try:
        atomic_write_dir(path, write)
    except OSError as e:  # e.g. a full disk: the previous backups are intact, say so in one line
        raise UserError(f"cannot write the backup to '{root}' ({e.strerror or e}): free space there or lower "
                        "rolling_backup_count; the previous backups are intact") from None
    for old in list_backups(workspace_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    logger.info("backup written to %s", path)
    return path


def list_backups(workspace_dir: str | Path) -> list[Path]:
    """Complete backups, oldest first (temp folders of an interrupted write are ignored)."""
    root = backup_root(workspace_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step-*") if (p / "progress.json").is_file() and p.is_dir())


def read_backup(path: Path, with_states: bool = True) -> Backup:
    """`with_states=False` skips the weights and optimizer state (empty dicts) — for the ranks of a
    sharded resume that receive theirs from rank 0."""
    meta = json.loads((path / "progress.json").read_text())
    _verify(path, STATE_FILES if with_states else ("lr_scheduler.pt",), meta.get("sha256", {}))
    lr_scheduler = torch.load(path / "lr_scheduler.pt", map_location="cpu", weights_only=False)
    optimizer = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False, mmap=True) if with_states else {}
    return Backup(
        path=path,
        progress=TrainProgress(**meta["progress"]),
        trainable=load_file(str(path / "trainable.safetensors")) if with_states else {},
        optimizer=optimizer,
        lr_scheduler=lr_scheduler,
        fingerprints=meta.get("fingerprints", {}),
    )


def latest_backup(workspace_dir: str | Path) -> Backup | None:
    """The newest backup that loads; a damaged one is skipped with a warning."""
    for path in reversed(list_backups(workspace_dir)):
        try:
            return read_backup(path)
        except Exception as e:  # a damaged backup must not block resuming from an older good one
            logger.warning("backup %s cannot be read (%s); trying an older one", path, e)
    return None
