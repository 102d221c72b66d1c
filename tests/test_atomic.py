"""What killed writes leave behind is cleaned up or recovered; damaged backups are caught by checksums."""
from __future__ import annotations

import logging
import os
import time

import pytest
import torch

from modules.trainer.backup import DamagedBackup, TrainProgress, latest_backup, write_backup
from modules.util.atomic import STALE_AFTER_S, atomic_write_bytes, atomic_write_dir
from modules.util.run_folder import find_run
from tests.run_paths import make_run


def _age(path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_write_removes_old_temp_files_of_its_own_target_only(tmp_path):
    target = tmp_path / "lora.safetensors"
    stale = tmp_path / ".lora.k1ll3d.tmp.safetensors"  # what a SIGKILL during the last save left
    young = tmp_path / ".lora.inflight.tmp.safetensors"  # maybe another process saving right now
    other = tmp_path / ".other.k1ll3d.tmp.safetensors"
    for path in (stale, young, other):
        path.write_bytes(b"partial")
    _age(stale, STALE_AFTER_S + 60)
    _age(other, STALE_AFTER_S + 60)
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert not stale.exists() and young.exists() and other.exists()


def test_a_folder_swap_killed_between_its_renames_is_restored_by_the_next_write(tmp_path):
    target = tmp_path / "model"
    old = tmp_path / ".model.old"  # the previous good folder, moved aside; the kill came before the new one moved in
    old.mkdir()
    (old / "weights.bin").write_bytes(b"good")
    stale_tmp = tmp_path / ".model.abc.tmp"
    stale_tmp.mkdir()
    _age(stale_tmp, STALE_AFTER_S + 60)

    def failing_write(folder):
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write_dir(target, failing_write)
    assert (target / "weights.bin").read_bytes() == b"good" and not old.exists() and not stale_tmp.exists()


def _write(workspace, step: int, value: float):
    run = find_run(workspace, "run") or make_run(workspace)
    parameter = torch.nn.Parameter(torch.full((4,), value))
    optimizer = torch.optim.AdamW([parameter])
    parameter.grad = torch.ones(4)
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return write_backup(run, TrainProgress(global_step=step), {"w": parameter.detach()}, optimizer.state_dict(),
                        scheduler.state_dict(), {"config": "c"}, {}, keep=3)


@pytest.mark.parametrize("damaged, way_out", [("optimizer.safetensors", "resume_fresh_optimizer=true"),
                                               ("optimizer.json", "resume_fresh_optimizer=true"),
                                               ("trainable.safetensors", "to resume from step-00000001"),
                                               ("lr_scheduler.json", "to resume from step-00000001")])
def test_a_backup_damaged_after_writing_is_refused_naming_the_file_and_kept(tmp_path, damaged, way_out):
    """Falling back to the older backup would let the run overwrite the damaged one at its step (and the rolling
    count delete it): it is refused in one line naming the file and the ways out, and left as it is."""
    _write(tmp_path, 1, 1.0)
    newest = _write(tmp_path, 2, 2.0)
    path = newest / damaged
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + 3] ^= 0x04  # a flipped bit: both files still parse
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedBackup) as error:
        latest_backup(find_run(tmp_path, "run"))
    message = str(error.value)
    assert message.startswith(f"cannot resume from {newest}: {damaged} does not match the checksum")
    assert way_out in message and "\n" not in message
    assert path.read_bytes() == bytes(data)


def test_a_damaged_optimizer_state_resumes_the_weights_with_a_fresh_optimizer_when_asked(tmp_path):
    newest = _write(tmp_path, 2, 2.0)
    (newest / "optimizer.safetensors").write_bytes(b"damaged")
    backup = latest_backup(find_run(tmp_path, "run"), with_optimizer=False)
    assert backup.progress.global_step == 2 and backup.optimizer == {}
    assert float(backup.trainable["w"].max()) > 1.5