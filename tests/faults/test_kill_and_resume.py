"""Killed runs lose nothing: SIGKILL after a backup or in the middle of a write, then resume.

The runs go through `scripts/train.py` in subprocesses (`_faulty_train.py` adds test-only delays and hanging
writes, which change nothing that is computed) and are killed with SIGKILL: no handler, no cleanup.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.trainer.backup import list_backups, read_backup
from modules.trainer.GenericTrainer import GenericTrainer
from tests.conftest import train_config_dict
from tests.run_paths import last_run, run_dir
from tests.torch_threads import one_torch_thread

RUNNER = Path(__file__).with_name("_faulty_train.py")
# 3 clips, batch 1: 3 steps an epoch, 9 in all, a backup after every step (the last 3 kept).
RUN = dict(epochs=3, batch_size=1, backup_after=1, backup_after_unit="STEP", lora_dropout=0.1,
           learning_rate_scheduler="COSINE", learning_rate_warmup_steps=2)


class Run:
    """One training subprocess with its own workspace, cache and output under `work`."""

    def __init__(self, model_dir: Path, data_dir: Path, work: Path, **overrides):
        self.work = work
        self.config = train_config_dict(model_dir, data_dir, work, **{**RUN, **overrides})
        work.mkdir(parents=True, exist_ok=True)
        self.config_path = work / "config.json"
        self.config_path.write_text(json.dumps(self.config))
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    @property
    def backups(self) -> Path:
        return run_dir(self.config["workspace_dir"]) / "backup"

    @property
    def lora(self) -> Path:
        return Path(self.config["output_model_destination"])

    def start(self, *config_values: str, **faults: str) -> subprocess.Popen:
        self.runs += 1
        env = {**os.environ, "SOURCE_DATE_EPOCH": "0", "OMP_NUM_THREADS": "1",
               "FAULT_MARKER": str(self.work / "hanging"), **faults}
        args = [sys.executable, str(RUNNER), "--config-path", str(self.config_path)]
        for value in config_values:
            args += ["--config-value", value]
        self.logs = [self.work / f"{name}-{self.runs}.txt" for name in ("stdout", "stderr")]
        with open(self.logs[0], "w") as out, open(self.logs[1], "w") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, env=env)
        return self.proc

    def log(self) -> str:
        """stdout and stderr of the latest run."""
        return "".join(path.read_text(errors="replace") for path in self.logs)

    def finish(self, timeout: float = 300) -> str:
        assert self.proc.wait(timeout) == 0, self.log()[-4000:]
        return self.log()

    def kill_when(self, condition, timeout: float = 300) -> None:
        """SIGKILL the run as soon as `condition()` holds; fails if the run ends first."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                pytest.fail(f"the run ended (exit {self.proc.returncode}) before the kill point:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail("the kill point never came")
            time.sleep(0.01)
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(60) == -signal.SIGKILL

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def make_trainer(model_dir, data_dir, work, **overrides) -> GenericTrainer:
    return GenericTrainer(TrainConfig.from_dict(train_config_dict(model_dir, data_dir, work, **overrides)))


def lora_tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def assert_same_tensors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for key in expected:
        assert actual[key].dtype == expected[key].dtype and torch.equal(actual[key], expected[key]), key
        as_bytes = [t.reshape(-1).contiguous().view(torch.uint8) for t in (actual[key], expected[key])]
        assert torch.equal(*as_bytes), key  # bit for bit (-0.0 and 0.0 differ)


@dataclasses.dataclass
class Reference:
    lora: dict[str, torch.Tensor]  # the final LoRA file's tensors
    trainable: dict[str, torch.Tensor]  # what a backup of the last step holds
    lora_path: Path
    cache_dir: str  # its latent cache, shared with the runs under test (caching is not what they test)


@pytest.fixture(scope="module")
def reference(tiny_model, video_dataset, tmp_path_factory) -> Reference:
    """The same config run uninterrupted, in-process: on the CPU only the thread count could make a difference,
    so it uses one thread like the subprocesses (one thread each also keeps them fast on a busy machine)."""
    with one_torch_thread():
        trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path_factory.mktemp("reference"), **RUN)
        trainer.start()
        trainer.train()
        (path,) = trainer.end()
    trainable = {k: v.detach().clone() for k, v in trainer.setup.trainable_state().items()}
    return Reference(lora_tensors(path), trainable, path, trainer.config.cache_dir)


def visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


