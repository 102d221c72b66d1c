"""Snapshots: the output model written every N steps/epochs/minutes to the run folder's `save/`, with the
step in the name (`<stem>-step000500.safetensors`, one per expert for two-expert models), so users can
pick the best one. Unlike backups they hold no optimizer state and cannot be resumed."""
from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from modules.util.run_folder import SAVE_DIR

logger = logging.getLogger(__name__)


def snapshot_destination(run_dir: str | Path, output_destination: str | Path, step: int) -> Path:
    """`<run folder>/save/<stem>-step000500<suffix>` for the output `<stem><suffix>` (a folder for full models)."""
    output = Path(output_destination)
    return Path(run_dir) / SAVE_DIR / f"{output.stem}-step{step:06d}{output.suffix}"


def raw_destination(destination: str | Path) -> Path:
    """Where `ema_save_raw` puts the raw weights beside the averaged ones: `<stem>-raw<suffix>`."""
    destination = Path(destination)
    return destination.with_name(f"{destination.stem}-raw{destination.suffix}")


def list_snapshots(folder: Path, stem: str) -> dict[int, list[Path]]:
    """Step -> the files/folders of that snapshot (both experts' files for two-expert models, raw weights too)."""
    pattern = re.compile(rf"^{re.escape(stem)}-step(\d+)(?:-raw)?(?:_high_noise|_low_noise|_embedding)?(?:\.[^.]+)?$")
    snapshots: dict[int, list[Path]] = {}
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        match = pattern.match(entry.name)
        if match:
            snapshots.setdefault(int(match[1]), []).append(entry)
    return snapshots


def prune_snapshots(folder: Path, stem: str, keep: int) -> list[Path]:
    """Delete all but the newest `keep` snapshots (0 keeps every one); returns what was deleted."""
    snapshots = list_snapshots(folder, stem)
    removed = []
    for step in sorted(snapshots)[:-keep] if keep > 0 else []:
        for entry in snapshots[step]:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    if removed:
        logger.info("removed %d old snapshot file(s) (rolling_save_count %d)", len(removed), keep)
    return removed
