"""One folder per training run: `workspace_dir/<run name>/` holds that run's backups, samples, curves
(tensorboard events), logs, snapshots and a copy of its config, so runs that share a workspace never write,
prune or show each other's files (as ai-toolkit's job folders).

A run folder is marked by `run.json` (its name, a random run id that its backups' manifests carry, when it was
created and last started). That file is not the only record of who the run is: every backup's `manifest.json`
names its run, so a folder whose `run.json` is missing or cut short is still read as its run (`read_run`), a run
renamed by hand is found by the name it was started under (`find_run`), and a trainer whose folder is renamed or
deleted under it follows or re-creates it (`relocate_run`). A new run never writes into an existing folder: a name
that is taken gets the first free `<name>-2`, `<name>-3`, ... (logged). Workspaces of older WanTrainers kept one flat set (`backup/`,
`samples/`, `tensorboard/`, `save/`, `logs/` directly in the workspace); `migrate_flat_layout` moves those folders,
whole and by rename, into a run folder when that run is resumed: nothing is deleted or overwritten.

Torch-free: the GUI's controllers read it too.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import re
import time
import uuid
from pathlib import Path

from modules.util.atomic import atomic_write_text
from modules.util.numbered_names import numbered_names

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
CONFIG_COPY = "config.json"
MANIFEST = "manifest.json"  # each backup's, written last (trainer/backup_manifest.py): it names the run
BACKUP_DIR, SAMPLES_DIR, TENSORBOARD_DIR, LOGS_DIR, SAVE_DIR = "backup", "samples", "tensorboard", "logs", "save"
FLAT_DIRS = (BACKUP_DIR, SAMPLES_DIR, TENSORBOARD_DIR, SAVE_DIR, LOGS_DIR)  # the flat layout of older workspaces
RESERVED_NAMES = frozenset(FLAT_DIRS) | {"cache"}  # a run folder by that name would read as the flat layout
MAX_NAME_LENGTH = 96
MAX_RUN_FILE_BYTES = 64 * 1024  # run.json is a few hundred bytes: a bigger one is not ours
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # a manifest lists a few files (an FSDP backup one per rank)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_BACKUP_NAME = re.compile(r"^step-\d{8}$")


def sanitise_run_name(text: str) -> str:
    """Letters, digits, '.', '_' and '-' (anything else becomes '_'), no leading dot, at most 96 characters."""
    name = _UNSAFE.sub("_", text).strip("._-")[:MAX_NAME_LENGTH].rstrip("._-")
    return name if name and name not in RESERVED_NAMES else f"run_{name}".rstrip("_")


def run_name_problem(name: str) -> str | None:
    """Why `name` cannot be a run folder's name (None: it can; '' means the default name)."""
    if not name:
        return None
    if name in RESERVED_NAMES:
        return f"is '{name}', a folder name of the workspace's older flat layout: choose another name"
    if name != sanitise_run_name(name):
        return (f"must be a folder name of letters, digits, '.', '_' and '-' (at most {MAX_NAME_LENGTH}, not "
                f"starting with '.'), got '{name}': e.g. '{sanitise_run_name(name)}'")
    return None


def default_run_name(output_destination: str, when: float) -> str:
    """The output's name and the start's local date and time, e.g. `my_lora-20260301-142530`."""
    stem = Path(output_destination).name
    stem = stem[: -len(".safetensors")] if stem.lower().endswith(".safetensors") else stem
    return sanitise_run_name(f"{stem or 'run'}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(when))}")


@dataclasses.dataclass(frozen=True)
class RunFolder:
    path: Path
    name: str
    run_id: str  # random; every backup's manifest names it, so pruning touches only the run's own backups
    created: float = 0.0
    last_started: float = 0.0
    migrated: bool = False  # made from a flat workspace of an older WanTrainer
    recorded_name: str = ""  # the name run.json (or, without one, its backups) give: the folder's before a rename
    recovered: bool = False  # run.json was missing or damaged: who the run is was read from its backups

    @property
    def backups(self) -> Path:
        return self.path / BACKUP_DIR

    @property
    def samples(self) -> Path:
        return self.path / SAMPLES_DIR

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD_DIR

    @property
    def logs(self) -> Path:
        return self.path / LOGS_DIR

    @property
    def save(self) -> Path:
        return self.path / SAVE_DIR

    @property
    def config_copy(self) -> Path:
        return self.path / CONFIG_COPY

    def backup_folders(self) -> list[Path]:
        """Every `step-NNNNNNNN` folder of the run, oldest step first (complete or not; temp folders are not)."""
        return backup_folders(self.backups)

    def newest_backup_time(self) -> float:
        """When its newest backup folder was last written (0: it has none)."""
        return max((_mtime(p) for p in self.backup_folders()), default=0.0)

    def mark_started(self, when: float) -> "RunFolder":
        """Record a start (the GUI shows the last started run) under the folder's name now (a run renamed by hand
        takes its new name; a run.json that was lost is written again); returns the updated record."""
        run = dataclasses.replace(self, last_started=when, recorded_name=self.name, recovered=False)
        _write_run_file(run)
        return run


