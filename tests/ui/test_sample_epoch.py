"""The sample viewer names the epoch a sample's weights end in: the last sample of a 2-epoch run is of epoch 2 (it
said "epoch 3", as "epoch 32" for a 31-epoch run: the epoch counter already named the next epoch)."""
from __future__ import annotations

from modules.trainer.backup import TrainProgress
from modules.trainer.sampling import epoch_of_last_step
from modules.ui.controllers.sample_gallery import record_title
from tests.faults.test_lost_work import train, trainer


def test_the_epoch_of_the_last_step():
    assert epoch_of_last_step(TrainProgress(epoch=0, epoch_batch=2, global_step=2)) == 0  # inside epoch 1
    assert epoch_of_last_step(TrainProgress(epoch=31, epoch_batch=0, global_step=310)) == 30  # after the end
    assert epoch_of_last_step(TrainProgress(epoch=0, epoch_batch=0, global_step=0)) == 0


def test_the_end_sample_of_a_two_epoch_run_is_of_epoch_2(tiny_model, video_dataset, tmp_path):
    records = []
    run = trainer(tiny_model, video_dataset, tmp_path, epochs=2, sample_at_end=True, sample_after=1,
                  sample_after_unit="EPOCH", samples=[{"prompt": "a cat", "frames": 5, "height": 32, "width": 32,
                                                       "steps": 1}])
    run.callbacks.on_sample = records.append
    train(run)
    assert (records[0].step, records[0].epoch) == (3, 0)  # the end of epoch 1
    assert {(r.step, r.epoch) for r in records[1:]} == {(6, 1)}  # the end of epoch 2, and the end of the run
    assert " · epoch 2 · " in record_title(records[-1])
