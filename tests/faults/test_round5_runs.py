"""Runs that find themselves again (the fifth outside round): a run folder deleted or renamed while the run trains,
a `run.json` missing or cut short, a run renamed by hand and resumed through its own config copy, a workspace of
the round-4 release, a `train.lock` that is a folder, a full disk at start, and `logs/` or `samples/` that are
symbolic links. A run's identity comes from its backups (each backup's manifest names its run), not from one
small file. One test per cause; each failed on the code before this fix (0a4fc38).
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modules.trainer.GenericTrainer import GenericTrainer, TrainingStopped
from modules.trainer.resume_check import training_settings
from modules.util.errors import UserError
from modules.trainer.backup_manifest import MANIFEST
from modules.util.run_folder import RUN_FILE, read_run
from tests.conftest import REPO_ROOT, train_config_dict
from tests.faults.test_lost_work import steps, trainer
from tests.script_runner import run_script

# 3 clips, batch 1: 3 steps an epoch, 6 in all; a backup after every step, the newest 2 kept
RUN = dict(epochs=2, backup_after=1, backup_after_unit="STEP", rolling_backup_count=2, tensorboard=True)


def train_until(t: GenericTrainer, stop_at: int, at_step: dict | None = None) -> Path:
    """Start `t`, run `at_step[n]()` right after optimizer step n (before its backup), stop after `stop_at`;
    the stop's backup."""
    at_step = at_step or {}
    t.start()

    def on_update(update) -> None:
        if update.global_step in at_step:
            at_step[update.global_step]()
        if update.global_step == stop_at:
            t.commands.stop()

    t.callbacks.on_update = on_update
    with pytest.raises(TrainingStopped) as stopped:
        t.train()
    t.close()
    return stopped.value.path


def resumed(tiny_model, video_dataset, tmp_path, **overrides) -> GenericTrainer:
    """A trainer started with continue_last_backup (not trained further; closed)."""
    t = trainer(tiny_model, video_dataset, tmp_path, continue_last_backup=True, **{**RUN, **overrides})
    try:
        t.start()
    finally:
        t.close()
    return t


@pytest.mark.parametrize("tensorboard", [False, True])
def test_a_run_folder_deleted_mid_run_is_made_again_and_its_later_backups_resume(tiny_model, video_dataset,
                                                                                   tmp_path, caplog, tensorboard):
    """The backups written after the deletion were invisible to a resume (no run.json beside them); with
    tensorboard on, the next curve value was a traceback."""
    workspace = tmp_path / "workspace"
    run = workspace / "r"
    with caplog.at_level(logging.WARNING):
        last = train_until(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **{**RUN, "tensorboard":
                                                                                            tensorboard}),
                           stop_at=4, at_step={2: lambda: shutil.rmtree(run)})
    assert last == run / "backup" / "step-00000004" and read_run(run) is not None
    assert any(f"the run folder {run} was deleted" in r.getMessage() for r in caplog.records)
    assert len(list((run / "logs").iterdir())) == 1  # a log of its own again
    assert (run / "tensorboard").is_dir() == tensorboard  # and a new event file
    for run_name in ("r", ""):
        again = resumed(tiny_model, video_dataset, tmp_path, run_name=run_name, tensorboard=tensorboard)
        assert again.run.path == run and again.progress.global_step == 4
    assert sorted(p.name for p in workspace.iterdir()) == ["r"]


@pytest.mark.parametrize("tensorboard", [False, True])
def test_a_run_folder_renamed_mid_run_is_followed(tiny_model, video_dataset, tmp_path, caplog, tensorboard):
    """A resume went back to the renamed folder's early backups (the later ones were in a new folder of the old
    name, without run.json); with tensorboard on, the next curve value was a traceback."""
    workspace = tmp_path / "workspace"
    with caplog.at_level(logging.WARNING):
        last = train_until(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **{**RUN, "tensorboard":
                                                                                            tensorboard}),
                           stop_at=4, at_step={2: lambda: os.rename(workspace / "r", workspace / "renamed")})
    assert last == workspace / "renamed" / "backup" / "step-00000004"
    assert sorted(p.name for p in workspace.iterdir()) == ["renamed"]
    assert steps(workspace / "renamed" / "backup") == [3, 4]
    assert any("was renamed to" in r.getMessage() for r in caplog.records)
    for run_name in ("r", "renamed", ""):  # by the name it was started under, by its new name, or as the last run
        again = resumed(tiny_model, video_dataset, tmp_path, run_name=run_name, tensorboard=tensorboard)
        assert again.run.path == workspace / "renamed" and again.progress.global_step == 4


