"""The work the fourth outside round saw lost when runs shared a workspace, each reproduced on the trainer.

These tests import only what the code before run folders had, and find backups by the paths the trainer reports
(not by the run-folder layout), so each of them runs on that code too, and fails there.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.trainer.GenericTrainer import GenericTrainer, TrainingStopped
from modules.ui.controllers.curves import LOSS, ScalarHistory, read_tensorboard_scalars
from modules.util.errors import UserError
from tests.conftest import train_config_dict


def trainer(tiny_model, data, work, **overrides) -> GenericTrainer:
    return GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), data, work, **overrides)))


def train(t: GenericTrainer, stop_at: int | None = None) -> Path | None:
    """Start and train `t`; with `stop_at`, stop after that optimizer step. Returns the stop's backup."""
    t.start()
    if stop_at is not None:
        t.callbacks.on_update = lambda update: t.commands.stop() if update.global_step == stop_at else None
        with pytest.raises(TrainingStopped) as stopped:
            t.train()
        t.close()
        return stopped.value.path
    t.train()
    t.end()
    return None


def steps(folder: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in folder.iterdir() if p.name.startswith("step-")) if folder.is_dir() else []


def test_a_new_run_in_a_used_workspace_keeps_the_backup_it_just_wrote(tiny_model, video_dataset, tmp_path):
    """Run 1 ends at step 6 with backups 5 and 6; run 2 in the same workspace stops at step 2: its backup must
    survive run 2's own rolling cleanup, and run 1's too (they used to be pruned by the highest step)."""
    config = dict(epochs=2, backup_after=1, backup_after_unit="STEP", rolling_backup_count=2)
    train(trainer(tiny_model, video_dataset, tmp_path, **config))
    first_backups = sorted((tmp_path / "workspace").rglob("step-*"))
    assert len(first_backups) == 2
    stopped = train(trainer(tiny_model, video_dataset, tmp_path, **config), stop_at=2)
    assert stopped is not None and (stopped / "trainable.safetensors").is_file()
    assert all(p.is_dir() for p in first_backups)  # nor were the first run's deleted
    assert stopped.parent not in {p.parent for p in first_backups}


def test_a_backup_missing_progress_json_is_refused_in_one_line(tiny_model, video_dataset, tmp_path):
    config = dict(epochs=1, backup_after=1, backup_after_unit="STEP")
    newest = train(trainer(tiny_model, video_dataset, tmp_path, **config), stop_at=2)
    (newest / "progress.json").unlink()  # the weights are intact
    resumed = trainer(tiny_model, video_dataset, tmp_path, continue_last_backup=True, **config)
    with pytest.raises(UserError) as refused:
        resumed.start()
    resumed.close()
    message = str(refused.value)
    assert message.startswith(f"cannot resume from {newest}: progress.json is missing") and "\n" not in message
    assert (newest / "trainable.safetensors").is_file()


def test_a_bogus_step_folder_is_neither_resumed_nor_kept_over_the_runs_own(tiny_model, video_dataset, tmp_path,
                                                                          caplog):
    config = dict(epochs=1, backup_after=1, backup_after_unit="STEP", rolling_backup_count=2)
    newest = train(trainer(tiny_model, video_dataset, tmp_path, **config), stop_at=2)
    bogus = newest.with_name("step-99999999")
    shutil.copytree(newest, bogus)  # e.g. a copy renamed by hand
    resumed = trainer(tiny_model, video_dataset, tmp_path, continue_last_backup=True, **config)
    with caplog.at_level(logging.WARNING):
        resumed.start()
        assert resumed.progress.global_step == 2
        resumed.train()
        resumed.end()
    assert steps(newest.parent) == [2, 3, 99999999]  # the run's own newest two, and the bogus one, kept
    warnings = [r.getMessage() for r in caplog.records if "step-99999999" in r.getMessage()]
    assert warnings and all("\n" not in w for w in warnings)
    assert any(w.startswith(f"not resuming {bogus}") for w in warnings)
    assert any(w.startswith(f"backup {bogus} is kept, not pruned") for w in warnings)


@pytest.mark.parametrize("value", [10 ** 30, 500])
def test_an_implausible_step_in_progress_json_is_refused(tiny_model, video_dataset, tmp_path, value):
    """A global_step of 10^30 (or 500 where the data holds 3 steps an epoch) is refused in one line, even with the
    manifest rewritten to match as an attacker would: it must not end the run at once and reach a header."""
    config = dict(epochs=1, backup_after=1, backup_after_unit="STEP")
    newest = train(trainer(tiny_model, video_dataset, tmp_path, **config), stop_at=2)
    meta = json.loads((newest / "progress.json").read_text())
    meta["progress"]["global_step"] = value
    (newest / "progress.json").write_text(json.dumps(meta))
    if (newest / "manifest.json").is_file():
        from modules.trainer.backup_manifest import write_manifest

        old = json.loads((newest / "manifest.json").read_text())
        (newest / "manifest.json").unlink()
        write_manifest(newest, old["run_id"], old["run_name"], old["step"], {})
    resumed = trainer(tiny_model, video_dataset, tmp_path, continue_last_backup=True, **config)
    with pytest.raises(UserError, match=rf"^cannot resume from {newest}: progress.json's global_step"):
        resumed.start()
    resumed.close()


def test_the_final_model_never_replaces_an_earlier_one_unless_asked(tiny_model, video_dataset, tmp_path):
    config = dict(epochs=1, max_steps=1)
    first = trainer(tiny_model, video_dataset, tmp_path, **config)
    train(first)
    earlier = (tmp_path / "output" / "lora.safetensors").read_bytes()
    second = trainer(tiny_model, video_dataset, tmp_path, seed=7, **config)
    train(second)
    assert second.output_paths == [tmp_path / "output" / "lora-2.safetensors"]
    assert (tmp_path / "output" / "lora.safetensors").read_bytes() == earlier
    third = trainer(tiny_model, video_dataset, tmp_path, seed=7, overwrite_output=True, **config)
    train(third)
    assert third.output_paths == [tmp_path / "output" / "lora.safetensors"]
    replaced, numbered = (load_file(str(tmp_path / "output" / name)) for name in ("lora.safetensors", "lora-2.safetensors"))
    assert replaced.keys() == numbered.keys() and all(torch.equal(replaced[k], numbered[k]) for k in replaced)


def test_a_resumed_runs_curves_hold_every_step(tmp_path):
    """After a resume from step 17 the run has two event files (1-20 and 18-30): the curves show 1-30, with the
    resumed values from step 18 on (the newest file alone showed only 18-30)."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path)) as first:
        for step in range(1, 21):
            first.add_scalar("loss", 1.0, step)
    time.sleep(0.01)
    with SummaryWriter(str(tmp_path)) as resumed:
        for step in range(18, 31):
            resumed.add_scalar("loss", 2.0, step)
    files = sorted(tmp_path.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    for age, path in enumerate(files):
        os.utime(path, (1 + age, 1 + age))
    history = ScalarHistory()
    assert read_tensorboard_scalars(tmp_path, history)
    assert history.points(LOSS) == [(float(s), 1.0 if s < 18 else 2.0) for s in range(1, 31)]
