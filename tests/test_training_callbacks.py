"""What the trainer tells its callbacks besides progress: every scalar it logs (the same values tensorboard gets,
with tensorboard on or off) and every sample once its video, contact sheet and sidecar are written."""
from __future__ import annotations

import json

import pytest

from modules.config.train_config import TrainConfig
from modules.trainer.GenericTrainer import GenericTrainer
from modules.ui.controllers.curves import ScalarHistory, read_tensorboard_scalars
from modules.util.commands import TrainCallbacks
from modules.util.errors import UserError
from modules.util.sample_record import SampleRecord
from tests.conftest import train_config_dict
from tests.run_paths import run_dir

SAMPLE = {"prompt": "a red circle", "negative_prompt": "blur", "frames": 5, "height": 32, "width": 32, "steps": 2,
          "seed": 5}


def run(config_dict):
    scalars, samples = [], []
    callbacks = TrainCallbacks(on_scalar=lambda name, value, step: scalars.append((name, value, step)),
                               on_sample=samples.append)
    trainer = GenericTrainer(TrainConfig.from_dict(config_dict), callbacks)
    trainer.start()
    trainer.train()
    trainer.end()
    return scalars, samples


def test_the_callback_gets_exactly_the_scalars_tensorboard_gets(tiny_model, video_dataset, tmp_path):
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, tensorboard=True)
    scalars, _ = run(config)
    steps = [step for name, _, step in scalars if name == "loss"]
    assert steps == list(range(1, 7))  # 3 clips × 2 epochs, one value per optimizer step
    assert [step for name, _, step in scalars if name == "lr"] == steps
    logged = ScalarHistory()
    assert read_tensorboard_scalars(run_dir(tmp_path / "workspace") / "tensorboard", logged)
    for name in ("loss", "lr"):
        sent = [(float(step), value) for n, value, step in scalars if n == name]
        assert logged.points(name) == [(step, pytest.approx(value, rel=1e-6)) for step, value in sent]


def test_samples_are_reported_with_their_sidecar_and_scalars_without_tensorboard(tiny_model, video_dataset,
                                                                                  tmp_path):
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, epochs=1, samples=[SAMPLE],
                               sample_after=2, sample_after_unit="STEP", sample_at_end=True)
    scalars, samples = run(config)
    assert len([s for s in scalars if s[0] == "loss"]) == 3  # tensorboard is off: the callback still gets them
    assert not (run_dir(tmp_path / "workspace") / "tensorboard").exists()
    assert [record.step for record in samples] == [2, 3]  # step 2 (sample_after), then the end
    record = samples[0]
    assert record.video.is_file() and record.contact_sheet.is_file()
    assert record.video.name == "step-00000002-0.mp4" and record.sidecar.name == "step-00000002-0.json"
    assert SampleRecord.read(record.sidecar) == record
    data = json.loads(record.sidecar.read_text())
    assert (data["prompt"], data["negative_prompt"], data["frames"], data["steps"], data["seed"], data["index"],
            data["epoch"]) == ("a red circle", "blur", 5, 2, 5, 0, 0)
    assert data["fps"] == 16.0


def test_caching_progress_and_every_skipped_preview_sample_reach_the_callbacks(tiny_model, video_dataset, tmp_path,
                                                                               monkeypatch):
    """The GUI shows the caching phase as it runs, and at the end what the run skipped (here its one preview sample:
    its sampler, which a patched loop cannot run; what start-up can know it refuses before the model loads), not
    only the log."""
    import modules.modelSampler.WanModelSampler as sampler_module

    def fails(self, sample, show_progress=True):
        raise UserError("the sample's sampler cannot run here")

    monkeypatch.setattr(sampler_module.WanModelSampler, "generate", fails)
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, epochs=1, max_steps=1, sample_at_end=True,
                               samples=[SAMPLE])
    progress, warnings = [], []
    trainer = GenericTrainer(TrainConfig.from_dict(config), TrainCallbacks(
        on_progress=lambda what, done, total: progress.append((what, done, total)), on_warning=warnings.append))
    trainer.start()
    assert progress[:4] == [("caching (text)", 0, 3), ("caching (text)", 1, 3), ("caching (text)", 2, 3),
                            ("caching (text)", 3, 3)]
    assert [p for p in progress if p[0] == "caching"] == [("caching", i, 3) for i in range(4)]
    trainer.train()
    trainer.end()
    assert warnings == ["every preview sample (1) was skipped: sample 0: the sample's sampler cannot run here"]
