"""Who a backup belongs to and whether it is whole: `manifest.json`, written last in every backup folder.

It names the run (the run id of `run.json`, util/run_folder.py), the step, and the size and sha256 of every other
file of the backup — `progress.json` and `config.json` included, so a changed step counter is found like a
flipped bit in the weights. Pruning deletes only backups it can verify as the same run's (and older than its
newest verified one); resuming refuses a backup whose files do not match. `plausible_progress` bounds what
`progress.json` says, so a damaged or planted counter never reaches a model header.

Torch-free: the GUI reads it too.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from modules.util.atomic import atomic_write_text
from modules.util.file_hash import file_sha256
from modules.util.run_folder import MANIFEST, MAX_MANIFEST_BYTES

FORMAT_VERSION = 1
PROGRESS_KEYS = ("epoch", "epoch_batch", "global_step", "micro_step")
JSON_SAFE_INT = 2 ** 53 - 1  # the largest integer every JSON reader keeps exact


def digests(folder: Path, names: list[str]) -> dict[str, str]:
    """name -> sha256 of `folder / name`, hashed in parallel (hashlib releases the GIL)."""
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(names)))) as pool:
        return dict(zip(names, pool.map(lambda name: file_sha256(folder / name), names)))


def backup_files(folder: Path) -> list[str]:
    """Every file of a backup folder (relative, '/'-separated), the manifest excepted."""
    return sorted(f.relative_to(folder).as_posix() for f in folder.rglob("*") if f.is_file() and f.name != MANIFEST)


def write_manifest(folder: Path, run_id: str, run_name: str, step: int, known: dict[str, str]) -> dict[str, Any]:
    """The manifest of a backup whose other files are all written; `known` holds digests already computed
    (the state files'), the rest (progress.json, config.json) are hashed here. Written atomically, last."""
    names = backup_files(folder)
    sums = {**digests(folder, [n for n in names if n not in known]), **{n: known[n] for n in names if n in known}}
    manifest = {"format": FORMAT_VERSION, "run_id": run_id, "run_name": run_name, "step": step,
                "written_at": time.time(),
                "files": {n: {"sha256": sums[n], "size": (folder / n).stat().st_size} for n in names}}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest (None when the backup has none); ValueError naming what is wrong with one that is there."""
    path = folder / MANIFEST
    if not path.exists():
        return None
    if not path.is_file() or path.stat().st_size > MAX_MANIFEST_BYTES:
        raise ValueError(f"{MANIFEST} is not a regular file of at most {MAX_MANIFEST_BYTES} bytes")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{MANIFEST} does not parse: {e}") from None
    files = data.get("files") if isinstance(data, dict) else None
    if (not isinstance(files, dict) or not isinstance(data.get("run_id"), str) or not _count(data.get("step"))
            or not all(isinstance(v, dict) and isinstance(v.get("sha256"), str) and _count(v.get("size"))
                       for v in files.values())):
        raise ValueError(f"{MANIFEST} is not a WanTrainer backup manifest (run_id, step, files)")
    return data


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= JSON_SAFE_INT


def manifest_problem(folder: Path, manifest: dict[str, Any], deep: bool, skip: tuple[str, ...] = ()) -> str | None:
    """Why the backup does not match its manifest (a file missing, resized or, with `deep`, changed), or None.
    Files named in `skip` are not checked (the optimizer state of a resume_fresh_optimizer resume)."""
    if manifest["step"] != _step_of(folder):
        return f"its folder name says step {_step_of(folder)} but its {MANIFEST} says step {manifest['step']}"
    files = manifest["files"]
    for name, entry in sorted(files.items()):
        if name in skip:
            continue
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry["size"]:
            return f"{name} does not match the checksum written with it (its size changed)"
    if deep:
        names = sorted(n for n in files if n not in skip)
        for name, digest in digests(folder, names).items():
            if digest != files[name]["sha256"]:
                return f"{name} does not match the checksum written with it"
    return None


def ownership_problem(folder: Path, run_id: str, deep: bool) -> str | None:
    """Why `folder` cannot be verified as a whole backup of run `run_id` (None: it can): pruning deletes only
    backups this returns None for."""
    try:
        manifest = read_manifest(folder)
    except ValueError as e:
        return str(e)
    if manifest is None:
        return f"it has no {MANIFEST} (written by an older WanTrainer, or not by a run at all)"
    if manifest["run_id"] != run_id:
        return f"its {MANIFEST} names another run ({manifest.get('run_name') or manifest['run_id']})"
    return manifest_problem(folder, manifest, deep)


def _step_of(folder: Path) -> int:
    return int(folder.name.split("-", 1)[1])


def plausible_progress(progress: Any, steps_per_epoch: int | None = None, epochs: int | None = None) -> str | None:
    """Why `progress.json`'s counters cannot be a real run's (None: they can). Always: four whole numbers from 0
    to 2^53-1. With the run's `steps_per_epoch` (optimizer steps;
    only when the data and batch settings are unchanged since the backup) and its `epochs`: epoch at most
    epochs and global_step at most (epoch + 1) x steps_per_epoch."""
    if not isinstance(progress, dict) or set(progress) != set(PROGRESS_KEYS):
        return f"progress.json must hold exactly {', '.join(PROGRESS_KEYS)}"
    for key in PROGRESS_KEYS:
        if not _count(progress[key]):
            return f"progress.json's {key} is {_short(progress[key])}, not a whole number from 0 to 2^53-1"
    if epochs is not None and progress["epoch"] > epochs:
        return f"progress.json's epoch {progress['epoch']} is beyond the run's {epochs} epochs"
    if steps_per_epoch and progress["global_step"] > (progress["epoch"] + 1) * steps_per_epoch:
        return (f"progress.json's global_step {progress['global_step']} is more than {progress['epoch'] + 1} "
                f"epoch(s) of {steps_per_epoch} steps hold")
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
