"""First-last-frame (issue #27): the FLF2V family (Wan2.1-FLF2V-14B's layout) and `last_frame_condition` on I2V
bases. The sampler (diffusers' pipeline with `last_image`) and the training step (the data loader's condition
modules) feed the transformer the same condition channels and CLIP tokens; a LoRA run trains, resumes exactly,
saves and samples."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from modules.config.train_config import SampleConfig, TrainConfig
from modules.dataLoader.encoding_modules import EncoderCounter
from modules.dataLoader.WanBaseDataLoader import EncodeFirstFrameClip, FirstFrameCondition, condition_frames
from modules.model.condition_layout import fold_mask
from modules.model.conditioning import TRAIN_TIMESTEPS, ConditionPayload
from modules.model.step_inputs import StepInputs, StepRandom
from modules.modelLoader.lora_inference import attach_lora_for_inference
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.errors import UserError
from tests.conftest import train_config_dict, trains_and_resumes_exactly
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.test_conditioning import FixedSigma, Recorder

FRAMES, SIZE = 9, 32


@pytest.mark.parametrize("variant", ["flf2v", "i2v"])
def test_sampler_and_training_step_feed_first_and_last_frame_alike(variant, tiny_model, tmp_path):
    model = WanModelLoader().load(str(tiny_model(variant)), torch.device("cpu"))
    assert model.variant.name == variant and model.conditioning.paired_image_tokens == (variant == "flf2v")
    first, last = np.full((SIZE, SIZE, 3), 200, np.uint8), np.zeros((SIZE, SIZE, 3), np.uint8)
    first[:, :8] = (20, 90, 200)
    last[8:20, 8:20] = (230, 40, 40)
    Image.fromarray(first).save(tmp_path / "first.png")
    Image.fromarray(last).save(tmp_path / "last.png")
    sample = SampleConfig.from_dict({"prompt": "a red circle", "frames": FRAMES, "height": SIZE, "width": SIZE,
                                     "steps": 2, "cfg_scale": 1.0, "seed": 3, "image": str(tmp_path / "first.png"),
                                     "last_image": str(tmp_path / "last.png")}, "sample")
    recorder = Recorder(model)
    WanModelSampler(model).generate(sample, show_progress=False)
    calls = list(recorder.calls)
    assert len(calls) == 2

    # the training side: a clip whose first and last frames are the images, through the loader's modules
    video = torch.zeros(3, FRAMES, SIZE, SIZE)
    video[:, 0] = torch.from_numpy(first).permute(2, 0, 1) / 127.5 - 1
    video[:, -1] = torch.from_numpy(last).permute(2, 0, 1) / 127.5 - 1
    clip = FirstFrameCondition(last=True).process({"video_frames": video}, None)["condition_clip"]
    condition = model.normalize_latents(model.encode_video(clip[None])[0])
    mask = fold_mask(condition_frames(FRAMES, True), SIZE // 8, SIZE // 8)[None]
    clip_embeds = EncodeFirstFrameClip(model, None, EncoderCounter(), last=True).process(
        {"video_frames": video}, None)["clip_embeds"][None]
    payload = ConditionPayload(condition=torch.cat([mask, condition], dim=1), clip_embeds=clip_embeds)
    setup = BaseWanSetup(model, TrainConfig())
    for _, fed in calls:
        assert fed["encoder_hidden_states_image"].shape[1] == (257 if variant == "flf2v" else 514)
        inputs = StepInputs(x0=torch.randn(fed["hidden_states"][:, :16].shape),
                            prompt_embeds=fed["encoder_hidden_states"], payload=payload)
        setup.sigma_sampler = FixedSigma(float(fed["timestep"].flatten()[-1]) / TRAIN_TIMESTEPS)
        recorder.calls.clear()
        setup.predict(inputs, StepRandom.for_micro_step(0, 0, 1))
        (_, trained), = recorder.calls
        torch.testing.assert_close(trained["hidden_states"][:, 16:], fed["hidden_states"][:, 16:], rtol=0, atol=1e-4)
        # the last pixel frame is a condition frame: the last mask channel of the last latent frame
        assert fed["hidden_states"][:, 19, -1].eq(1).all() and fed["hidden_states"][:, 16:19, -1].eq(0).all()
        torch.testing.assert_close(trained["encoder_hidden_states_image"], fed["encoder_hidden_states_image"],
                                   rtol=0, atol=1e-4)


def make_trainer(tiny_model, data, work, **overrides) -> GenericTrainer:
    values = train_config_dict(tiny_model("flf2v"), data, work, epochs=2, learning_rate=1e-2, output_dtype="FLOAT32")
    return GenericTrainer(TrainConfig.from_dict({**values, **overrides}))


@pytest.mark.slow
def test_a_flf2v_lora_trains_resumes_saves_and_samples(tiny_model, video_dataset, tmp_path):
    trainer = trains_and_resumes_exactly(
        lambda name, **o: make_trainer(tiny_model, video_dataset, tmp_path / name, **o))
    assert trainer.data.last_frame

    path = tmp_path / "full" / "output" / "lora.safetensors"
    Image.new("RGB", (SIZE, SIZE), (200, 40, 40)).save(tmp_path / "first.png")
    Image.new("RGB", (SIZE, SIZE), (40, 40, 200)).save(tmp_path / "last.png")
    sample = SampleConfig.from_dict({"prompt": "a red circle", "frames": FRAMES, "height": SIZE, "width": SIZE,
                                     "steps": 2, "seed": 3, "image": str(tmp_path / "first.png"),
                                     "last_image": str(tmp_path / "last.png")}, "sample")
    model = WanModelLoader().load(str(tiny_model("flf2v")), torch.device("cpu"))
    before = WanModelSampler(model).generate(sample, show_progress=False)
    attach_lora_for_inference(model, path)  # diffusers' own loader, ComfyUI key names
    after = WanModelSampler(model).generate(sample, show_progress=False)
    assert before.shape == after.shape == (FRAMES, SIZE, SIZE, 3) and not np.array_equal(before, after)
    with pytest.raises(UserError, match="first and a last frame"):
        WanModelSampler(model).generate(SampleConfig.from_dict({**sample.to_dict(), "last_image": ""}, "sample"),
                                        show_progress=False)
    i2v = WanModelLoader().load(str(tiny_model("i2v")), torch.device("cpu"))
    with pytest.raises(UserError, match="made for wan-2.1-flf2v, not for this i2v model"):
        attach_lora_for_inference(i2v, path)
