"""The run catalog (modules/trainer/run_catalog.py): every run of a workspace with its state, step, reason, last
backup and files, as the trainer left them; `continue_last_backup` resumes the newest unfinished run and never
"resumes" a finished one; scripts/runs.py shows the catalog.

The trainer writes what the catalog reads: the tests here run tiny trainings for the states a run ends in, and
write records by hand only for what a test cannot make happen cheaply (a process killed mid-run).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path

import pytest
import torch

from modules.trainer import run_record
from modules.trainer.run_catalog import RunState, describe_run, list_runs
from modules.trainer.run_record import new_record, read_record, write_record
from modules.util.errors import UserError
from tests.faults.test_lost_work import train, trainer
from tests.run_paths import make_run
from tests.script_runner import run_script
from tests.test_run_folders import small_backup

STEPS = dict(epochs=2, backup_after=1, backup_after_unit="STEP", rolling_backup_count=2)  # 3 steps an epoch


def names(workspace: Path) -> list[str]:
    return [s.name for s in list_runs(workspace)]


# --- what the trainer records -------------------------------------------------------------------------------


def test_a_stopped_a_finished_and_a_failed_run_read_as_such(tiny_model, video_dataset, tmp_path):
    workspace = tmp_path / "workspace"
    train(trainer(tiny_model, video_dataset, tmp_path, run_name="stopped", **STEPS), stop_at=2)
    train(trainer(tiny_model, video_dataset, tmp_path, run_name="finished", **STEPS))
    failing = trainer(tiny_model, video_dataset, tmp_path, run_name="failed", **STEPS)
    failing.start()

    def fail_at_step_4(update) -> None:
        if update.global_step == 4:
            raise UserError("an error that ends the run")

    failing.callbacks.on_update = fail_at_step_4
    with pytest.raises(UserError):
        failing.train()
    failing.close()

    stopped, finished, failed = (describe_run(workspace / n) for n in ("stopped", "finished", "failed"))
    assert names(workspace) == ["failed", "finished", "stopped"]  # newest first
    assert stopped.state == RunState.STOPPED and stopped.step == 2 and stopped.total_steps == 6
    assert stopped.describe() == "stopped at step 2 of 6 (stopped by the user)"
    assert stopped.last_backup == workspace / "stopped" / "backup" / "step-00000002" and stopped.resumable
    assert finished.state == RunState.FINISHED and finished.describe() == "finished at step 6 of 6"
    assert finished.outputs == (tmp_path / "output" / "lora.safetensors",) and not finished.resumable
    assert failed.state == RunState.FAILED and failed.step == 4
    assert failed.describe() == "failed at step 4 of 6 (an error that ends the run)" and failed.resumable
    for summary in (stopped, finished, failed):
        assert summary.config_path == summary.folder / "config.json" and summary.created and summary.last_started
        assert summary.samples_dir is None and summary.tensorboard_dir is None  # none written: tensorboard off


def test_a_run_that_fails_while_loading_reads_failed_and_a_refused_resume_keeps_the_runs_state(
        tiny_model, video_dataset, tmp_path, monkeypatch):
    workspace = tmp_path / "workspace"
    train(trainer(tiny_model, video_dataset, tmp_path, run_name="r", **STEPS), stop_at=2)
    before = (workspace / "r" / run_record.STATE_FILE).read_text()
    refused = trainer(tiny_model, video_dataset, tmp_path, run_name="r", continue_last_backup=True, **STEPS,
                      learning_rate=0.5)  # another training: refused
    with pytest.raises(UserError, match="^not resuming .*other training settings"):
        refused.start()
    refused.close()
    assert (workspace / "r" / run_record.STATE_FILE).read_text() == before
    assert describe_run(workspace / "r").describe() == "stopped at step 2 of 6 (stopped by the user)"

    from modules.trainer import GenericTrainer as generic_trainer

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")

    monkeypatch.setattr(generic_trainer.WanModelLoader, "load_for_config", out_of_memory)
    broken = trainer(tiny_model, video_dataset, tmp_path, run_name="broken")
    with pytest.raises(RuntimeError):
        broken.start()
    broken.close()
    assert describe_run(workspace / "broken").describe() == "failed at step 0 (RuntimeError: CUDA out of memory.)"


def test_a_running_record_whose_process_is_gone_reads_as_stopped_at_its_last_backup(tmp_path):
    run = make_run(tmp_path, "killed")
    for step in (3, 4):
        small_backup(run, step)
    gone = run_record.RunRecord("running", step=5, total_steps=9, pid=2 ** 22 + 7, host=socket.gethostname(),
                                updated=time.time())
    write_record(run.path, gone)
    summary = describe_run(run.path)
    assert summary.state == RunState.STOPPED and summary.step == 4 and summary.resumable
    assert summary.describe() == ("stopped at step 4 of 9 (its process ended without a stop after step 5 (killed or "
                                  "crashed); it resumes from its last backup)")
    fresh = make_run(tmp_path, "died-loading")
    write_record(fresh.path, gone.__class__("running", pid=gone.pid, host=gone.host))
    assert describe_run(fresh.path).state == RunState.NEW and not describe_run(fresh.path).resumable


def test_a_run_is_running_only_while_a_live_workspace_lock_names_it(tmp_path):
    from modules.trainer.workspace_lock import WorkspaceLock

    run, other = make_run(tmp_path, "mine"), make_run(tmp_path, "other")
    small_backup(run, 2)
    write_record(run.path, new_record("running", step=2, total_steps=10))
    lock = WorkspaceLock.take(tmp_path)
    assert describe_run(run.path).state == RunState.STOPPED  # the lock names no run yet
    lock.name_run("mine")
    assert describe_run(run.path).describe() == "running, step 2 of 10"
    assert describe_run(other.path).state == RunState.NEW
    lock.release()
    assert describe_run(run.path).state == RunState.STOPPED


def test_runs_of_the_earlier_release_without_a_record_read_from_their_backups_and_config(tmp_path):
    done, halfway, empty = make_run(tmp_path, "done"), make_run(tmp_path, "halfway"), make_run(tmp_path, "empty")
    for run, step in ((done, 6), (halfway, 3)):
        small_backup(run, step)
        run.config_copy.write_text(json.dumps({"epochs": 2, "max_steps": 0}))
    meta = json.loads((done.backups / "step-00000006" / "progress.json").read_text())
    meta["progress"]["epoch"] = 2  # the end of its second epoch
    (done.backups / "step-00000006" / "progress.json").write_text(json.dumps(meta))
    assert describe_run(done.path).state == RunState.FINISHED
    assert describe_run(halfway.path).describe() == ("stopped at step 3 (no state recorded; it resumes from its "
                                                     "last backup)")
    assert describe_run(empty.path).describe() == "new: no step trained yet"


def test_a_damaged_folder_is_listed_with_its_reason_and_never_breaks_the_list(tmp_path):
    good = make_run(tmp_path, "good")
    bad = make_run(tmp_path, "bad")
    (bad.path / run_record.STATE_FILE).write_text("{cut sho")  # a record cut short: as if none
    (bad.path / "backup").mkdir()
    (bad.path / "backup" / "step-00000002").mkdir()
    (bad.path / "backup" / "step-00000002" / "progress.json").write_text("[1, 2")
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "file.txt").write_text("x")
    summaries = {s.name: s for s in list_runs(tmp_path)}
    assert set(summaries) == {"good", "bad"}
    assert summaries["bad"].state == RunState.STOPPED and summaries["bad"].step == 2
    assert summaries["good"].state == RunState.NEW
    assert list_runs(tmp_path / "missing") == []
    with pytest.raises(ValueError, match="is not a run folder"):
        describe_run(tmp_path / "not-a-run")
    assert read_record(good.path) is None


# --- continue_last_backup ---------------------------------------------------------------------------------


def test_continue_resumes_the_newest_unfinished_run_not_a_newer_finished_one(tiny_model, video_dataset, tmp_path,
                                                                             caplog):
    """Run A stopped, run B finished after it: Continue resumes A (B used to be 'resumed', training nothing and
    writing a duplicate lora-2)."""
    train(trainer(tiny_model, video_dataset, tmp_path, run_name="A", **STEPS), stop_at=2)
    train(trainer(tiny_model, video_dataset, tmp_path, run_name="B", **STEPS))
    outputs = sorted(p.name for p in (tmp_path / "output").iterdir())
    resumed = trainer(tiny_model, video_dataset, tmp_path, continue_last_backup=True, **STEPS)
    with caplog.at_level(logging.INFO):
        resumed.start()
    resumed.close()
    assert resumed.run.name == "A" and resumed.progress.global_step == 2
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("continue_last_backup:")]
    assert line.startswith("continue_last_backup: resuming the last run 'A' (stopped at step 2 of 6 (stopped by the "
                           "user): the newest unfinished run; 'B' finished, nothing to resume there;")
    assert sorted(p.name for p in (tmp_path / "output").iterdir()) == outputs
    assert not (tmp_path / "workspace" / "A-2").exists()  # the run picked for the resume named no new run


def test_a_finished_run_is_not_resumed_unless_the_config_trains_it_further(tiny_model, video_dataset, tmp_path):
    train(trainer(tiny_model, video_dataset, tmp_path, run_name="B", **STEPS))
    for run_name in ("B", ""):
        again = trainer(tiny_model, video_dataset, tmp_path, run_name=run_name, continue_last_backup=True, **STEPS)
        with pytest.raises(UserError) as refused:
            again.start()
        again.close()
        message = str(refused.value)
        assert message.startswith("continue_last_backup: run 'B' has finished (finished at step 6 of 6): there is "
                                  "nothing to resume; to train more, start a new run from its weights "
                                  f"(lora_weight_path={tmp_path / 'output' / 'lora.safetensors'}, "
                                  "continue_last_backup=false), or raise epochs")
        assert "\n" not in message
    assert [p.name for p in (tmp_path / "output").iterdir()] == ["lora.safetensors"]
    assert names(tmp_path / "workspace") == ["B"]
    further = trainer(tiny_model, video_dataset, tmp_path, run_name="B", continue_last_backup=True,
                      **{**STEPS, "epochs": 3})
    further.start()
    further.train()
    further.end()
    assert further.progress.global_step == 9 and describe_run(further.run.path).describe() == "finished at step 9 of 9"


def test_a_new_run_from_a_finished_runs_weights_starts_where_it_ended(tiny_model, video_dataset, tmp_path):
    """The way out the refusal names: the finished LoRA as lora_weight_path of a new run."""
    first = trainer(tiny_model, video_dataset, tmp_path, run_name="B", **STEPS, output_dtype="FLOAT32")
    train(first)
    weights = {k: v.clone() for k, v in first.setup.trainable_state().items()}
    second = trainer(tiny_model, video_dataset, tmp_path, run_name="C", **STEPS,
                     lora_weight_path=str(tmp_path / "output" / "lora.safetensors"), output_dtype="FLOAT32")
    second.start()
    second.close()
    started = second.setup.trainable_state()
    assert started.keys() == weights.keys()
    assert all(torch.equal(started[k], weights[k]) for k in weights)


# --- scripts/runs.py ------------------------------------------------------------------------------------------


def test_runs_script_lists_and_shows_the_runs(tmp_path):
    run = make_run(tmp_path, "mine")
    small_backup(run, 4)
    write_record(run.path, new_record("stopped", step=4, total_steps=12, reason="stopped by the user"))
    (run.path / "config.json").write_text("{}")
    listed = run_script("runs.py", "list", "--workspace-dir", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [f"runs in {tmp_path}, newest first:",
                                          "  mine  stopped at step 4 of 12 (stopped by the user)"]
    as_json = json.loads(run_script("runs.py", "list", "--workspace-dir", str(tmp_path), "--json").stdout)
    (entry,) = as_json["runs"]
    assert entry["state"] == "stopped" and entry["step"] == 4 and entry["last_backup"].endswith("step-00000004")
    config = tmp_path / "train.json"
    config.write_text(json.dumps({"workspace_dir": str(tmp_path)}))
    shown = run_script("runs.py", "show", "mine", "--config-path", str(config))
    assert shown.returncode == 0, shown.stderr
    assert "state:        stopped at step 4 of 12 (stopped by the user)" in shown.stdout
    assert f"resume it:    .venv/bin/python scripts/train.py --config-path '{run.path / 'config.json'}'" in shown.stdout
    missing = run_script("runs.py", "show", "nope", "--workspace-dir", str(tmp_path))
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        f"error: no run 'nope' in {tmp_path}: `scripts/runs.py list` shows its runs"]
    os.rename(run.path, tmp_path / "renamed")  # found by the name it was started under
    assert "run:          renamed" in run_script("runs.py", "show", "mine", "--workspace-dir", str(tmp_path)).stdout


def test_runs_script_reads_the_catalog_without_torch(tmp_path):
    """The catalog is torch-free: listing runs takes a moment, not the seconds torch takes to import."""
    from tests.test_cli_startup import probe

    small_backup(make_run(tmp_path, "mine"), 2)
    report, output = probe("runs.py", "list", "--workspace-dir", str(tmp_path))
    assert report == {"code": 0, "imported": []}, output
    assert "mine  stopped at step 2 (no state recorded; it resumes from its last backup)" in output