def test_a_rename_that_hits_a_backup_write_writes_it_in_the_renamed_folder(tiny_model, video_dataset, tmp_path,
                                                                            monkeypatch):
    import modules.trainer.backup as backup

    workspace = tmp_path / "workspace"
    save_file = backup.save_file
    renamed = []

    def rename_while_writing(tensors, filename, metadata=None):
        if not renamed and ".step-00000003." in str(filename):  # inside the temp folder of step 3's backup
            os.rename(workspace / "r", workspace / "renamed")
            renamed.append(filename)
        return save_file(tensors, filename, metadata)

    monkeypatch.setattr(backup, "save_file", rename_while_writing)
    last = train_until(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **RUN), stop_at=4)
    assert renamed and last == workspace / "renamed" / "backup" / "step-00000004"
    assert steps(workspace / "renamed" / "backup") == [3, 4]
    assert resumed(tiny_model, video_dataset, tmp_path).progress.global_step == 4


@pytest.mark.parametrize("damage", ["missing", "cut short"])
def test_a_run_whose_run_json_is_lost_is_known_by_its_backups(tiny_model, video_dataset, tmp_path, damage):
    workspace = tmp_path / "workspace"
    train_until(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **RUN), stop_at=2)
    run_file = workspace / "r" / RUN_FILE
    run_id = json.loads(run_file.read_text())["run_id"]
    if damage == "missing":
        run_file.unlink()
    else:
        run_file.write_text(run_file.read_text()[:30])
    again = resumed(tiny_model, video_dataset, tmp_path, run_name="r")
    assert again.run.path == workspace / "r" and again.progress.global_step == 2
    assert sorted(p.name for p in workspace.iterdir()) == ["r"]  # no r-2
    assert json.loads(run_file.read_text())["run_id"] == run_id  # written again, with the backups' run id
    run_file.unlink()
    assert resumed(tiny_model, video_dataset, tmp_path).run.path == workspace / "r"  # as the last run too


def test_a_run_renamed_by_the_user_resumes_through_its_own_config_copy(tiny_model, video_dataset, tmp_path):
    workspace = tmp_path / "workspace"
    train_until(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **RUN), stop_at=2)
    os.rename(workspace / "r", workspace / "mine")
    result = run_script("train.py", "--config-path", str(workspace / "mine" / "config.json"), "--config-value",
                        "continue_last_backup=true", "--config-value", "max_steps=3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from {workspace / 'mine' / 'backup' / 'step-00000002'} at step 2" in result.stderr
    assert sorted(p.name for p in workspace.iterdir()) == ["mine"]
    assert steps(workspace / "mine" / "backup") == [2, 3]
    assert json.loads((workspace / "mine" / "config.json").read_text())["run_name"] == "mine"


def test_a_flat_workspace_of_the_round4_release_resumes(tiny_model, video_dataset, tmp_path):
    """As the round-4 release left it (checked against a real one): backup/, logs/, tensorboard/ in the
    workspace, backups without a manifest, a config.json without the keys added since (base_weight_format...),
    config_version 2, and a progress.json whose config fingerprint covers those older keys. It resumes as the docs
    say, without resume_changed_config (it used to be refused on `base_weight_format: (unset) -> "BF16"`)."""
    workspace = tmp_path / "workspace"
    train_until(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **RUN), stop_at=2)
    for folder in ("backup", "logs", "tensorboard"):
        os.rename(workspace / "r" / folder, workspace / folder)
    shutil.rmtree(workspace / "r")
    for backup in (workspace / "backup").iterdir():
        (backup / MANIFEST).unlink()
        config = json.loads((backup / "config.json").read_text())
        for key in ("base_weight_format", "guidance_preserving", "overwrite_output", "run_name"):
            del config[key]
        config["gradient_checkpointing"] = config.pop("checkpointing")["policy"] != "NONE"  # version 2's spelling
        del config["sample_overrides"]["sampler"]
        config["config_version"] = 2
        (backup / "config.json").write_text(json.dumps(config, indent=4))
        meta = json.loads((backup / "progress.json").read_text())
        fingerprint = hashlib.sha256(json.dumps(training_settings(config, 1), sort_keys=True).encode()).hexdigest()
        meta["fingerprints"] = {"config": fingerprint, "dataset": meta["fingerprints"]["dataset"]}
        (backup / "progress.json").write_text(json.dumps(meta, indent=2))
    again = resumed(tiny_model, video_dataset, tmp_path)
    assert again.progress.global_step == 2 and again.run.migrated


