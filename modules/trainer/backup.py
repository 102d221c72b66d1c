"""Resumable backups: `workspace/backup/step-00000123/` folders, written atomically, the last N kept.

A backup holds what training changed (trainable weights), the optimizer and LR-scheduler states, the
data position (epoch, next batch) and step counters, plus fingerprints of the config and dataset so
a resume with different settings warns and names what changed. Randomness needs no saved state: every
draw of step N comes from a generator seeded by (seed, N).

Whole-tensor backups hold `trainable.safetensors` and `optimizer.pt`; FSDP runs write `shards/`
(torch.distributed.checkpoint, each rank its own part), which any number of ranks — or one process —
can read back. `progress.json` is written last and lists a sha256 of every other file: a backup whose
files changed after writing is skipped for the previous one.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import load_file, save_file

from modules.util.atomic import atomic_write_dir
from modules.util.distributed import DistributedContext
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

BACKUP_DIR = "backup"
SHARDS_DIR = "shards"  # FSDP backups: torch.distributed.checkpoint files, one per rank


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _verify(path: Path, names: list[str], checksums: dict[str, str]) -> None:
    """Damage a loader would not notice (a flipped bit keeps a valid file) makes the backup unreadable."""
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(names)))) as pool:
        digests = list(pool.map(lambda name: _file_sha256(path / name), names))
    for name, digest in zip(names, digests):
        if digest != checksums[name]:
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
    shards: Path | None = None  # an FSDP backup's torch.distributed.checkpoint folder (trainable/optimizer empty)
    world_size: int = 1  # data-parallel ranks of the run that wrote it


def backup_root(workspace_dir: str | Path) -> Path:
    return Path(workspace_dir) / BACKUP_DIR


def write_backup(workspace_dir: str | Path, progress: TrainProgress, trainable: dict[str, torch.Tensor],
                 optimizer: dict[str, Any], lr_scheduler: dict[str, Any], fingerprints: dict[str, str],
                 config_dict: dict[str, Any], keep: int, world_size: int = 1) -> Path:
    """A backup of whole tensors; `optimizer` / `lr_scheduler` are state dicts; `world_size` is the
    number of data-parallel ranks (batch_size counts per rank)."""
    def write_states(folder: Path) -> None:
        save_file({k: v.contiguous().cpu() for k, v in trainable.items()}, str(folder / "trainable.safetensors"))
        torch.save(optimizer, folder / "optimizer.pt")

    return _write(workspace_dir, progress, write_states, lr_scheduler, fingerprints, config_dict, keep, world_size)


def write_sharded_backup(workspace_dir: str | Path, progress: TrainProgress, save_shards: Callable[[Path], None],
                         lr_scheduler: dict[str, Any], fingerprints: dict[str, str], config_dict: dict[str, Any],
                         keep: int, dist: DistributedContext) -> Path | None:
    """Collective: every rank writes its own shards (`save_shards(folder)`) into rank 0's temp folder —
    nothing is gathered, so no rank needs RAM for the whole state — and rank 0 writes the rest."""
    if not dist.is_main:
        save_shards(dist.broadcast_object(None) / SHARDS_DIR)
        return None

    def write_states(folder: Path) -> None:
        dist.broadcast_object(folder)
        save_shards(folder / SHARDS_DIR)

    return _write(workspace_dir, progress, write_states, lr_scheduler, fingerprints, config_dict, keep,
                  dist.world_size)


def _write(workspace_dir: str | Path, progress: TrainProgress, write_states: Callable[[Path], None],
           lr_scheduler: dict[str, Any], fingerprints: dict[str, str], config_dict: dict[str, Any], keep: int,
           world_size: int) -> Path:
    root = backup_root(workspace_dir)
    path = root / f"step-{progress.global_step:08d}"

    def write(folder: Path) -> None:
        write_states(folder)
        torch.save(lr_scheduler, folder / "lr_scheduler.pt")  # apart: ranks of a sharded resume read only this
        files = sorted(f for f in folder.rglob("*") if f.is_file())
        with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:  # hashlib releases the GIL
            digests = pool.map(_file_sha256, files)
        checksums = {f.relative_to(folder).as_posix(): digest for f, digest in zip(files, digests)}
        (folder / "config.json").write_text(json.dumps(config_dict, indent=4))
        (folder / "progress.json").write_text(json.dumps({"progress": progress.to_dict(), "fingerprints": fingerprints,
                                                          "world_size": world_size, "sha256": checksums},
                                                         indent=2))  # last: marks it complete

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
    checksums = meta.get("sha256", {})
    _verify(path, sorted(checksums) if with_states else [n for n in ("lr_scheduler.pt",) if n in checksums], checksums)
    shards = path / SHARDS_DIR if (path / SHARDS_DIR).is_dir() else None
    whole = with_states and shards is None
    return Backup(
        path=path,
        progress=TrainProgress(**meta["progress"]),
        trainable=load_file(str(path / "trainable.safetensors")) if whole else {},
        optimizer=torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False, mmap=True) if whole else {},
        lr_scheduler=torch.load(path / "lr_scheduler.pt", map_location="cpu", weights_only=False),
        fingerprints=meta.get("fingerprints", {}),
        shards=shards,
        world_size=meta.get("world_size", 1),
    )


def latest_backup(workspace_dir: str | Path) -> Backup | None:
    """The newest backup that loads; a damaged one is skipped with a warning."""
    for path in reversed(list_backups(workspace_dir)):
        try:
            return read_backup(path)
        except Exception as e:  # a damaged backup must not block resuming from an older good one
            logger.warning("backup %s cannot be read (%s); trying an older one", path, e)
    return None
