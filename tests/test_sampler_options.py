"""Sampler options SkyReels-A2 users need (issue #11 item 6): --scheduler, --shift, --e2v-posterior, the same keys
in `samples[]`, A2's infer.py recipe reproduced draw for draw, and sample images read exactly as training reads
them (EXIF orientation, transparency)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import (
    DDIMScheduler,
    DPMSolverMultistepScheduler,
    FlowMatchEulerDiscreteScheduler,
    UniPCMultistepScheduler,
)
from diffusers.utils.torch_utils import randn_tensor
from diffusers.video_processor import VideoProcessor
from PIL import Image

from modules.config.train_config import SampleConfig, TrainConfig
from modules.dataLoader.e2v.preprocess import preprocess
from modules.dataLoader.e2v.sampling_options import E2VSamplingOptions, a2_layout
from modules.dataLoader.video_io import composite_alpha, read_image
from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader
from modules.model.WanModel import WanModel
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.e2v_sampling import build_conditioning, initial_latents, sample_latents
from modules.modelSampler.schedulers import build_scheduler
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.script_runner import run_script

SIZE, FRAMES = 32, 17  # 3 elements (P = 9 frames, K = 3 latents) leave 17 − 12 = 5 generated frames
A2 = {"sampler": "diffusers_unipc", "shift": 8.0, "e2v_posterior": "sample"}


@pytest.fixture(scope="module")
def i2v(tiny_model) -> WanModel:
    return WanModelLoader().load(str(tiny_model("i2v")), torch.device("cpu"))


@pytest.fixture(scope="module")
def elements(tmp_path_factory) -> list[str]:
    """Subject, object and background PNGs of different shapes and colours."""
    folder = tmp_path_factory.mktemp("elements")
    rng = np.random.default_rng(0)
    paths = []
    for name, (h, w) in {"subject": (24, 16), "object": (16, 20), "background": (32, 40)}.items():
        image = np.repeat(np.repeat(rng.integers(0, 256, (h // 4, w // 4, 3), dtype=np.uint8), 4, 0), 4, 1)
        Image.fromarray(image).save(folder / f"{name}.png")
        paths.append(str(folder / f"{name}.png"))
    return paths


def sample(elements: list[str] | None = None, **overrides) -> SampleConfig:
    values = {"prompt": "a red circle", "negative_prompt": "blurry", "elements": elements or [], "frames": FRAMES,
              "height": SIZE, "width": SIZE, "steps": 3, "cfg_scale": 5.0, "seed": 7, **overrides}
    return SampleConfig.from_dict(values, "sample")


def conditioning_for(model: WanModel, elements: list[str]):
    images = [read_image(p) for p in elements]
    return build_conditioning(model, images, a2_layout(len(images)), FRAMES, SIZE, SIZE, True, True)


# --- schedulers -------------------------------------------------------------------------------------------------
def test_unipc_shift_8_is_the_scheduler_a2_infer_builds(i2v):
    ours = build_scheduler(i2v.scheduler, "diffusers_unipc", shift=8.0)
    # SkyReels-A2 infer.py line 47
    a2 = UniPCMultistepScheduler(prediction_type='flow_prediction', use_flow_sigmas=True, num_train_timesteps=1000,
                                 flow_shift=8)
    assert type(ours) is UniPCMultistepScheduler and dict(ours.config) == dict(a2.config)
    for steps in (4, 50):
        ours.set_timesteps(steps)
        a2.set_timesteps(steps)
        assert torch.equal(ours.timesteps, a2.timesteps) and torch.equal(ours.sigmas, a2.sigmas)


def diffusers_033_flow_sigmas(num_inference_steps: int, shift: float, num_train_timesteps: int = 1000) -> np.ndarray:
    """diffusers v0.33.1 (375ec930) UniPCMultistepScheduler.set_timesteps, the `use_flow_sigmas` branch, as written
    there (the same through 0.36.0; SkyReels-A2 ran on it), with the final sigma ("zero") appended as it does:

        alphas = np.linspace(1, 1 / self.config.num_train_timesteps, num_inference_steps + 1)
        sigmas = 1.0 - alphas
        sigmas = np.flip(self.config.flow_shift * sigmas / (1 + (self.config.flow_shift - 1) * sigmas))[:-1].copy()
        timesteps = (sigmas * self.config.num_train_timesteps).copy()
        ...
        sigmas = np.concatenate([sigmas, [sigma_last]]).astype(np.float32)
        self.timesteps = torch.from_numpy(timesteps).to(device=device, dtype=torch.int64)
    """
    alphas = np.linspace(1, 1 / num_train_timesteps, num_inference_steps + 1)
    sigmas = 1.0 - alphas
    sigmas = np.flip(shift * sigmas / (1 + (shift - 1) * sigmas))[:-1].copy()
    return sigmas


@pytest.mark.parametrize("steps", [4, 30, 50])
def test_unipc_a2_has_the_flow_sigmas_of_diffusers_0_33(i2v, steps):
    """A2's frames come from diffusers <= 0.36's UniPC, whose flow sigmas start at 0.99987 (shift 8); diffusers
    >= 0.37 starts at 1 - 1e-6. unipc_a2 gives 0.33's sigmas and timesteps (tools/check_unipc_a2.py compares it with
    diffusers 0.33.1 itself: the same sigmas, timesteps and 50-step trajectory)."""
    a2 = build_scheduler(i2v.scheduler, "diffusers_unipc_a2", shift=8.0)
    a2.set_timesteps(steps)
    expected = diffusers_033_flow_sigmas(steps, 8.0)
    assert isinstance(a2, UniPCMultistepScheduler) and a2.config.flow_shift == 8.0
    assert torch.equal(a2.sigmas, torch.from_numpy(np.concatenate([expected, [0.0]]).astype(np.float32)))
    assert torch.equal(a2.timesteps, torch.from_numpy(expected * 1000).to(torch.int64))
    assert abs(float(a2.sigmas[0]) - 0.999875) < 1e-6
    today = build_scheduler(i2v.scheduler, "diffusers_unipc", shift=8.0)
    today.set_timesteps(steps)
    assert float(today.sigmas[0]) == pytest.approx(1 - 1e-6, abs=1e-7)  # the installed diffusers' own schedule


def test_the_a2_preset_samples_as_a2s_infer_py(i2v):
    """`#wan2.1 i2v 14B e2v skyreels-a2`: SkyReels-A2's infer.py (7c14e2e3) recipe as the preset's sample, and a LoRA
    format A2's pipeline loads on the diffusers of its time (COMFY_LORA's lora_down/.alpha keys fail there:
    diffusers 0.33.1's Wan converter reads lora_A/lora_B only, 0.34.0's leaves .alpha behind and raises)."""
    from modules.config.loading import load_train_config
    from modules.modelSampler.schedulers import A2FlowUniPC
    from modules.util.enum import ModelFormat

    config = load_train_config(preset="#wan2.1 i2v 14B e2v skyreels-a2")
    config.validate("preset")
    (a2,) = config.samples
    # infer.py: negative_prompt, refer_images (3), height 480, width 832, seed 42, num_frames 81, guidance_scale 5.0,
    # num_inference_steps 50, UniPCMultistepScheduler(..., flow_shift=8), the pipeline's latent_dist.sample()
    assert a2.negative_prompt.startswith("Bright tones, overexposed, static, blurred details, subtitles, style, works")
    assert a2.negative_prompt.endswith("three legs, many people in the background, walking backwards")
    assert (len(a2.elements), a2.height, a2.width, a2.seed, a2.frames) == (3, 480, 832, 42, 81)
    assert (a2.cfg_scale, a2.steps, a2.sampler, a2.shift, a2.e2v_posterior) == (5.0, 50, "diffusers_unipc_a2", 8.0, "sample")
    assert type(build_scheduler(i2v.scheduler, a2.sampler, a2.scheduler, a2.shift)) is A2FlowUniPC
    assert config.output_model_format == ModelFormat.DIFFUSERS_LORA
    assert (config.e2v.e2v_type, config.e2v.target_layout, config.resolution) == ("dual", "separate", [480, 832])


def test_unipc_a2_is_a_scheduler_key_and_a_sample_py_choice():
    assert SampleConfig.from_dict({"prompt": "x", "sampler": "diffusers_unipc_a2"}, "sample").sampler == "diffusers_unipc_a2"
    out = run_script("sample.py", "--help")
    assert "unipc_a2" in out.stdout


@pytest.mark.parametrize("name, cls", [("diffusers_unipc", UniPCMultistepScheduler), ("diffusers_euler", FlowMatchEulerDiscreteScheduler),
                                       ("diffusers_dpmpp", DPMSolverMultistepScheduler)])
def test_named_schedulers_are_flow_solvers_with_the_folder_shift_unless_one_is_given(i2v, name, cls):
    own, shifted = build_scheduler(i2v.scheduler, name), build_scheduler(i2v.scheduler, name, shift=8.0)
    key = "shift" if name == "diffusers_euler" else "flow_shift"
    assert type(own) is cls and own.config[key] == i2v.scheduler.config.flow_shift == 3.0 and shifted.config[key] == 8.0
    own.set_timesteps(4)
    shifted.set_timesteps(4)
    assert own.sigmas[-1] == 0 and own.sigmas[0] > 0.99  # from pure noise to the clean sample
    assert (shifted.sigmas[1:-1] > own.sigmas[1:-1]).all()  # a larger shift spends more steps at high noise


def test_default_scheduler_is_a_fresh_copy_of_the_folders_with_the_shift_replaced(i2v):
    own, shifted = build_scheduler(i2v.scheduler, "diffusers_default"), build_scheduler(i2v.scheduler, "diffusers_default", shift=8.0)
    assert own is not i2v.scheduler and dict(own.config) == dict(i2v.scheduler.config)
    assert dict(shifted.config) == {**dict(i2v.scheduler.config), "flow_shift": 8.0}


def test_a_shift_on_a_folder_scheduler_without_one_names_the_fix():
    with pytest.raises(UserError, match="DDIMScheduler has no flow shift; pick a ComfyUI sampler"):
        build_scheduler(DDIMScheduler(), "diffusers_default", shift=8.0)


def test_plain_samples_use_the_chosen_scheduler(tiny_model):
    sampler = WanModelSampler(WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu")))
    plain = {"elements": None, "frames": 5, "steps": 2, "cfg_scale": 1.0}
    default = sampler.generate(sample(**plain, sampler="diffusers_default"), show_progress=False)
    own_shift = sampler.generate(sample(**plain, sampler="diffusers_default", shift=3.0), show_progress=False)
    a2 = sampler.generate(sample(**plain, sampler="diffusers_unipc", shift=8.0), show_progress=False)
    assert np.array_equal(default, own_shift) and not np.array_equal(default, a2)


# --- A2's recipe, draw for draw ---------------------------------------------------------------------------------
def a2_mask(num_frames: int, h: int, w: int) -> torch.Tensor:
    """models/pipeline_a2.py lines 372-391 (3 references, vae_repeat): the first pixel entry 4 + 8 times."""
    mask = torch.ones(1, 1, num_frames, h, w)
    mask[:, :, 1:] = 0
    mask = torch.cat([mask[:, :, 0:1].repeat_interleave(4 + 8, dim=2), mask[:, :, 9:]], dim=2)
    return mask.view(1, -1, 4, h, w).transpose(1, 2)


def a2_start(model: WanModel, references: np.ndarray, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(latents, condition) as SkyReels-A2 builds them: infer.py line 75 seeds one generator on the device;
    models/pipeline_a2.py `prepare_latents` (lines 303-394) draws the noise first (line 315), then encodes
    [ref0, ref1 ×4, ref2 ×4, zeros] in one VAE call (lines 339-343) and samples its posterior with the same
    generator (line 356), normalising with (z − mean) · (1 / std) (lines 319-326, 359)."""
    generator = torch.Generator("cpu").manual_seed(seed)
    vae = model.vae
    t, h, w = (FRAMES - 1) // 4 + 1, SIZE // 8, SIZE // 8
    latents = randn_tensor((1, vae.config.z_dim, t, h, w), generator=generator, device=torch.device("cpu"),
                           dtype=torch.float32)
    processor = VideoProcessor(vae_scale_factor=8)  # infer.py lines 53 and 70
    image_vae = [processor.preprocess(Image.fromarray(r), height=SIZE, width=SIZE).unsqueeze(2) for r in references]
    video_condition = torch.cat([image_vae[0]] + [image_vae[1]] * 4 + [image_vae[2]] * 4
                                + [image_vae[0].new_zeros(1, 3, FRAMES - 9, SIZE, SIZE)], dim=2)
    latent_condition = vae.encode(video_condition).latent_dist.sample(generator)
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    return latents, torch.cat([a2_mask(FRAMES, h, w), (latent_condition - mean) * inv_std], dim=1)


