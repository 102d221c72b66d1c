"""One run per workspace: a second start is refused before any model loads; a dead run's lock and its
half-written backups are taken over; a backup write never deletes another run's temp folder."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.trainer.backup import TrainProgress, write_backup
from modules.trainer.GenericTrainer import GenericTrainer
from modules.trainer.workspace_lock import LOCK_FILE, WorkspaceLock
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.run_paths import make_run


class ModelLoaded(Exception):
    pass


def _no_model(*args, **kwargs):
    raise ModelLoaded


def _lock_of(process: subprocess.Popen, workspace) -> None:
    import psutil

    (workspace / LOCK_FILE).write_text(json.dumps({"pid": process.pid, "host": socket.gethostname(),
                                                   "started": psutil.Process(process.pid).create_time(),
                                                   "since": "2026-01-01 00:00:00"}))


def _trainer(tiny_model, video_dataset, tmp_path, monkeypatch) -> GenericTrainer:
    monkeypatch.setattr("modules.trainer.GenericTrainer.WanModelLoader.load_for_config", _no_model)
    return GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path)))


def test_a_second_run_on_a_workspace_is_refused_before_the_model_loads(tiny_model, video_dataset, tmp_path,
                                                                       monkeypatch):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock_of(other, workspace)
        with pytest.raises(UserError, match=rf"workspace_dir '.*' is in use by another training run \(pid {other.pid}"):
            _trainer(tiny_model, video_dataset, tmp_path, monkeypatch).start()
    finally:
        other.kill()
        other.wait()


def test_the_lock_of_an_ended_run_and_its_half_written_backup_are_taken_over(tiny_model, video_dataset, tmp_path,
                                                                             monkeypatch):
    workspace = tmp_path / "workspace"
    leftover = workspace / "backup" / ".step-00000004.abcdefghij.tmp"
    leftover.mkdir(parents=True)
    ended = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    _lock_of(ended, workspace)
    ended.kill()
    ended.wait()
    trainer = _trainer(tiny_model, video_dataset, tmp_path, monkeypatch)
    with pytest.raises(ModelLoaded):  # got past the lock to the model
        trainer.start()
    assert json.loads((workspace / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not leftover.exists()
    trainer.close()
    assert not (workspace / LOCK_FILE).exists()


def test_a_lock_is_released_and_taken_again(tmp_path):
    lock = WorkspaceLock.take(tmp_path)
    lock.release()
    WorkspaceLock.take(tmp_path).release()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_backup_write_leaves_another_runs_temp_folder_alone(tmp_path):
    run = make_run(tmp_path)
    in_progress = run.backups / ".step-00000007.abcdefghij.tmp"  # another writer, right now
    in_progress.mkdir(parents=True)
    (in_progress / "trainable.safetensors").write_bytes(b"half")
    parameter = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([parameter], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    write_backup(run, TrainProgress(global_step=3), {"w": parameter.detach()}, optimizer.state_dict(),
                 scheduler.state_dict(), {"config": "c"}, {}, keep=3)
    assert (in_progress / "trainable.safetensors").read_bytes() == b"half"
