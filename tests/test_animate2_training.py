"""Wan2.2-Animate-2 training runs: the data loader feeds the two passes exactly what diffusers' Animate-2 pipeline
builds from the same files (its own preprocessing and encoder blocks, the driving video resampled from another
fps), skips and counts clips without their inputs, and a LoRA run through the trainer saves and resumes bit for
bit."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from modules.config.train_config import TrainConfig
from modules.dataLoader.WanAnimate2DataLoader import WanAnimate2DataLoader
from modules.model.step_inputs import StepRandom
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.synthetic.synthetic_data import render_clip
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.video_write import write_video
from tests import comfyui_wan
from tests.conftest import train_config_dict, trains_and_resumes_exactly
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.test_adapters import comfy_loaded_keys

SIZE, FRAMES = 32, 9


def triplets(folder, driving_fps: float = 16.0):
    """001: a red square, driven by a blue circle's motion filmed at `driving_fps` (the same 17 frames' duration);
    002: no driving video or reference (skipped); 003: a driving video shorter than the window (skipped)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, motion in (("001", "left to right"), ("002", "top to bottom"), ("003", "left to right")):
        write_video(folder / f"{name}.mp4", render_clip("square", "red", motion, 17, SIZE, SIZE), 16.0)
        (folder / f"{name}.txt").write_text(f"a red square moving {motion}", encoding="utf-8")
    steps = round(16 * driving_fps / 16.0) + 1
    write_video(folder / "001_driving.mp4", render_clip("circle", "blue", "left to right", steps, SIZE, SIZE),
                driving_fps)
    write_video(folder / "003_driving.mp4", render_clip("circle", "blue", "left to right", 5, SIZE, SIZE), 16.0)
    for name in ("001", "003"):
        Image.fromarray(rng.integers(0, 255, (SIZE, SIZE, 3), dtype=np.uint8)).save(folder / f"{name}_reference.png")
    return folder


def _config(tiny_model, data, work, **overrides) -> TrainConfig:
    return TrainConfig.from_dict(train_config_dict(tiny_model("animate_2"), data, work, frames=FRAMES,
                                                   resolution=[SIZE, SIZE], **overrides))


def _diffusers_inputs(model, data) -> SimpleNamespace:
    """What diffusers' Animate-2 blocks build for clip 001's driving video and reference (first segment)."""
    from diffusers.modular_pipelines.modular_pipeline import BlockState, PipelineState
    from diffusers.modular_pipelines.wan_animate_2 import encoders
    from diffusers.modular_pipelines.wan_animate_2.denoise import (
        WanAnimate2SegmentPrevFramesStep,
        WanAnimate2SegmentVaeEncoderStep,
    )
    from diffusers.modular_pipelines.wan_animate_2.video_processor import WanAnimate2VideoProcessor

    from modules.dataLoader.video_io import read_video_frames

    def processor(resample):
        return WanAnimate2VideoProcessor(vae_scale_factor=8, spatial_patch_size=(2, 2), resample=resample)

    components = SimpleNamespace(vae=model.vae, image_encoder=model.image_encoder, text_encoder=model.text_encoder,
                                 tokenizer=model.tokenizer, image_processor=processor("bicubic"),
                                 video_processor=processor("bilinear"), _execution_device=torch.device("cpu"),
                                 vae_scale_factor_spatial=8, vae_scale_factor_temporal=4,
                                 requires_unconditional_embeds=False)
    frames, fps = read_video_frames(data / "001_driving.mp4")
    state = PipelineState()
    for key, value in dict(image=Image.open(data / "001_reference.png").convert("RGB"), height=SIZE, width=SIZE,
                           driving_video=[Image.fromarray(f) for f in frames], driving_video_fps=fps,
                           fps=model.variant.fps,
                           segment_frame_length=FRAMES, prompt="a red square", max_sequence_length=512).items():
        state.set(key, value)
    for step in (encoders.WanAnimate2TextEncoderStep, encoders.WanAnimate2ProcessImagesInputStep,
                 encoders.WanAnimate2ProcessVideosInputStep, encoders.WanAnimate2ImageClipEncoderStep,
                 encoders.WanAnimate2VideoClipEncoderStep, encoders.WanAnimate2ImageVaeEncoderStep):
        step()(components, state)
    segment = BlockState(**{k: state.get(k) for k in ("driving_video_pixels", "reference_image_latents",
                                                      "effective_segment", "segment_frame_length")},
                         prev_segment_conditioning_frames=1)
    WanAnimate2SegmentVaeEncoderStep()(components, segment, 0)
    WanAnimate2SegmentPrevFramesStep()(components, segment, 0)
    return SimpleNamespace(state=state, segment=segment)