@pytest.mark.slow
def test_sigkill_after_a_backup_then_resume_equals_an_uninterrupted_run(reference, tiny_model, video_dataset, tmp_path):
    run = Run(tiny_model("t2v"), video_dataset, tmp_path, cache_dir=reference.cache_dir)
    try:
        run.start(FAULT_STEP_DELAY="0.3")  # room to kill between steps; changes nothing computed
        run.kill_when(lambda: (run.backups / "step-00000004").is_dir())
        assert not run.lora.exists()  # killed mid-training: no final save happened
        last = list_backups(last_run(run.config["workspace_dir"]))[-1]  # step 4, or a little later on a busy machine
        assert 4 <= read_backup(last).progress.global_step == int(last.name[5:]) < 9

        run.start("continue_last_backup=true")
        log = run.finish()
    finally:
        run.close()
    assert f"resumed from {last}" in log and "changed since it was written" not in log
    assert_same_tensors(lora_tensors(run.lora), reference.lora)


@pytest.mark.slow
def test_a_kill_during_a_write_keeps_the_previous_backup_and_lora(reference, tiny_model, video_dataset, tmp_path):
    run = Run(tiny_model("t2v"), video_dataset, tmp_path, cache_dir=reference.cache_dir)
    run.lora.parent.mkdir(parents=True)
    shutil.copyfile(reference.lora_path, run.lora)  # an earlier training's LoRA at the same destination
    previous_lora = run.lora.read_bytes()
    marker = tmp_path / "hanging"
    try:
        # 1. Killed while writing the backup of step 3 (half of its trainable.safetensors is on disk).
        run.start(FAULT_HANG_BACKUP="3")
        run.kill_when(marker.is_file)
        assert visible(run.backups) == ["step-00000001", "step-00000002"]
        (temp,) = [p for p in run.backups.iterdir() if p.name.startswith(".step-00000003.")]  # hidden, dot name
        with pytest.raises(Exception):
            load_file(str(temp / "trainable.safetensors"))
        previous = read_backup(run.backups / "step-00000002")  # the previous backup is whole and loads
        assert previous.progress.global_step == 2 and previous.trainable
        assert [p.name for p in list_backups(last_run(run.config["workspace_dir"]))] == ["step-00000001", "step-00000002"]

        # 2. The resume starts from step 2 and trains to the end; killed while writing the final LoRA.
        marker.unlink()
        run.start("continue_last_backup=true", FAULT_HANG_LORA="1")
        run.kill_when(marker.is_file)
    finally:
        run.close()
    assert f"resumed from {run.backups / 'step-00000002'} at step 2" in run.log()
    assert visible(run.backups) == ["step-00000007", "step-00000008", "step-00000009"]
    assert not [p.name for p in run.backups.iterdir() if p.name.startswith(".")]  # the stale temp folder is gone
    assert_same_tensors(read_backup(run.backups / "step-00000009").trainable, reference.trainable)
    # The LoRA under the final name is still the earlier one, whole (the new one goes beside it, numbered: it
    # never replaces an earlier file); the half-written new one is a dot file.
    assert "the model is written to " + str(run.lora.with_name("lora-2.safetensors")) in run.log()
    assert run.lora.read_bytes() == previous_lora
    assert_same_tensors(lora_tensors(run.lora), reference.lora)
    assert visible(run.lora.parent) == ["lora.safetensors"]
    (temp,) = [p for p in run.lora.parent.iterdir() if p.name.startswith(".lora-2.safetensors.")]
    assert 0 < temp.stat().st_size < len(previous_lora)


def test_resume_with_a_changed_config_names_what_changed(tiny_model, video_dataset, tmp_path, caplog):
    first = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=1, max_steps=1)
    first.start()
    first.train()
    first.backup()
    first.close()

    def resume(**overrides) -> list[str]:
        caplog.clear()
        trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, continue_last_backup=True,
                               resume_changed_config=True, **overrides)
        with caplog.at_level(logging.WARNING):
            trainer.start()
        trainer.close()
        assert trainer.progress.global_step == 1
        return [r.getMessage() for r in caplog.records if "changed since it was written" in r.getMessage()]

    # Keys that do not change the training (epochs, max_steps, backup schedule) resume silently.
    assert resume(epochs=3, max_steps=0, backup_after=5) == []
    warnings = resume(epochs=1, max_steps=1, learning_rate=2e-3, lora_dropout=0.1)
    assert len(warnings) == 1
    assert "the config changed" in warnings[0] and "step-00000001" in warnings[0]
    assert "learning_rate: 0.001 -> 0.002" in warnings[0] and "lora_dropout: 0.0 -> 0.1" in warnings[0]
    assert "epochs" not in warnings[0] and "\n" not in warnings[0]
    # batch_size counts per GPU: the warning names the global batch
    assert "global_batch_size: 1 -> 2" in resume(batch_size=2)[0]