def test_a_train_lock_that_is_a_folder_is_one_line(tiny_model, video_dataset, tmp_path):
    lock = tmp_path / "workspace" / "train.lock"
    (lock / "inside").mkdir(parents=True)
    t = trainer(tiny_model, video_dataset, tmp_path, **RUN)
    with pytest.raises(UserError) as refused:
        t.start()
    t.close()
    assert str(refused.value) == (f"workspace_dir '{lock.parent}' holds {lock}, which is not a lock file (a folder): "
                                  "move it out of the workspace (WanTrainer writes its lock there)")
    assert (lock / "inside").is_dir()  # not ours: left as it is


def test_a_full_disk_at_start_is_one_line(tiny_model, video_dataset, tmp_path, monkeypatch):
    import modules.util.run_folder as run_folder

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(run_folder, "atomic_write_text", full)
    t = trainer(tiny_model, video_dataset, tmp_path, **RUN)
    with pytest.raises(UserError) as refused:
        t.start()
    t.close()
    assert str(refused.value) == (f"cannot prepare the run in workspace_dir '{tmp_path / 'workspace'}' (the disk is "
                                  "full): free space there, or set workspace_dir to a writable folder with room for "
                                  "backups")
    assert not (tmp_path / "workspace" / "train.lock").exists()  # released


@pytest.mark.slow
def test_a_workspace_on_a_full_disk_at_start_is_one_line_from_the_cli(tiny_model, video_dataset, tmp_path):
    """The real thing: the workspace is a 64 kB tmpfs, filled before the run starts."""
    from tests.faults.test_full_disk_at_the_end import _can_mount_tmpfs

    workspace = tmp_path / "full"
    workspace.mkdir()
    if not _can_mount_tmpfs(workspace):
        pytest.skip("needs `unshare -rm` to mount a small tmpfs")
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, workspace_dir=str(workspace))
    (tmp_path / "config.json").write_text(json.dumps(config))
    command = (f"mount -t tmpfs -o size=64k tmpfs '{workspace}' && "
               f"(dd if=/dev/zero of='{workspace}/filler' bs=4k 2>/dev/null; true) && "
               f"exec '{sys.executable}' '{REPO_ROOT / 'scripts' / 'train.py'}' --config-path '{tmp_path / 'config.json'}'")
    run = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: cannot prepare the run in workspace_dir '{workspace}' (the disk is full): free space there, or set "
        "workspace_dir to a writable folder with room for backups")


@pytest.mark.parametrize("folder", ["logs", "samples"])
def test_logs_or_samples_that_are_symbolic_links_are_refused(tiny_model, video_dataset, tmp_path, folder):
    workspace = tmp_path / "workspace"
    sample = {"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 2}
    train_until(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **RUN), stop_at=2)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = workspace / "r" / folder
    if link.exists():
        shutil.rmtree(link)
    link.symlink_to(elsewhere)
    t = trainer(tiny_model, video_dataset, tmp_path, run_name="r", continue_last_backup=True, samples=[sample],
                sample_after=1, sample_after_unit="STEP", **RUN)
    with pytest.raises(UserError) as refused:
        t.start()
        t.train()
    t.close()
    assert str(refused.value) == (f"run 'r': {link} is a symbolic link (to {elsewhere}); a run writes only inside its "
                                  "own folder: remove the link (what it points to is left as it is), or set another "
                                  "run_name")
    assert list(elsewhere.iterdir()) == []


def test_a_run_folder_that_is_a_symbolic_link_is_refused_before_anything_is_written(tiny_model, video_dataset,
                                                                                     tmp_path):
    workspace = tmp_path / "workspace"
    train_until(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **RUN), stop_at=2)
    target = tmp_path / "elsewhere"
    os.rename(workspace / "r", target)
    (workspace / "r").symlink_to(target)
    before = {p: p.stat().st_mtime_ns for p in target.rglob("*")}
    with pytest.raises(UserError, match=rf"^run 'r': the run folder {workspace / 'r'} is a symbolic link \(to "
                                        rf"{target}\); a run writes only inside its own folder"):
        resumed(tiny_model, video_dataset, tmp_path, run_name="r")
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*")} == before