def a2_denoise(model: WanModel, latents: torch.Tensor, condition: torch.Tensor, clip: torch.Tensor,
               settings: SampleConfig) -> torch.Tensor:
    """models/pipeline_a2.py lines 578-634: UniPC of infer.py line 47, CFG on the text with the image
    embeddings in both branches."""
    scheduler = UniPCMultistepScheduler(prediction_type='flow_prediction', use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=8)
    scheduler.set_timesteps(settings.steps)
    prompt, negative = model.encode_prompts([settings.prompt]), model.encode_prompts([settings.negative_prompt])
    for t in scheduler.timesteps:
        latent_model_input = torch.cat([latents, condition], dim=1)
        timestep = t.expand(1)
        noise_pred = model.transformer(latent_model_input, timestep, prompt, encoder_hidden_states_image=clip,
                                       return_dict=False)[0]
        noise_uncond = model.transformer(latent_model_input, timestep, negative, encoder_hidden_states_image=clip,
                                         return_dict=False)[0]
        noise_pred = noise_uncond + settings.cfg_scale * (noise_pred - noise_uncond)
        latents = scheduler.step(noise_pred, t, latents, return_dict=False)[0]
    return latents


def test_a2_recipe_starts_from_a2s_noise_and_condition(i2v, elements):
    conditioning = conditioning_for(i2v, elements)
    noise, condition_z = initial_latents(i2v, conditioning, sample(elements, **A2))
    a2_noise, a2_condition = a2_start(i2v, conditioning.references_preview, seed=7)
    assert torch.equal(noise, a2_noise)
    assert torch.equal(conditioning.mask, a2_condition[:, :4])
    assert (condition_z - a2_condition[:, 4:]).abs().max() < 1e-5