def test_the_loader_feeds_what_diffusers_animate_2_pipeline_builds_and_skips_clips_without_inputs(tiny_model,
                                                                                                  tmp_path):
    data = triplets(tmp_path / "data", driving_fps=32.0)  # the driving video at twice the fps: resampled alike
    config = _config(tiny_model, data, tmp_path)
    model = WanModelLoader().load_for_config(config, torch.device("cpu"))
    loader = WanAnimate2DataLoader(config, model)
    loader.prepare()
    assert [item.sample.media_path.name for item in loader.items] == ["001.mp4"]  # streams are no samples
    skipped = {entry.path.rsplit("/", 1)[-1]: entry.message for entry in loader.skips.entries}
    assert set(skipped) == {"002.mp4", "003_driving.mp4"}
    assert "no driving video" in skipped["002.mp4"] and "its clip's window 9" in skipped["003_driving.mp4"]
    inputs = loader.assemble(loader.load_batch([0], 0), StepRandom.for_micro_step(0, 0, 1))

    expected = _diffusers_inputs(model, data)
    state, segment, payload = expected.state, expected.segment, inputs.payload
    drv = payload.driving

    def close(ours, theirs):
        torch.testing.assert_close(ours, theirs.float(), rtol=0, atol=2e-5)

    close(drv.latents[0], segment.driving_video_latents[0])  # (C, F, h, w), posterior mode
    close(drv.condition[0], segment.driving_video_condition)  # [ones mask | the same latents]
    close(payload.condition[0], segment.reference_latents)  # [mask | reference slot, VAE of black frames]
    close(inputs.x0[0, :, 0], state.get("reference_image_latents")[4:, 0])  # the slot's clean value: the reference
    close(payload.clip_embeds[0], state.get("encoder_hidden_states_image")[0])
    close(drv.clip_embeds[0], state.get("condition_clip_context")[0])
    close(drv.prompt_embeds[0], state.get("prompt_ref_embeds")[0])  # the official driving prompt by default
    assert inputs.x0.shape[2] == 1 + drv.latents.shape[2] and payload.dropped_frames == 1
    assert loader.encoder_calls > 0
    calls = loader.encoder_calls
    again = WanAnimate2DataLoader(config, model)
    again.prepare()
    again.load_batch([0], 1)
    assert again.encoder_calls == 0 and calls  # a warm cache runs no encoder, the driving stream's included


