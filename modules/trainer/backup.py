"""Resumable backups: `<run folder>/backup/step-00000123/` folders, written atomically, the last N kept.

A backup holds what training changed (trainable weights), the optimizer and LR-scheduler states, the
data position (epoch, next batch) and step counters, plus fingerprints of the config and dataset so
a resume with different settings warns and names what changed. Randomness needs no saved state: every
draw of step N comes from a generator seeded by (seed, N).

Nothing in a backup is pickled, so a backup from someone else cannot run code when it is resumed: every
file is safetensors or JSON. Whole-tensor backups hold `trainable.safetensors` and the optimizer state
as `optimizer.safetensors` (its tensors) + `optimizer.json` (the rest; see `state_io`); FSDP runs write
`shards/` (each rank a safetensors file of its own chunks, see `sharding`), which any number of ranks —
or one process — can read back. `lr_scheduler.json` holds the LR scheduler's state. `progress.json` lists
a sha256 of the state files; `manifest.json` (backup_manifest.py), written last, names the run that owns the
backup and holds a sha256 of every file, progress.json and config.json included. A backup whose files changed
after writing is refused, never resumed, overwritten or deleted; pruning deletes only the run's own verified
backups. Backups of older WanTrainers (`optimizer.pt`, `lr_scheduler.pt`, DCP's `shards/.metadata`) would need
unpickling: they are refused, never read.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch
from safetensors.torch import load_file, save_file

from modules.modelSetup.sharding import check_shards
from modules.trainer.backup_manifest import (
    MANIFEST,
    digests,
    manifest_problem,
    ownership_problem,
    plausible_progress,
    read_manifest,
    write_manifest,
)
from modules.util import state_io
from modules.util.atomic import atomic_write_dir
from modules.util.distributed import DistributedContext
from modules.util.errors import UserError
from modules.util.run_folder import BACKUP_DIR, RunFolder, list_runs
from modules.util.write_errors import is_write_failure, write_failure

logger = logging.getLogger(__name__)
T = TypeVar("T")

SHARDS_DIR = "shards"  # FSDP backups: one safetensors file per rank + state.json
LR_SCHEDULER_FILE = "lr_scheduler.json"
EMA_FILE = "ema.safetensors"
# What older WanTrainers wrote with torch.save / torch.distributed.checkpoint: reading them unpickles.
OLD_FORMAT_FILES = ("optimizer.pt", "lr_scheduler.pt", f"{SHARDS_DIR}/.metadata")


class OldFormatBackup(UserError):
    """A backup that only unpickling could read."""


class DamagedBackup(UserError):
    """A backup whose files changed after writing (or do not parse): it is never resumed, overwritten or deleted."""


OPTIMIZER_FILES = ("optimizer.safetensors", "optimizer.json")


def _verify(path: Path, names: list[str], checksums: dict[str, str]) -> None:
    """Damage a loader would not notice (a flipped bit keeps a valid file) makes the backup unreadable."""
    for name, digest in digests(path, names).items():
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
    shards: Path | None = None  # an FSDP backup's shard folder (trainable/optimizer empty)
    world_size: int = 1  # data-parallel ranks of the run that wrote it
    ema: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # the weights' average, when kept


def write_backup(run: RunFolder, progress: TrainProgress, trainable: dict[str, torch.Tensor],
                 optimizer: dict[str, Any], lr_scheduler: dict[str, Any], fingerprints: dict[str, str],
                 config_dict: dict[str, Any], keep: int, world_size: int = 1,
                 ema: dict[str, torch.Tensor] | None = None, reported: set[str] | None = None) -> Path:
    """A backup of whole tensors into `run`'s folder; `optimizer` / `lr_scheduler` are state dicts; `world_size`
    is the number of data-parallel ranks (batch_size counts per rank); `ema` the weights' moving average;
    `reported`: the unverifiable backups already reported (each is reported once)."""
    def write_states(folder: Path) -> None:
        save_file(_saveable(trainable), str(folder / "trainable.safetensors"))
        if ema is not None:
            save_file(_saveable(ema), str(folder / EMA_FILE))
        tensors, skeleton = state_io.split(optimizer)
        save_file(_saveable(tensors), str(folder / "optimizer.safetensors"))
        (folder / "optimizer.json").write_text(state_io.dumps(skeleton), encoding="utf-8")

    return _write(run, progress, write_states, lr_scheduler, fingerprints, config_dict, keep, world_size, reported)


def write_sharded_backup(run: RunFolder, progress: TrainProgress, save_shards: Callable[[Path], None],
                         lr_scheduler: dict[str, Any], fingerprints: dict[str, str], config_dict: dict[str, Any],
                         keep: int, dist: DistributedContext, reported: set[str] | None = None) -> Path | None:
    """Collective: every rank writes its own shards (`save_shards(folder)`) into rank 0's temp folder —
    nothing is gathered, so no rank needs RAM for the whole state — and rank 0 writes the rest. A failed
    write raises the same one-line UserError on every rank that took part."""
    root = run.backups
    if not dist.is_main:
        folder = dist.broadcast_object(None)
        if folder is None:
            raise UserError(f"cannot write the backup to '{root}': rank 0 failed before the shards (see its log)")
        try:
            save_shards(folder / SHARDS_DIR)
        except Exception as e:
            raise _write_error(root, e) from None
        return None

    broadcast = False

    def write_states(folder: Path) -> None:
        nonlocal broadcast
        dist.broadcast_object(folder)
        broadcast = True
        save_shards(folder / SHARDS_DIR)

    try:
        return _write(run, progress, write_states, lr_scheduler, fingerprints, config_dict, keep,
                      dist.data_world_size, reported)
    finally:
        if not broadcast:  # the other ranks wait for a folder: release them
            dist.broadcast_object(None)


def _write(run: RunFolder, progress: TrainProgress, write_states: Callable[[Path], None],
           lr_scheduler: dict[str, Any], fingerprints: dict[str, str], config_dict: dict[str, Any], keep: int,
           world_size: int, reported: set[str] | None) -> Path:
    root = run.backups
    path = root / f"step-{progress.global_step:08d}"
    problem = plausible_progress(progress.to_dict())
    if problem:  # a bug, not a user error: never write counters no resume would accept
        raise ValueError(f"refusing to write the backup {path}: {problem}")
    foreign = ownership_problem(path, run.run_id, deep=False) if path.exists() else None
    if foreign:  # the run's own backup of this step may be replaced (the same state), nothing else
        raise UserError(f"cannot write the backup to '{path}': a folder this run did not write is there ({foreign}); "
                        f"move it out of {root}")

    def write(folder: Path) -> None:
        write_states(folder)
        # apart: ranks of a sharded resume read only this
        (folder / LR_SCHEDULER_FILE).write_text(state_io.to_json(lr_scheduler), encoding="utf-8")
        names = sorted(f.relative_to(folder).as_posix() for f in folder.rglob("*") if f.is_file())
        checksums = digests(folder, names)
        (folder / "config.json").write_text(json.dumps(config_dict, indent=4))
        (folder / "progress.json").write_text(json.dumps({"progress": progress.to_dict(), "fingerprints": fingerprints,
                                                          "world_size": world_size, "sha256": checksums},
                                                         indent=2))
        write_manifest(folder, run.run_id, run.name, progress.global_step, checksums)  # last: marks it complete

    try:  # a failed write removes its own temp folder; other runs' are left alone (remove_interrupted_writes)
        atomic_write_dir(path, write)
    except Exception as e:
        raise _write_error(root, e) from None
    prune_backups(run, path, keep, reported if reported is not None else set())
    logger.info("backup written to %s", path)
    return path


def prune_backups(run: RunFolder, newest: Path, keep: int, reported: set[str]) -> list[Path]:
    """Keep `newest` (just written and hashed) and the `keep` - 1 newest older backups; delete older ones only
    when their manifest names this run and every file matches its sha256. Any other backup folder (another
    run's, an older WanTrainer's, a damaged or renamed one, one with a higher step) is kept and reported once
    in one line. keep 0 deletes nothing."""
    if keep <= 0:
        return []
    step = _step(newest)
    older, removed = [], []
    for folder in run.backup_folders():
        if folder == newest:
            continue
        problem = ownership_problem(folder, run.run_id, deep=False)
        if problem is None and _step(folder) >= step:
            problem = f"its step is not older than the new backup's ({step})"
        if problem is None:
            older.append(folder)
        else:
            _report_kept(folder, problem, reported)
    for folder in older[: max(0, len(older) - (keep - 1))]:
        problem = ownership_problem(folder, run.run_id, deep=True)  # never delete what cannot be verified
        if problem is not None:
            _report_kept(folder, problem, reported)
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _report_kept(folder: Path, problem: str, reported: set[str]) -> None:
    if str(folder) not in reported:
        reported.add(str(folder))
        logger.warning("backup %s is kept, not pruned: %s (rolling_backup_count counts only this run's verified "
                       "backups; move it out of %s if it is not needed)", folder, problem, folder.parent)


def _step(folder: Path) -> int:
    return int(folder.name.split("-", 1)[1])


def remove_interrupted_writes(workspace_dir: str | Path) -> int:
    """Delete the temp folders of backup writes that were killed mid-way (SIGKILL, power loss), in every run of
    the workspace. Only for the holder of the workspace lock (workspace_lock.py): no live process writes a
    backup there but itself."""
    roots = [run.backups for run in list_runs(workspace_dir)] + [Path(workspace_dir) / BACKUP_DIR]
    removed = 0
    for stale in (stale for root in roots if root.is_dir() for stale in root.glob(".step-*.tmp")):
        shutil.rmtree(stale, ignore_errors=True)
        removed += 1
    if removed:
        logger.info("removed %d backup folder(s) left half-written by an interrupted run", removed)
    return removed


def _saveable(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().cpu() for k, v in tensors.items()}


def _write_error(root: Path, error: Exception) -> Exception:
    """A full disk (whichever library wrote: safetensors, torch, json) is one line saying the previous
    backups are intact; anything else is a bug and keeps its traceback."""
    if isinstance(error, UserError) or not is_write_failure(error):
        return error
    return UserError(f"cannot write the backup to '{root}' ({write_failure(error)}): free space there or lower "
                     "rolling_backup_count; the previous backups are intact")


def list_backups(run: RunFolder) -> list[Path]:
    """The run's backups that hold a progress.json, oldest first (temp folders of an interrupted write are not
    listed; latest_backup looks at every `step-*` folder)."""
    return [p for p in run.backup_folders() if (p / "progress.json").is_file()]


def read_backup(path: Path, with_states: bool = True, with_optimizer: bool = True) -> Backup:
    """`with_states=False` skips the weights and optimizer state (empty dicts) — for the ranks of a
    sharded resume that receive theirs from rank 0; `with_optimizer=False` skips (neither checks nor reads) the
    optimizer state of a whole-tensor backup. Nothing is unpickled: a backup in the old pickle-based format
    raises OldFormatBackup without being read; a file that is missing, does not parse or match its checksum, or
    a progress.json no run could have written raises ValueError naming it."""
    _refuse_old_format(path, {})
    manifest = read_manifest(path)
    if manifest is not None:  # every file, progress.json included, before any is parsed
        light = ("progress.json", "config.json", LR_SCHEDULER_FILE)
        skip = tuple(n for n in manifest["files"] if n not in light) if not with_states else \
            () if with_optimizer else OPTIMIZER_FILES
        problem = manifest_problem(path, manifest, deep=True, skip=skip)
        if problem:
            raise ValueError(problem)
    if not (path / "progress.json").is_file():
        raise ValueError("progress.json is missing (it holds the step and data position to resume at)")
    meta = _read(path, "progress.json", _read_json)
    checksums = meta.get("sha256", {}) if isinstance(meta, dict) else None
    if not isinstance(checksums, dict):
        raise ValueError("progress.json is not a WanTrainer backup's progress file")
    _refuse_old_format(path, checksums)
    shards = path / SHARDS_DIR if (path / SHARDS_DIR).is_dir() else None
    if shards is not None and not with_optimizer:
        raise UserError(f"resume_fresh_optimizer cannot resume {path}: an FSDP backup keeps the weights and the "
                        "optimizer in the same shards; set it false")
    if manifest is None:  # an older WanTrainer's backup: progress.json's checksums of the other files
        checked = [n for n in sorted(checksums) if with_optimizer or n not in OPTIMIZER_FILES]
        _verify(path, checked if with_states else [n for n in (LR_SCHEDULER_FILE,) if n in checksums], checksums)
    problem = plausible_progress(meta.get("progress"))
    if problem:
        raise ValueError(problem)
    whole = with_states and shards is None
    if with_states and shards is not None:
        _read(path, SHARDS_DIR, check_shards)  # damage is found here, before anything is loaded
    return Backup(
        path=path,
        progress=TrainProgress(**meta["progress"]),
        trainable=_read(path, "trainable.safetensors", lambda p: load_file(str(p))) if whole else {},
        optimizer=state_io.join(_read(path, "optimizer.safetensors", lambda p: load_file(str(p))),
                                _read(path, "optimizer.json", _read_json)) if whole and with_optimizer else {},
        lr_scheduler=_read(path, LR_SCHEDULER_FILE, lambda p: state_io.from_json(p.read_text(encoding="utf-8"))),
        fingerprints=meta.get("fingerprints", {}),
        shards=shards,
        world_size=meta.get("world_size", 1),
        ema=_read(path, EMA_FILE, lambda p: load_file(str(p))) if whole and EMA_FILE in checksums else {},
    )


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _read(folder: Path, name: str, load: Callable[[Path], T]) -> T:
    """`load(folder / name)`; a failure names the file (the loaders' own messages do not)."""
    try:
        return load(folder / name)
    except Exception as e:
        raise ValueError(f"{name}: {e}") from e


def _refuse_old_format(path: Path, checksums: dict[str, str]) -> None:
    old = [name for name in OLD_FORMAT_FILES if name in checksums or (path / name).exists()]
    if old:
        raise OldFormatBackup(
            f"cannot resume from {path}: an older WanTrainer wrote it in a format that only unpickling can read "
            f"({old[0]}), which would run any code planted in the file; move that folder out of "
            f"{path.parent} (or use another workspace_dir), or train without continue_last_backup")


def latest_backup(run: RunFolder, with_optimizer: bool = True) -> Backup | None:
    """The run's newest backup that loads. A backup folder that is not verifiably this run's (another run's
    manifest, none in a run that writes them, a folder name that is not its step) is skipped and reported in one
    line, never deleted. One in the old pickle-based format is skipped with a warning; when nothing loads and
    an old-format backup was seen, that is the error: resuming from scratch instead would quietly drop the run.
    A damaged backup (a file missing or changed since it was written, progress.json included) is refused as
    DamagedBackup: resuming an older one, or none, would let the run overwrite or roll it away, and it may hold
    the only copy of the trained weights. `with_optimizer=False` (resume_fresh_optimizer) neither checks nor
    reads the optimizer state."""
    refused: OldFormatBackup | None = None
    backups = run.backup_folders()
    for index in range(len(backups) - 1, -1, -1):
        path = backups[index]
        foreign = _not_this_runs(path, run)
        if foreign:
            logger.warning("not resuming %s: %s; it is kept (move it out of %s if it is not needed)", path,
                           foreign, path.parent)
            continue
        try:
            return read_backup(path, with_optimizer=with_optimizer)
        except OldFormatBackup as e:
            refused = refused or e
            logger.warning("%s; trying an older one", e)
        except UserError:
            raise
        except Exception as e:
            raise DamagedBackup(_damage_message(path, e, backups[index - 1] if index else None)) from None
    if refused is not None:
        raise refused
    return None


def _not_this_runs(path: Path, run: RunFolder) -> str | None:
    """Why the backup folder `path` is not one of `run`'s own (None: it is, or it is damaged: read_backup says)."""
    if any((path / name).exists() for name in OLD_FORMAT_FILES):
        return None  # read_backup refuses it unread
    try:
        manifest = read_manifest(path)
    except ValueError:
        return None
    if manifest is None:
        return None if run.migrated else f"it has no {MANIFEST}, so it was not written by this run"
    if manifest["run_id"] != run.run_id:
        return f"its {MANIFEST} names another run ({manifest.get('run_name') or manifest['run_id']})"
    if manifest["step"] != _step(path):
        return f"its folder name says step {_step(path)} but its {MANIFEST} says step {manifest['step']}"
    return None


def _damage_message(path: Path, error: Exception, older: Path | None) -> str:
    """One line: which file of the backup is damaged, and the ways out."""
    damaged = str(error).split(":", 1)[0].split(" ", 1)[0]
    ways = []
    if damaged in OPTIMIZER_FILES:
        ways.append("set resume_fresh_optimizer=true to resume its weights and position with a fresh optimizer")
    move = f"move {path.name} out of {path.parent}"
    ways.append(f"{move} to resume from {older.name}" if older is not None else
                f"{move} (or set another workspace_dir) to start over")
    return f"cannot resume from {path}: {error}; it is kept as it is: {', or '.join(ways)}"