def test_a2_recipe_denoises_step_for_step_like_a2(i2v, elements):
    settings = sample(elements, **A2)
    conditioning = conditioning_for(i2v, elements)
    a2_latents = a2_denoise(i2v, *a2_start(i2v, conditioning.references_preview, settings.seed),
                            conditioning.clip_embeds, settings)
    ours = sample_latents(i2v, conditioning, settings)
    assert (ours - a2_latents).abs().max() < 1e-4
    # the public path (what sample.py and samples during training call) gives A2's decoded frames
    frames, _ = WanModelSampler(i2v).generate_e2v(settings, show_progress=False)
    a2_frames = ((i2v.decode_latents(a2_latents)[0].permute(1, 2, 3, 0).numpy() + 1) * 127.5).round()[12:]
    assert frames.shape == a2_frames.shape and np.abs(frames - a2_frames).max() <= 1


def test_posterior_sample_changes_the_condition_and_is_deterministic_per_seed(i2v, elements):
    conditioning = conditioning_for(i2v, elements)
    noise, mode = initial_latents(i2v, conditioning, sample(elements))
    noise_s, drawn = initial_latents(i2v, conditioning, sample(elements, e2v_posterior="sample"))
    _, again = initial_latents(i2v, conditioning, sample(elements, e2v_posterior="sample"))
    _, other_seed = initial_latents(i2v, conditioning, sample(elements, e2v_posterior="sample", seed=8))
    assert torch.equal(mode, i2v.normalize_latents(conditioning.posterior_mean))
    assert torch.equal(noise, noise_s)  # the noise is drawn first, so the posterior choice leaves it alone
    assert not torch.allclose(drawn, mode) and torch.equal(drawn, again) and not torch.allclose(drawn, other_seed)


