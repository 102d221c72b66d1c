"""A full disk at the end of a run loses nothing that can be written (issue #10, item 2): when the
backup before the final save fails, the model is still written and the failure is one line; when the
final save fails, the one line says which backup holds the run and how to resume it."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import SafetensorError
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.modelSaver.WanModelSaver import WanModelSaver
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, train_config_dict
from tests.run_paths import run_dir

# What safetensors' Rust writer raises on a full disk (not an OSError).
DISK_FULL = SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                            'message: "No space left on device" })')


def _can_mount_tmpfs(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs '{folder}'"],
                          capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_workspace_on_a_full_disk_still_gives_the_final_model(tiny_model, video_dataset, tmp_path):
    """The real thing: the workspace is a 48 kB tmpfs (room for the log, not for the backup)."""
    workspace = tmp_path / "small-disk"
    workspace.mkdir()
    if not _can_mount_tmpfs(workspace):
        pytest.skip("needs `unshare -rm` to mount a small tmpfs")
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, epochs=1, workspace_dir=str(workspace))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    command = (f"mount -t tmpfs -o size=48k tmpfs '{workspace}' && "
               f"exec '{sys.executable}' '{REPO_ROOT / 'scripts' / 'train.py'}' --config-path '{path}'")
    run = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    failures = [line for line in run.stderr.splitlines() if "cannot write the backup" in line]
    assert len(failures) == 2, run.stderr  # when it happens, and again beside the summary
    assert "the disk is full" in failures[0] and "saving the model anyway" in failures[0]
    lora = tmp_path / "output" / "lora.safetensors"
    assert f"model written to {lora}" in run.stdout
    assert load_file(str(lora))


def make_trainer(tiny_model, video_dataset, tmp_path, **overrides) -> GenericTrainer:
    return GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                                                  epochs=1, **overrides)))


def test_a_failed_final_save_names_the_backup_and_how_to_resume(tiny_model, video_dataset, tmp_path, monkeypatch):
    save = WanModelSaver.save

    def disk_full(self, destination, **kwargs):
        raise DISK_FULL

    monkeypatch.setattr(WanModelSaver, "save", disk_full)
    trainer = make_trainer(tiny_model, video_dataset, tmp_path)
    trainer.start()
    trainer.train()
    with pytest.raises(UserError) as error:
        trainer.end()
    trainer.close()
    backup = run_dir(tmp_path / "workspace") / "backup" / "step-00000003"
    assert str(error.value) == (
        f"cannot write the model to '{tmp_path / 'output' / 'lora.safetensors'}' (the disk is full): the backup "
        f"{backup} holds the trained weights: free space or change output_model_destination, then run again with "
        "continue_last_backup=true (it resumes at the end and saves)")

    # With room again, the resume does no training step and writes the model.
    monkeypatch.setattr(WanModelSaver, "save", save)
    again = make_trainer(tiny_model, video_dataset, tmp_path, continue_last_backup=True)
    again.start()
    again.train()
    assert again.progress.global_step == 3
    assert again.end() == [tmp_path / "output" / "lora.safetensors"]


def test_without_a_backup_the_save_failure_says_so(tiny_model, video_dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(WanModelSaver, "save", lambda *args, **kwargs: (_ for _ in ()).throw(DISK_FULL))
    trainer = make_trainer(tiny_model, video_dataset, tmp_path, backup_before_save=False)
    trainer.start()
    trainer.train()
    with pytest.raises(UserError, match=r"\(the disk is full\): no backup holds this run's final weights"):
        trainer.end()
    trainer.close()


def test_a_failed_scheduled_backup_does_not_end_the_run(tiny_model, video_dataset, tmp_path, monkeypatch, caplog):
    calls = []
    backup = GenericTrainer.backup

    def first_backup_fails(self):
        calls.append(self.progress.global_step)
        if len(calls) == 1:
            raise UserError("cannot write the backup to 'x' (the disk is full): free space there")
        return backup(self)

    monkeypatch.setattr(GenericTrainer, "backup", first_backup_fails)
    trainer = make_trainer(tiny_model, video_dataset, tmp_path, backup_after=1, backup_after_unit="STEP")
    trainer.start()
    trainer.train()
    outputs = trainer.end()
    assert calls == [1, 2, 3] and trainer.progress.global_step == 3 and outputs
    (line,) = [r.getMessage() for r in caplog.records if "the disk is full" in r.getMessage()]
    assert line.endswith("training goes on; the next backup tries again")
    assert trainer.backup_failure is None  # a later backup succeeded: nothing to report at the end
