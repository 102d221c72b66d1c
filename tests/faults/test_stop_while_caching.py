"""Ctrl-C while the dataset is being cached stops at once: no more clips are encoded, no step is
trained and no backup is written; what was cached stays valid (issue #10, item 14)."""
from __future__ import annotations

import pytest

from modules.config.train_config import TrainConfig
from modules.trainer.GenericTrainer import GenericTrainer, TrainingStopped
from modules.util.commands import TrainCommands
from tests.conftest import train_config_dict
from tests.run_paths import run_dir


class StopAfterReads(TrainCommands):
    """A Ctrl-C that arrives while the trainer has looked at the stop flag `reads` times."""

    def __init__(self, reads: int):
        super().__init__()
        self.reads = reads

    @property
    def stop_requested(self) -> bool:
        self.reads -= 1
        return self.reads < 0


def test_a_stop_while_caching_ends_the_run_before_any_step_or_backup(tiny_model, video_dataset, tmp_path):
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, epochs=1,
                                                     backup_before_save=True))
    trainer = GenericTrainer(config, commands=StopAfterReads(1))  # the flag is set during the 2nd clip
    with pytest.raises(TrainingStopped) as stopped:
        trainer.start()
    trainer.close()
    assert stopped.value.path is None
    assert stopped.value.reason.startswith("caching stopped after 1 of 3 samples")
    assert trainer.data.encoder_calls == 1  # the first caption (captions go first, issue #24); nothing after the stop
    assert trainer.progress.global_step == 0
    assert not (run_dir(tmp_path / "workspace") / "backup").exists()
    assert not (tmp_path / "output").exists()

    again = GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                                                   epochs=1)))
    again.start()
    again.close()
    assert again.data.encoder_calls == 2 * 3 - 1  # the caption cached before the stop is reused