# --- config and command line ------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry, key", [({"scheduler": "ddim"}, "samples[0].scheduler"),
                                        ({"sampler": "ddim"}, "samples[0].sampler"),
                                        ({"sampler": "diffusers_unipc", "scheduler": "beta"}, "samples[0].scheduler"),
                                        ({"e2v_posterior": "mean"}, "samples[0].e2v_posterior"),
                                        ({"shift": -1}, "samples[0].shift"),
                                        ({"e2v_posterior": "sample"}, "samples[0].e2v_posterior")])
def test_bad_sample_options_name_the_key(entry, key):
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'")):
        TrainConfig.from_dict({"samples": [{"prompt": "p", **entry}]})


def test_samples_in_the_config_take_a2s_settings():
    config = TrainConfig.from_dict({"samples": [{"prompt": "p", "elements": ["a.png"], **A2}]})
    assert (config.samples[0].sampler, config.samples[0].shift, config.samples[0].e2v_posterior) == \
           ("diffusers_unipc", 8.0, "sample")


def test_cli_takes_a2s_settings(tiny_model, i2v, elements, tmp_path):
    out = tmp_path / "a2.mp4"
    result = run_script(
        "sample.py", "--model", str(tiny_model("i2v")), "--prompt", "a red circle", "--negative-prompt", "blurry",
        "--frames", str(FRAMES), "--height", str(SIZE), "--width", str(SIZE), "--steps", "3", "--seed", "7",
        "--sampler", "diffusers_unipc", "--shift", "8", "--e2v-posterior", "sample", "--elements", *elements,
        "--output", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    strip = np.asarray(Image.open(out.with_suffix(".png")).convert("RGB")).astype(int)
    sampler = WanModelSampler(i2v)
    a2 = sampler.generate_e2v(sample(elements, **A2), show_progress=False)[0]
    default = sampler.generate_e2v(sample(elements), show_progress=False)[0]
    frame = strip[:, -SIZE:]  # the strip ends with the last generated frame
    assert np.abs(frame - a2[-1]).max() <= 1 and np.abs(frame - default[-1]).max() > 8


# --- sample images are read as training reads them --------------------------------------------------------------
def write_exif_jpeg(folder: Path, orientation: int) -> tuple[Path, Path]:
    """(a JPEG with EXIF orientation tag, the same pixels physically rotated into a PNG)."""
    rng = np.random.default_rng(orientation)
    pixels = np.repeat(np.repeat(rng.integers(0, 256, (6, 4, 3), dtype=np.uint8), 4, 0), 4, 1)  # 24×16, portrait
    exif = Image.Exif()
    exif[0x0112] = orientation
    tagged, plain = folder / f"exif{orientation}.jpg", folder / f"plain{orientation}.jpg"
    Image.fromarray(pixels).save(tagged, quality=95, exif=exif)
    Image.fromarray(pixels).save(plain, quality=95)  # the same JPEG data without the tag
    # orientation 6: the stored image is shown turned 90° clockwise; 8: 90° counter-clockwise
    rotated = np.rot90(read_image(plain), k=-1 if orientation == 6 else 1)
    Image.fromarray(np.ascontiguousarray(rotated)).save(folder / f"rotated{orientation}.png")
    return tagged, folder / f"rotated{orientation}.png"


@pytest.mark.parametrize("orientation", [6, 8])
def test_exif_rotated_jpeg_element_equals_the_physically_rotated_image(i2v, elements, tmp_path, orientation):
    tagged, rotated = write_exif_jpeg(tmp_path, orientation)
    sampler = WanModelSampler(i2v)
    settings = {"steps": 2, "cfg_scale": 1.0}
    from_tag = sampler.generate_e2v(sample([str(tagged), *elements[1:]], **settings), show_progress=False)
    from_pixels = sampler.generate_e2v(sample([str(rotated), *elements[1:]], **settings), show_progress=False)
    assert from_tag[1].shape == from_pixels[1].shape and np.array_equal(from_tag[1], from_pixels[1])
    assert np.array_equal(from_tag[0], from_pixels[0])


def test_exif_rotated_jpeg_first_frame_equals_the_physically_rotated_image(i2v, tmp_path):
    tagged, rotated = write_exif_jpeg(tmp_path, 6)
    sampler = WanModelSampler(i2v)
    settings = {"elements": None, "frames": 5, "steps": 2, "cfg_scale": 1.0}
    from_tag = sampler.generate(sample(image=str(tagged), **settings), show_progress=False)
    from_pixels = sampler.generate(sample(image=str(rotated), **settings), show_progress=False)
    unrotated = sampler.generate(sample(image=str(tmp_path / "plain6.jpg"), **settings), show_progress=False)
    assert np.array_equal(from_tag, from_pixels) and not np.array_equal(from_tag, unrotated)


def write_rgba(folder: Path) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(3)
    rgba = np.repeat(np.repeat(rng.integers(0, 256, (6, 4, 4), dtype=np.uint8), 4, 0), 4, 1)
    rgba[:8, :, 3] = 0  # a fully transparent band whose hidden colour must not show
    Image.fromarray(rgba, "RGBA").save(folder / "rgba.png")
    return folder / "rgba.png", rgba


def test_rgba_element_equals_the_image_composited_on_white(i2v, elements, tmp_path):
    path, rgba = write_rgba(tmp_path)
    Image.fromarray(composite_alpha(rgba, (255, 255, 255))).save(tmp_path / "on_white.png")
    sampler = WanModelSampler(i2v)
    settings = {"steps": 2, "cfg_scale": 1.0}
    transparent = sampler.generate_e2v(sample([str(path), *elements[1:]], **settings), show_progress=False)
    flat = sampler.generate_e2v(sample([str(tmp_path / "on_white.png"), *elements[1:]], **settings), show_progress=False)
    assert np.array_equal(transparent[1], flat[1]) and np.array_equal(transparent[0], flat[0])


def test_samples_during_training_composite_on_the_configs_background(tiny_model, i2v, tmp_path):
    data = write_e2v_dataset(tmp_path / "data", count=1, frames=FRAMES, height=SIZE, width=SIZE)
    dataset = tmp_path / "dataset.json"
    dataset.write_text(json.dumps(e2v_dataset_json(data, SIZE, SIZE, FRAMES)))
    config = TrainConfig.from_dict(train_config_dict(tiny_model("i2v"), data, tmp_path, concepts=[],
                                                     dataset_config=str(dataset), transparent_background=[0, 0, 0]))
    options = WanE2VDataLoader(config, i2v).sampling_options()
    path, rgba = write_rgba(tmp_path)
    options.layout = options.layout[:1]
    references = WanModelSampler(i2v, options).generate_e2v(sample([str(path)], steps=1, cfg_scale=1.0),
                                                            show_progress=False)[1]
    assert options.background == (0, 0, 0)
    assert np.array_equal(references[0], preprocess(composite_alpha(rgba, (0, 0, 0)), "pad_white", SIZE, SIZE))


def test_an_unreadable_element_is_one_line_naming_it(i2v, elements, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    with pytest.raises(UserError) as error:
        WanModelSampler(i2v).generate_e2v(sample([str(broken), *elements[1:]]), show_progress=False)
    assert str(broken) in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("layout, frames, needed", [("separate", 9, 13), ("joint", 9, 13), ("separate", 5, 13)])
def test_frames_that_hold_only_the_references_are_one_line_before_any_work(i2v, elements, tmp_path, layout, frames,
                                                                           needed):
    """A2's three elements take 9 reference frames; with nothing left to generate, the sampler once wrote an
    empty video (a ValueError from the writer). Now the frame count is refused before anything is generated."""
    output = tmp_path / "out.mp4"
    sampler = WanModelSampler(i2v, E2VSamplingOptions(target_layout=layout))
    with pytest.raises(UserError) as error:
        sampler.sample_to_file(sample(elements, frames=frames), output, show_progress=False)
    message = str(error.value)
    assert "frames" in message and f"at least {needed}" in message and "\n" not in message, message
    assert not output.exists()
    # "joint" drops the 9 reference frames themselves: the smallest count that holds them leaves needed − 9
    if layout == "joint":
        frames_out, _ = sampler.generate_e2v(sample(elements, frames=needed, steps=1, cfg_scale=1.0), False)
        assert len(frames_out) == needed - 9
