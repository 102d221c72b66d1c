"""What a run's trainer last knew about it: `state.json` in the run folder, replaced atomically at each change.

States: `running` (written when training begins, then after each backup and every minute), `stopped` (a stop:
Ctrl-C, SIGTERM, the GUI's Stop, a stop while caching; its reason says which), `failed` (an error ended it; its
reason is the error's one line) and `finished` (the model was saved; the record lists the files). A `running`
record whose process is gone was ended by a kill, a crash or a power loss: the run catalog (run_catalog.py) reads
it as stopped at its last backup. `epochs` and `max_steps` are the finished run's, so a resume can tell whether a
config asks for more training than the run did.

Torch-free: the GUI and scripts/runs.py read it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from modules.util.atomic import atomic_write_text
from modules.util.errors import UserError

STATE_FILE = "state.json"
RUNNING, STOPPED, FAILED, FINISHED = "running", "stopped", "failed", "finished"
STATES = (RUNNING, STOPPED, FAILED, FINISHED)
MAX_STATE_BYTES = 1024 * 1024  # a record is a few hundred bytes (a few more per output file)
MAX_REASON_CHARS = 500


@dataclasses.dataclass(frozen=True)
class RunRecord:
    state: str  # one of STATES
    step: int = 0  # optimizer steps done when it was written
    total_steps: int | None = None  # the run's steps (None: not known yet, e.g. before the data was read)
    reason: str = ""  # stopped: how; failed: the error's one line
    last_backup: str = ""  # the newest backup this start wrote ('' none yet)
    outputs: tuple[str, ...] = ()  # finished: the files the final save wrote
    epochs: int | None = None  # the config's epochs and max_steps when it was written
    max_steps: int | None = None
    pid: int | None = None  # the process that wrote it
    host: str = ""
    updated: float = 0.0  # time.time() of the write

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "outputs": list(self.outputs)}


def new_record(state: str, **values: Any) -> RunRecord:
    """A record of this process, now."""
    reason = " ".join(str(values.pop("reason", "")).split())  # one line
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    return RunRecord(state, reason=reason, pid=os.getpid(), host=socket.gethostname(), updated=time.time(), **values)


def write_record(run_folder: Path, record: RunRecord) -> None:
    atomic_write_text(Path(run_folder) / STATE_FILE, json.dumps(record.to_dict(), indent=1) + "\n")


def read_record(run_folder: str | os.PathLike) -> RunRecord | None:
    """The run's record; None when there is none or it cannot be read (missing, cut short, not ours)."""
    path = Path(run_folder) / STATE_FILE
    try:
        if not path.is_file() or path.stat().st_size > MAX_STATE_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("state") not in STATES:
        return None
    outputs = data.get("outputs")
    return RunRecord(
        state=data["state"], step=_count(data.get("step")) or 0, total_steps=_count(data.get("total_steps")),
        reason=data.get("reason") if isinstance(data.get("reason"), str) else "",
        last_backup=data.get("last_backup") if isinstance(data.get("last_backup"), str) else "",
        outputs=tuple(o for o in outputs if isinstance(o, str)) if isinstance(outputs, list) else (),
        epochs=_count(data.get("epochs")), max_steps=_count(data.get("max_steps")), pid=_count(data.get("pid")),
        host=data.get("host") if isinstance(data.get("host"), str) else "",
        updated=float(data["updated"]) if isinstance(data.get("updated"), (int, float)) else 0.0)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 53 else None


def failure_reason(error: BaseException) -> str:
    """The one line a failed run's record keeps: a user error's own line, else the exception's type and text."""
    text = str(error) if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
    return (text.strip().splitlines() or [type(error).__name__])[0]
