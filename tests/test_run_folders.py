"""Runs that share a workspace never lose each other's work: each run has its own folder (backups, samples,
curves, logs, config), its backups carry a manifest naming it, pruning deletes only the run's own verified
backups, a resume picks the right run, and the final model never silently replaces an earlier file.

Three runs go through one workspace twice: by `scripts/train.py` (the CLI) and by the GUI's AppController
(driven without Tk). The fault tests reproduce the losses of the fourth outside round and locate backups by the
paths the trainer reports, so they run on the code before run folders too, and fail there.
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

from modules.config.train_config import TrainConfig
from modules.trainer.backup_manifest import MANIFEST, ownership_problem
from modules.ui.controllers.curves import LOSS, ScalarHistory, read_tensorboard_scalars
from modules.util.run_folder import list_runs, read_run
from modules.util.sample_record import read_records
from tests.conftest import train_config_dict
from tests.faults.test_lost_work import steps, train, trainer
from tests.script_runner import run_script

SAMPLE = {"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 2, "seed": 5}
# 3 clips, batch 1: 3 steps an epoch; a backup after every step, the newest 2 kept; a sample every 3 steps
RUNS = dict(epochs=2, backup_after=1, backup_after_unit="STEP", rolling_backup_count=2, tensorboard=True,
            samples=[SAMPLE], sample_after=3, sample_after_unit="STEP", sample_at_end=False)


def check_three_runs(workspace: Path, outputs: list[str]) -> None:
    """What the runs of `three_runs` leave: run 1 trained to the end, run 2 ended at step 3, run 3 ended at step 2
    and was resumed to the end. Every file belongs to the run whose folder holds it."""
    runs = list_runs(workspace)
    assert len(runs) == 3 and len({r.run_id for r in runs}) == 3
    first, second, third = runs
    assert (steps(first.backups), steps(second.backups), steps(third.backups)) == ([5, 6], [2, 3], [5, 6])
    for run in runs:
        for backup in run.backup_folders():  # each is its run's own, whole
            assert ownership_problem(backup, run.run_id, deep=True) is None
        assert json.loads(run.config_copy.read_text())["run_name"] == run.name
        assert len(list(run.logs.iterdir())) == (2 if run is third else 1)
    assert [r.step for r in read_records(first.samples)] == [3, 6]
    assert [r.step for r in read_records(second.samples)] == [3]
    assert [r.step for r in read_records(third.samples)] == [3, 6]  # after the resume from step 2
    for run, last in ((first, 6), (second, 3), (third, 6)):
        history = ScalarHistory()
        assert read_tensorboard_scalars(run.tensorboard, history)
        assert [int(x) for x, _ in history.points(LOSS)] == list(range(1, last + 1))  # run 3: both event files
    assert len(list(third.tensorboard.glob("events.out.tfevents.*"))) == 2
    output = workspace.parent / "output"  # each end wrote its model beside the earlier ones
    names = ["lora.safetensors", "lora-2.safetensors", "lora-3.safetensors", "lora-4.safetensors"]
    assert outputs == [str(output / name) for name in names]
    assert sorted(p.name for p in output.iterdir()) == sorted(names)


def three_runs(run) -> None:
    """`run(max_steps, resume)` three times in one workspace, then the last run resumed to the end."""
    run(0, False)
    run(3, False)
    run(2, False)
    run(0, True)


@pytest.mark.slow
def test_three_runs_through_one_workspace_from_the_cli(tiny_model, video_dataset, tmp_path):
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **RUNS)
    (tmp_path / "config.json").write_text(json.dumps(config))
    outputs, logs = [], []

    def cli(max_steps: int, resume: bool) -> None:
        # in this process (test_end_to_end runs train.py as real processes)
        result = run_script("train.py", "--config-path", str(tmp_path / "config.json"), "--config-value",
                            f"max_steps={max_steps}", "--config-value", f"continue_last_backup={str(resume).lower()}")
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.extend(line.split(" to ", 1)[1] for line in result.stdout.splitlines()
                       if line.startswith("model written to"))
        logs.append(result.stdout + result.stderr)

    three_runs(cli)
    third = list_runs(tmp_path / "workspace")[2]
    assert f"continue_last_backup: resuming the last run '{third.name}'" in logs[-1]
    assert f"resumed from {third.backups / 'step-00000002'} at step 2" in logs[-1]
    check_three_runs(tmp_path / "workspace", outputs)


@pytest.mark.slow
def test_three_runs_through_one_workspace_from_the_gui_controller(tiny_model, video_dataset, tmp_path):
    from modules.ui.controllers.app_controller import AppController

    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **RUNS)
    (tmp_path / "config.json").write_text(json.dumps(config))
    app = AppController()
    app.load(tmp_path / "config.json")
    outputs, names = [], []

    def run(max_steps: int, resume: bool) -> None:
        app.config.set("max_steps", max_steps)
        app.config.set("continue_last_backup", resume)
        app.start()
        assert app.training.wait(300)
        app.training.poll()
        state = app.training.state
        assert not state.error and not state.running, state.error
        outputs.extend(state.outputs)
        names.append(state.run_name)
        assert Path(state.run_dir) == app.run_folder() == tmp_path / "workspace" / state.run_name
        app.load_run_results()  # the views read the run's own folder
        assert app.gallery.folder == Path(state.run_dir) / "samples"
        assert app.latest_backup().startswith(str(Path(state.run_dir) / "backup"))

    three_runs(run)
    assert len(set(names)) == 3 and names[3] == names[2]  # the last run resumed, in its own folder
    check_three_runs(tmp_path / "workspace", outputs)


def test_an_older_flat_workspace_resumes_and_nothing_is_deleted(tiny_model, video_dataset, tmp_path):
    """A workspace as older WanTrainers left it (backup/, samples/, tensorboard/, logs/ in the workspace, backups
    without a manifest) resumes: its folders move into a run folder by rename; every file is still there."""
    config = dict(epochs=1, backup_after=1, backup_after_unit="STEP", tensorboard=True)
    train(trainer(tiny_model, video_dataset, tmp_path, **config), stop_at=2)
    workspace = tmp_path / "workspace"
    (run,) = list_runs(workspace)
    for folder in run.path.iterdir():  # flatten it, as an older WanTrainer wrote it
        if folder.is_dir():
            folder.rename(workspace / folder.name)
    shutil.rmtree(run.path)
    for manifest in workspace.glob(f"backup/step-*/{MANIFEST}"):
        manifest.unlink()
    before = sorted(p.relative_to(workspace).as_posix() for p in workspace.rglob("*") if p.is_file())
    resumed = trainer(tiny_model, video_dataset, tmp_path, continue_last_backup=True, **config)
    resumed.start()
    resumed.close()
    assert resumed.progress.global_step == 2
    migrated = read_run(resumed.run.path)
    assert migrated is not None and migrated.migrated
    assert not (workspace / "backup").exists() and steps(migrated.backups) == [1, 2]
    after = {p.relative_to(migrated.path).as_posix() for p in migrated.path.rglob("*") if p.is_file()}
    assert set(before) <= after


# --- the pieces, without a model ------------------------------------------------------------------------------


def small_backup(run, step: int, keep: int = 2, reported: set | None = None) -> Path:
    from modules.trainer.backup import TrainProgress, write_backup

    parameter = torch.nn.Parameter(torch.full((4,), float(step)))
    optimizer = torch.optim.SGD([parameter], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return write_backup(run, TrainProgress(global_step=step), {"w": parameter.detach()}, optimizer.state_dict(),
                        scheduler.state_dict(), {"config": "c"}, {}, keep=keep, reported=reported)


def test_run_names_default_to_the_output_and_the_time_and_a_taken_name_is_numbered(tmp_path):
    from modules.util.run_folder import create_run, default_run_name, sanitise_run_name

    when = time.mktime((2026, 3, 1, 14, 25, 30, 0, 0, -1))
    assert default_run_name("out/my lora.safetensors", when) == "my_lora-20260301-142530"
    assert default_run_name("out/model", when) == "model-20260301-142530"
    assert sanitise_run_name("../x/ y") == "x_y" and sanitise_run_name("backup") == "run_backup"
    first, renamed = create_run(tmp_path, "run", when)
    assert not renamed and first.path == tmp_path / "run"
    (tmp_path / "mine").mkdir()  # any folder that exists, a run's or not, is never written into
    second, renamed = create_run(tmp_path, "run", when)
    third, _ = create_run(tmp_path, "mine", when)
    assert renamed and second.path == tmp_path / "run-2" and third.path == tmp_path / "mine-2"
    assert sorted(r.name for r in list_runs(tmp_path)) == ["mine-2", "run", "run-2"]
    assert len({r.run_id for r in list_runs(tmp_path)}) == 3 and read_run(tmp_path / "mine") is None


@pytest.mark.parametrize("name, message", [("a/b", "must be a folder name"), (".hidden", "must be a folder name"),
                                           ("backup", "older flat layout"), ("x" * 97, "must be a folder name")])
def test_a_run_name_that_is_no_plain_folder_name_is_a_config_error(tmp_path, name, message):
    from modules.util.base_config import ConfigError

    with pytest.raises(ConfigError, match=rf"^config key 'run_name' .*{message}"):
        TrainConfig.from_dict(train_config_dict(tmp_path, tmp_path, tmp_path, run_name=name))


def test_pruning_deletes_only_the_runs_own_verified_older_backups_and_reports_the_rest_once(tmp_path, caplog):
    from tests.run_paths import make_run

    other, run = make_run(tmp_path, "other"), make_run(tmp_path, "run")
    for step in (17, 20, 30):
        small_backup(other, step, keep=3)
    reported: set[str] = set()  # what the trainer keeps for the run
    foreign = run.backups / "step-00000030"
    bogus = run.backups / "step-99999999"
    with caplog.at_level(logging.WARNING):
        small_backup(run, 1, reported=reported)
        shutil.copytree(other.backups / "step-00000030", foreign)  # another run's backup, copied in
        shutil.copytree(other.backups / "step-00000017", bogus)  # renamed: its manifest says step 17
        damaged = small_backup(run, 2, keep=3, reported=reported)
        (damaged / "trainable.safetensors").write_bytes(b"x" * (damaged / "trainable.safetensors").stat().st_size)
        small_backup(run, 3, keep=1, reported=reported)  # would delete steps 1 and 2 by the count alone
        small_backup(run, 4, keep=1, reported=reported)
    assert steps(run.backups) == [2, 4, 30, 99999999]  # 1 and 3 verified and deleted; 2 fails its checksum
    assert steps(other.backups) == [17, 20, 30]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert all("\n" not in w and "is kept, not pruned" in w for w in warnings)
    (about_damaged,), (about_foreign,), (about_bogus,) = ([w for w in warnings if w.startswith(f"backup {f} ")]
                                                         for f in (damaged, foreign, bogus))  # each once
    assert "trainable.safetensors does not match the checksum" in about_damaged
    assert "names another run (other)" in about_foreign and "names another run (other)" in about_bogus
    assert len(warnings) == 3
    assert ownership_problem(run.backups / "step-00000004", run.run_id, deep=True) is None


def test_a_backup_never_replaces_a_folder_its_run_did_not_write(tmp_path):
    from modules.util.errors import UserError
    from tests.run_paths import make_run

    other, run = make_run(tmp_path, "other"), make_run(tmp_path, "run")
    shutil.copytree(small_backup(other, 3), run.backups / "step-00000003")  # copied in by hand
    before = sorted((run.backups / "step-00000003").rglob("*"))
    with pytest.raises(UserError, match=r"^cannot write the backup to '.*step-00000003': a folder this run did not "
                                        r"write is there \(its manifest.json names another run \(other\)\)"):
        small_backup(run, 3)
    assert sorted((run.backups / "step-00000003").rglob("*")) == before
    assert ownership_problem(run.backups / "step-00000003", other.run_id, deep=True) is None
    small_backup(run, 4)
    small_backup(run, 4)  # its own backup of a step: replaced by the same state


def test_continue_last_backup_resumes_the_named_run_or_the_one_with_the_newest_backup(tmp_path, caplog):
    from modules.trainer.runs import open_run
    from tests.run_paths import make_run

    older, newer, empty = make_run(tmp_path, "older"), make_run(tmp_path, "newer"), make_run(tmp_path, "empty")
    small_backup(newer, 1)
    small_backup(older, 5)
    past = time.time() - 100
    os.utime(newer.backups / "step-00000001", (past, past))
    with caplog.at_level(logging.INFO):
        assert open_run(tmp_path, "", "out/lora.safetensors", resume=True).path == older.path
        assert open_run(tmp_path, "newer", "out/lora.safetensors", resume=True).path == newer.path
        fresh = open_run(tmp_path, "later", "out/lora.safetensors", resume=True)
    assert fresh.path == tmp_path / "later" and not fresh.backup_folders()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("continue_last_backup")]
    assert "continue_last_backup: resuming the last run 'older'" in lines[0]
    assert lines[1].startswith("continue_last_backup: resuming run 'newer'")
    assert lines[2].startswith("continue_last_backup: no run 'later' in ")
    assert open_run(tmp_path, "", "out/lora.safetensors", resume=False).path.name.startswith("lora-")
    assert empty.path.is_dir() and not empty.backup_folders()


def test_the_output_is_numbered_when_any_file_a_save_writes_exists(tmp_path):
    from modules.trainer.output_destination import free_destination

    destination = tmp_path / "lora.safetensors"
    assert free_destination(destination, overwrite=False) == destination
    (tmp_path / "lora_low_noise.safetensors").write_bytes(b"an earlier two-expert run's")
    assert free_destination(destination, overwrite=False) == tmp_path / "lora-2.safetensors"
    (tmp_path / "lora-2_embedding.safetensors").write_bytes(b"an earlier embedding")
    assert free_destination(destination, overwrite=False) == tmp_path / "lora-3.safetensors"
    assert free_destination(destination, overwrite=True) == destination
    (tmp_path / "model").mkdir()
    assert free_destination(tmp_path / "model", overwrite=False) == tmp_path / "model-2"


def test_progress_counters_beyond_what_json_or_the_run_holds_are_implausible():
    from modules.trainer.backup_manifest import plausible_progress

    good = {"epoch": 1, "epoch_batch": 2, "global_step": 5, "micro_step": 5}
    assert plausible_progress(good, steps_per_epoch=3, epochs=2) is None
    assert "not a whole number" in plausible_progress({**good, "global_step": 10 ** 30})
    assert "not a whole number" in plausible_progress({**good, "epoch": -1})
    assert "not a whole number" in plausible_progress({**good, "micro_step": True})
    assert "exactly" in plausible_progress({**good, "extra": 1})
    assert "more than 2 epoch(s) of 3 steps" in plausible_progress({**good, "global_step": 7}, steps_per_epoch=3)
    assert "beyond the run's 2 epochs" in plausible_progress({**good, "epoch": 3}, epochs=2)


def test_two_starts_in_one_second_keep_two_logs(tmp_path, monkeypatch):
    """A resume started in the same second as the run it resumes (CI saw it) opens a log of its own."""
    from modules.trainer import trainer_run

    monkeypatch.setattr(trainer_run.time, "strftime", lambda fmt: "train-20261128-090159")
    first = trainer_run.new_log_path(tmp_path)
    first.write_text("run")
    second = trainer_run.new_log_path(tmp_path)
    second.write_text("resume")
    third = trainer_run.new_log_path(tmp_path)
    assert [first.name, second.name, third.name] == [
        "train-20261128-090159.log", "train-20261128-090159-2.log", "train-20261128-090159-3.log"]
