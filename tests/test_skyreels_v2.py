"""SkyReels-V2 (issue #27), not diffusion forcing: a family of its own (SkyReelsV2Transformer3DModel, 24 fps, its fps
embedding fed by the shared conditioning); a LoRA run trains, resumes exactly, saves, samples, and its header keeps
it off a plain Wan base."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from modules.config.train_config import SampleConfig, TrainConfig
from modules.modelLoader.lora_inference import attach_lora_for_inference
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.errors import UserError
from tests.conftest import train_config_dict, trains_and_resumes_exactly
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)


def make_trainer(tiny_model, data, work, **overrides) -> GenericTrainer:
    values = train_config_dict(tiny_model("skyreels_v2"), data, work, epochs=2, learning_rate=1e-2,
                               output_dtype="FLOAT32")
    return GenericTrainer(TrainConfig.from_dict({**values, **overrides}))


@pytest.mark.slow
def test_a_skyreels_v2_lora_trains_resumes_saves_and_samples(tiny_model, video_dataset, tmp_path):
    trainer = trains_and_resumes_exactly(
        lambda name, **o: make_trainer(tiny_model, video_dataset, tmp_path / name, **o))
    assert trainer.model.variant.name == "skyreels_v2_t2v" and trainer.model.conditioning.fps_index == 1

    path = tmp_path / "full" / "output" / "lora.safetensors"
    sample = SampleConfig.from_dict({"prompt": "a red circle", "frames": 9, "height": 32, "width": 32, "steps": 2,
                                     "seed": 3}, "sample")
    model = WanModelLoader().load(str(tiny_model("skyreels_v2")), torch.device("cpu"))
    before = WanModelSampler(model).generate(sample, show_progress=False)
    attach_lora_for_inference(model, path)
    after = WanModelSampler(model).generate(sample, show_progress=False)
    assert before.shape == after.shape == (9, 32, 32, 3) and not np.array_equal(before, after)
    plain = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu"))
    with pytest.raises(UserError, match="made for wan-2.1-skyreels-v2-t2v, not for this t2v model"):
        attach_lora_for_inference(plain, path)
