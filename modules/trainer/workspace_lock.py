"""One training run per workspace: `workspace_dir/train.lock` names the process that trains there.

Two runs in one workspace would write each other's backups, snapshots and logs. The second is refused at
start-up, before any model loads, in one line naming the running process. A lock left by a process that
ended (a kill, a power loss) is taken over: the file records the pid and the process's start time, so a
reused pid does not keep a workspace locked. A lock held by this very process (a trainer that was never
closed, e.g. after an exception in the GUI) is taken over too: one process trains one run at a time. Once the
trainer has chosen its run folder, the lock names that run too (`name_run`): the run catalog reads a run as
running only while a live lock names it. A `train.lock` that is no file (a folder) is refused in one line, never
removed: it is not ours.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path

import psutil

from modules.util.atomic import atomic_write_text
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

LOCK_FILE = "train.lock"


def _process_start(pid: int) -> float | None:
    """When process `pid` started (None when there is no such process)."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:  # someone else's process: alive
        return -1.0


def _holder_alive(holder: dict) -> bool:
    """Whether the process that wrote `holder` still runs. A lock written on another machine (a shared disk)
    cannot be checked: it counts as held."""
    if holder.get("host") != socket.gethostname():
        return True
    pid, started = holder.get("pid"), holder.get("started")
    if not isinstance(pid, int):
        return False
    now = _process_start(pid)
    if now is None:
        return False
    return now < 0 or not isinstance(started, (int, float)) or abs(now - started) < 1.0


class WorkspaceLock:
    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def take(cls, workspace: Path) -> "WorkspaceLock":
        """Lock `workspace` for this process, or raise a one-line UserError naming the process that holds it."""
        path = workspace / LOCK_FILE
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise UserError(f"workspace_dir '{workspace}' holds {path}, which is not a lock file (a "
                            f"{'symbolic link' if path.is_symlink() else 'folder'}): move it out of the workspace "
                            "(WanTrainer writes its lock there)")
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _process_start(os.getpid()),
              "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        for _ in range(3):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                holder = _read(path)  # {}: empty or cut short, which no live run leaves: stale
                if holder and holder.get("pid") != os.getpid() and _holder_alive(holder):
                    raise UserError(
                        f"workspace_dir '{workspace}' is in use by another training run (pid {holder.get('pid')} on "
                        f"{holder.get('host')}, since {holder.get('since')}): wait for it to end or stop it, or set "
                        f"another workspace_dir (if no run uses it, delete {path})") from None
                if holder is not None and holder.get("pid") != os.getpid():
                    logger.info("taking over %s from %s", path, f"pid {holder['pid']}, which has ended"
                                if holder.get("pid") is not None else "a run that ended while writing it (damaged)")
                path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(me, f)
            return cls(path)
        raise UserError(f"cannot lock workspace_dir '{workspace}': {path} keeps reappearing; is another run "
                        "starting there?")

    def name_run(self, run_name: str) -> None:
        """Add the run this process trains to its lock (replaced atomically: the lock never vanishes meanwhile)."""
        holder = _read(self.path)
        if holder and holder.get("pid") == os.getpid():
            atomic_write_text(self.path, json.dumps({**holder, "run": run_name}))

    def release(self) -> None:
        holder = _read(self.path)
        if holder is not None and holder.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)


def live_holder(workspace: str | os.PathLike) -> dict | None:
    """The lock of `workspace` when a live process holds it (pid, host, since and, once chosen, run), else None."""
    path = Path(workspace) / LOCK_FILE
    if path.is_symlink() or not path.is_file():
        return None
    holder = _read(path)
    return holder if holder and _holder_alive(holder) else None


def _read(path: Path) -> dict | None:
    """The lock's holder; None when the file vanished or is damaged (a write cut short: no live holder)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