def test_a_sample_is_diffusers_animate_2_pipeline_for_the_same_files_and_noise(tiny_model, tmp_path, monkeypatch):
    """diffusers' whole modular Animate-2 pipeline (its preprocessing, encoders, guider, scheduler, flex block mask and
    decoder) against our sample of the same reference image and driving video, fp32, same seed."""
    import diffusers.models.transformers.transformer_wan_animate_2 as animate2
    from diffusers import FlowMatchEulerDiscreteScheduler, WanAnimate2Transformer3DModel
    from diffusers.guiders import ClassifierFreeGuidance
    from diffusers.modular_pipelines.wan_animate_2.modular_blocks_wan_animate_2 import WanAnimate2Blocks

    from modules.config.sample_config import SampleConfig
    from modules.dataLoader.video_io import read_image, read_video_frames
    from modules.modelSampler.animate2_inputs import sample_animate2

    original = animate2.create_block_mask  # flex uncompiled on the CPU
    monkeypatch.setattr(animate2, "create_block_mask", lambda *a, **k: original(*a, **{**k, "_compile": False}))
    data = triplets(tmp_path / "data")
    folder = tiny_model("animate_2")
    model = WanModelLoader().load(str(folder), torch.device("cpu"))
    pipe = WanAnimate2Blocks().init_pipeline()
    pipe.update_components(transformer=WanAnimate2Transformer3DModel.from_pretrained(folder / "transformer"),
                           vae=model.vae, text_encoder=model.text_encoder, tokenizer=model.tokenizer,
                           image_encoder=model.image_encoder, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
                           guider=ClassifierFreeGuidance(guidance_scale=3.0))
    frames, fps = read_video_frames(data / "001_driving.mp4")
    assert (fps, model.variant.fps) == (16, 24)  # resampled alike: diffusers' frame indices, our timestamps
    theirs = pipe(image=Image.open(data / "001_reference.png").convert("RGB"),
                  driving_video=[Image.fromarray(f) for f in frames[:6]], driving_video_fps=fps,  # 9 at 24 fps
                  prompt="a red square", negative_prompt="blurry", height=SIZE, width=SIZE,
                  segment_frame_length=FRAMES, fps=model.variant.fps,
                  num_inference_steps=3, generator=torch.Generator().manual_seed(3), output="videos",
                  output_type="np")[0]
    sample = SampleConfig.from_dict({"prompt": "a red square", "negative_prompt": "blurry", "frames": FRAMES,
                                     "height": SIZE, "width": SIZE, "steps": 3, "seed": 3, "cfg_scale": 3.0,
                                     "sampler": "diffusers_euler", "shift": 3.0,
                                     "image": str(data / "001_reference.png"),
                                     "driving_video": str(data / "001_driving.mp4")}, "sample")
    ours = sample_animate2(model, sample, read_image(str(data / "001_reference.png")))
    assert ours.shape == theirs.shape == (FRAMES, SIZE, SIZE, 3) and ours.std() > 0.05
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)


def make_trainer(tiny_model, data, work, **overrides) -> GenericTrainer:
    return GenericTrainer(_config(tiny_model, data, work, epochs=2, learning_rate=1e-2, output_dtype="FLOAT32",
                                  **overrides))