def backup_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if _BACKUP_NAME.match(p.name) and p.is_dir() and not p.is_symlink())


def read_run(path: str | os.PathLike) -> RunFolder | None:
    """The run whose folder is `path`, or None when it is not a run folder. Its `run.json` says who it is; when
    that file is missing, cut short or not ours, the run's backups do (`recovered`): each backup's manifest names
    its run, and an older WanTrainer's backups (no manifest) make a migrated run."""
    path = Path(path)
    data = _read_small_json(path / RUN_FILE, MAX_RUN_FILE_BYTES)
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str) or not data["run_id"]:
        return _recovered_run(path)
    times = [data.get(k) for k in ("created", "last_started")]
    created, started = (float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0 for t in times)
    name = data.get("name") if isinstance(data.get("name"), str) else path.name
    return RunFolder(path, path.name, data["run_id"], created, started, data.get("migrated") is True, name)


def _read_small_json(file: Path, limit: int) -> object:
    """The JSON in `file` (None when absent, bigger than `limit`, unreadable or not JSON)."""
    try:
        if not file.is_file() or file.stat().st_size > limit:
            return None
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _recovered_run(path: Path) -> RunFolder | None:
    """The run a folder without a readable run.json belongs to, by its backups: the run id their manifests name
    (those that give the folder's name first, then the most backups, then the newest); backups without any
    manifest (an older WanTrainer's, moved into a run folder) make a migrated run. None: no backup of a run."""
    if path.name in RESERVED_NAMES or path.is_symlink() or not path.is_dir():
        return None
    backups = backup_folders(path / BACKUP_DIR)
    owners = [(folder, owner) for folder in backups if (owner := backup_owner(folder)) is not None]
    times = [_mtime(folder) for folder in backups]
    if owners:
        named = [owner for _, owner in owners if owner[1] == path.name] or [owner for _, owner in owners]
        counts = collections.Counter(run_id for run_id, _ in named)
        newest = {run_id: index for index, (run_id, _) in enumerate(named)}
        run_id = max(counts, key=lambda r: (counts[r], newest[r]))
        recorded = next(name for rid, name in reversed(named) if rid == run_id)
        return RunFolder(path, path.name, run_id, min(times), max(times), False, recorded or path.name, True)
    if any((folder / "progress.json").is_file() for folder in backups):
        run_id = uuid.uuid5(uuid.NAMESPACE_URL, str(path.resolve())).hex  # stable until run.json is written again
        return RunFolder(path, path.name, run_id, min(times), max(times), True, path.name, True)
    return None


def backup_owner(folder: Path) -> tuple[str, str] | None:
    """(run id, run name) that a backup folder's manifest names; None without a readable one. (Only who wrote it:
    trainer/backup_manifest.py checks that the backup is whole.)"""
    data = _read_small_json(folder / MANIFEST, MAX_MANIFEST_BYTES)
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str) or not data["run_id"]:
        return None
    name = data.get("run_name")
    return data["run_id"], name if isinstance(name, str) else ""


def list_runs(workspace: str | os.PathLike) -> list[RunFolder]:
    """The run folders of a workspace, the first created first."""
    root = Path(workspace)
    try:
        entries = list(root.iterdir()) if root.is_dir() else []
    except OSError:
        return []
    runs = [run for p in entries if p.is_dir() and not p.is_symlink() and (run := read_run(p)) is not None]
    return sorted(runs, key=lambda r: (r.created, r.name))


def find_run(workspace: str | os.PathLike, name: str) -> RunFolder | None:
    """The run named `name`: its folder; else a run renamed by hand from that name (its run.json, or its backups,
    still give it), the one with the newest backup when there are several."""
    if not name:
        return None
    run = read_run(Path(workspace) / name)
    if run is not None:
        return run
    renamed = [r for r in list_runs(workspace) if r.recorded_name == name]
    return max(renamed, key=lambda r: (r.newest_backup_time(), r.last_started), default=None)


def relocate_run(run: RunFolder) -> tuple[RunFolder, str]:
    """Where the folder of `run` (a run being trained) is now, and what happened to it: '' (where it was),
    'renamed' (a folder of the workspace carries its run id: followed), 'marked' (its folder is there but lost
    its run.json, and no backup says whose it is yet: run.json written again) or 're-created' (gone, or taken by
    another run: made again, with its run.json, at its path or a free `<name>-N`). Never raises for a folder that
    vanished; OSError when it cannot be made again (a full disk)."""
    here = read_run(run.path)
    if here is not None and here.run_id == run.run_id:
        return run, ""
    moved = [r for r in list_runs(run.path.parent) if r.run_id == run.run_id and r.path != run.path]
    if moved:
        new = max(moved, key=lambda r: r.newest_backup_time())
        return dataclasses.replace(run, path=new.path, name=new.name), "renamed"
    if here is None and run.path.is_dir() and not run.path.is_symlink():
        _write_run_file(run)
        return run, "marked"
    path = run.path
    if here is not None:  # another run's folder is where this one was
        path = next(p for p in (run.path.parent / n for n in numbered_names(run.name, limit=10000))
                    if not p.exists())
    path.mkdir(parents=True, exist_ok=True)
    new = dataclasses.replace(run, path=path, name=path.name, recovered=False)
    _write_run_file(new)
    return new, "re-created"


def foreign_link(run: RunFolder) -> str | None:
    """Why the run cannot write only inside its own folder (None: it can): the folder, or one of the folders it
    writes (backup, samples, tensorboard, logs, save), is a symbolic link, or a sub-folder is a file."""
    if run.path.is_symlink():
        return f"the run folder {run.path} is a symbolic link (to {os.readlink(run.path)})"
    for name in FLAT_DIRS:
        sub = run.path / name
        if sub.is_symlink():
            return f"{sub} is a symbolic link (to {os.readlink(sub)})"
        if sub.exists() and not sub.is_dir():
            return f"{sub} is a file, not a folder"
    return None


def last_started_run(workspace: str | os.PathLike) -> RunFolder | None:
    """The run started last (what the GUI shows outside a run)."""
    runs = list_runs(workspace)
    return max(runs, key=lambda r: (r.last_started, r.created, r.name)) if runs else None


def create_run(workspace: str | os.PathLike, name: str, when: float) -> tuple[RunFolder, bool]:
    """A new run folder `workspace/<name>`, or `<name>-2`, `<name>-3`... when that exists (True: it did).
    `mkdir` without exist_ok is the claim: two processes never get the same folder."""
    root = Path(workspace)
    root.mkdir(parents=True, exist_ok=True)
    for candidate in numbered_names(name, limit=10000):
        try:
            (root / candidate).mkdir()
        except FileExistsError:
            continue
        run = RunFolder(root / candidate, candidate, uuid.uuid4().hex, when, when, recorded_name=candidate)
        _write_run_file(run)
        return run, candidate != name
    raise OSError(f"no free run folder name '{name}-N' in {root}")


def _write_run_file(run: RunFolder) -> None:
    data = {"name": run.name, "run_id": run.run_id, "created": run.created, "last_started": run.last_started}
    if run.migrated:
        data["migrated"] = True
    atomic_write_text(run.path / RUN_FILE, json.dumps(data, indent=1) + "\n")


def flat_backups(workspace: str | os.PathLike) -> list[Path]:
    """The backup folders of an older WanTrainer's flat layout (`workspace/backup/step-*`)."""
    return backup_folders(Path(workspace) / BACKUP_DIR)


def flat_layout_time(workspace: str | os.PathLike) -> float:
    """When the flat layout's newest backup was written (0: there is none)."""
    return max((_mtime(p) for p in flat_backups(workspace)), default=0.0)


def migrate_flat_layout(workspace: str | os.PathLike, name: str, when: float) -> RunFolder:
    """Move the flat layout's folders (backup, samples, tensorboard, save, logs) into a run folder, each by one
    rename: nothing is copied, deleted or overwritten (a folder the run already has stays where it was). A
    migration cut short is finished by the next one (it finds the run marked `migrated`)."""
    root = Path(workspace)
    run = next((r for r in list_runs(root) if r.migrated), None)
    if run is None:
        run, _ = create_run(root, name, when)
        run = dataclasses.replace(run, migrated=True)
        _write_run_file(run)
    moved = []
    for folder in FLAT_DIRS:
        source, target = root / folder, run.path / folder
        if source.is_dir() and not source.is_symlink() and not target.exists():
            os.rename(source, target)
            moved.append(folder)
    logger.info("workspace %s had the flat layout of an older WanTrainer: moved %s into the run folder %s "
                "(nothing deleted)", root, ", ".join(moved) or "nothing more", run.path)
    return run


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