def test_an_animate_2_lora_trains_saves_and_resumes_bit_identically(tiny_model, tmp_path):
    from safetensors import safe_open

    data = triplets(tmp_path / "data")
    (data / "002_driving.mp4").write_bytes((data / "001_driving.mp4").read_bytes())  # 002 trains too now
    (data / "002_reference.png").write_bytes((data / "001_reference.png").read_bytes())
    sample = {"prompt": "a red square", "frames": FRAMES, "height": SIZE, "width": SIZE, "steps": 2,
              "image": str(data / "001_reference.png"), "driving_video": str(data / "001_driving.mp4")}
    trainer = trains_and_resumes_exactly(lambda name, **o: make_trainer(
        tiny_model, data, tmp_path / name, **({"samples": [sample], "sample_at_end": True} if name == "full" else {}),
        **o))
    assert len(trainer.data.items) == 2 and trainer.progress.global_step == 4
    videos = list((tmp_path / "full" / "workspace").rglob("*.mp4"))  # the run's sample, through the Animate-2 loop
    assert len(videos) == 1 and videos[0].with_suffix(".png").is_file()
    assert sorted({key.split(".lora")[0] for key in trainer.setup.trainable_state()}) == [
        f"transformer.blocks.{b}.self_attn.{m}" for b in (0, 1) for m in ("to_k", "to_q", "to_v")]
    with safe_open(str(tmp_path / "full" / "output" / "lora.safetensors"), framework="pt") as f:
        lora = {key: f.get_tensor(key) for key in f.keys()}
    # ComfyUI's LoRA loader, 0 keys left unloaded: its WanAnimate2Model (comfy/ldm/wan/model_animate2.py) keeps
    # the Wan 2.1 I2V model's parameter names (its block and self-attention subclass WanAttentionBlock and
    # WanSelfAttention, adding none), whose state dict comfyui_wan re-states
    config = dict(model_type="i2v", num_layers=2)
    modules = {key.removesuffix(".weight") for key in comfyui_wan.model_keys(config) if key.endswith(".weight")}
    assert "diffusion_model.blocks.0.self_attn.q.lora_down.weight" in lora and len(lora) == 6 * 3
    assert comfy_loaded_keys(lora, modules) == set(lora)
    # and back into ours (sample.py --lora): its header names Animate-2, so ComfyUI's names reach Animate-2's modules
    from safetensors.torch import save_file

    from modules.modelLoader.lora_inference import attach_lora_for_inference

    save_file(lora, tmp_path / "no_header.safetensors")  # a ComfyUI-named file from elsewhere: no header
    base = WanModelLoader().load(str(tiny_model("animate_2")), torch.device("cpu"))
    before = {key: value.clone() for key, value in base.transformer.state_dict().items()}
    attach_lora_for_inference(base, tmp_path / "full" / "output" / "lora.safetensors")
    merged = {k: v.clone() for k, v in base.transformer.state_dict().items()}
    changed = sorted(k for k, v in merged.items() if not torch.equal(v, before[k]))
    assert changed == [f"blocks.{b}.self_attn.{m}.weight" for b in (0, 1) for m in ("to_k", "to_q", "to_v")]
    base.transformer.load_state_dict(before)
    attach_lora_for_inference(base, tmp_path / "no_header.safetensors")
    assert all(torch.equal(v, merged[k]) for k, v in base.transformer.state_dict().items())
    continued = make_trainer(tiny_model, data, tmp_path / "continued",
                             lora_weight_path=str(tmp_path / "no_header.safetensors"))
    continued.start()  # lora_weight_path: the same layers, ComfyUI's names without a header
    state = continued.setup.trainable_state()
    assert torch.equal(state["transformer.blocks.1.self_attn.to_v.lora_A.default.weight"],
                       lora["diffusion_model.blocks.1.self_attn.v.lora_down.weight"])


def test_start_up_refuses_what_an_animate_2_run_cannot_use_in_one_line(tiny_model, tmp_path):
    from modules.trainer.preflight import check_before_loading
    from modules.util.errors import UserError

    data = triplets(tmp_path / "data")
    dataset = tmp_path / "dataset.json"
    dataset.write_text("{}", encoding="utf-8")
    cases = [({"dataset_config": str(dataset)}, tiny_model("animate_2"), "config key 'dataset_config' is set"),
             ({"checkpointing": {"policy": "KEEP_ATTENTION"}}, tiny_model("animate_2"),
              "config key 'checkpointing.policy' KEEP_ATTENTION does not apply to a Wan2.2-Animate-2 base"),
             ({"samples": [{"prompt": "a", "image": str(data / "001_reference.png")}]}, tiny_model("animate_2"),
              r"config key 'samples\[0\].driving_video': an Animate-2 model animates a reference image with a "
              "driving video"),
             ({"samples": [{"prompt": "a", "driving_video": str(data / "001_driving.mp4")}]}, tiny_model("t2v"),
              r"'samples\[0\].driving_video': only Animate-2 models follow a driving video \(this is t2v\)")]
    for overrides, base, message in cases:
        config = TrainConfig.from_dict({**train_config_dict(base, data, tmp_path), **overrides})
        with pytest.raises(UserError, match=message) as error:
            check_before_loading(config)
        assert "\n" not in str(error.value)
