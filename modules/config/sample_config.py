"""The sample settings: one preview video (`SampleConfig`, in `samples` and the samples file) and the settings every
training sample takes instead of its own (`SampleOverrides`)."""
from __future__ import annotations

import dataclasses

from modules.config.limits import (
    MAX_GUIDANCE_SCALE,
    MAX_SHIFT,
    check_at_most,
    check_frame_count,
    check_resolution_side,
)
from modules.config.sampling_choices import (
    DIFFUSERS_SAMPLERS,
    E2V_POSTERIORS,
    SAMPLE_SAMPLERS,
    SAMPLE_SCHEDULERS,
    WAN_NEGATIVE_PROMPT,
)
from modules.util.base_config import BaseConfig, ConfigError, option


def check_utf8(key: str, text: str) -> None:
    """Text that cannot be written as UTF-8 (a lone surrogate such as "\\udc80", which JSON's escapes allow) is refused
    now, naming the key, not when a sample's files are written at the end of the run."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(f"config key '{key}' holds {text[e.start]!r} at character {e.start}, a lone surrogate that "
                          "cannot be written as UTF-8: remove it or write the character it stands for") from None


@dataclasses.dataclass
class SampleConfig(BaseConfig):
    prompt: str = option("", "Text prompt.")
    negative_prompt: str = option(WAN_NEGATIVE_PROMPT, "Negative prompt (used when cfg_scale > 1); the default is Wan's own (Chinese), which ComfyUI's Wan templates use.")
    image: str = option("", "First-frame image for image-to-video models; on Animate-2 models the reference image that driving_video animates.")
    last_image: str = option("", "Last-frame image (first-last-frame: FLF2V models, or I2V models trained with last_frame_condition).")
    elements: list[str] = option([], "E2V reference images in layout order (subject, object, background); on a VACE model its reference images.")
    control_video: str = option("", "VACE models: the control video the sample follows (depth, pose, edges, ... or a source video to inpaint with control_mask).")
    control_mask: str = option("", "VACE models: a mask video (or image for every frame), white where the model generates, black where the control video is kept.")
    driving_video: str = option("", "Animate-2 models: the driving video whose motion the image follows, read at the model's fps from its first frame (at least `frames` frames), cover-cropped to the sample's size like the reference.")
    vace_scale: float = option(1.0, "VACE models: the weight of the control hints (diffusers' conditioning_scale).")
    frames: int = option(17, "Frame count (4k+1). With elements (E2V) it counts the reference frames too, which the video drops: 4K frames with target_layout separate (A2's three elements: K = 3, so 17 give 5 video frames and 81 give 69; at least 13), the P reference frames with joint.")
    height: int = option(256, "Height in pixels (multiple of 16).")
    width: int = option(256, "Width in pixels (multiple of 16).")
    steps: int = option(20, "Denoising steps.")
    cfg_scale: float = option(5.0, "Classifier-free guidance scale on the text (1 = off).")
    image_guidance_scale: float = option(1.0, "E2V in SkyReels-V3's layout (e2v.reference_layout skyreels_v3): the image guidance scale, against the same model with all-zero references (1 = off: plain text guidance; SkyReels-V3's pipeline default is 5 beside a text scale of 7.5).")
    seed: int = option(42, "Noise seed.")
    sampler: str = option("uni_pc", "uni_pc | euler | dpmpp_2m: ComfyUI's KSampler samplers, computed as ComfyUI computes them (the sample's workflow file reproduces it in ComfyUI). diffusers_default | diffusers_unipc | diffusers_unipc_a2 | diffusers_euler | diffusers_dpmpp: diffusers' solvers with their own sigmas (the model folder's scheduler, UniPC, flow-matching Euler, DPM++ 2M; unipc_a2: UniPC with the flow sigmas of diffusers <= 0.36, which SkyReels-A2 ran on), which ComfyUI cannot reproduce.")
    scheduler: str = option("simple", "simple | normal | sgm_uniform | beta: ComfyUI's sigma schedule for the ComfyUI samplers (the diffusers_* samplers make their own: leave it simple).")
    shift: float = option(0.0, "Flow shift of the sigma schedule, as ComfyUI's ModelSamplingSD3 node; 0 = ComfyUI's Wan default 8 for the ComfyUI samplers, the model folder's (3 for Wan2.1 480P) for the diffusers_* ones (SkyReels-A2: 8).")
    e2v_posterior: str = option("mode", "mode | sample: E2V samples condition on the VAE posterior's mode, or on a sample drawn with the seed right after the noise (SkyReels-A2's inference).")
    enabled: bool = option(True, "Disabled samples are skipped.")

    def validate(self, path: str) -> None:
        for key in ("prompt", "negative_prompt"):  # written into the sample's sidecar and workflow, as UTF-8
            check_utf8(f"{path}.{key}", getattr(self, key))
        check_frame_count(f"{path}.frames", self.frames)
        for key, values in (("sampler", SAMPLE_SAMPLERS), ("scheduler", SAMPLE_SCHEDULERS),
                            ("e2v_posterior", E2V_POSTERIORS)):
            if getattr(self, key) not in values:
                raise ConfigError(f"config key '{path}.{key}' must be one of {', '.join(values)}, got '{getattr(self, key)}'")
        if self.sampler in DIFFUSERS_SAMPLERS and self.scheduler != "simple":
            raise ConfigError(f"config key '{path}.scheduler' is '{self.scheduler}' but sampler '{self.sampler}' makes "
                              "its own sigmas: set scheduler to simple, or pick uni_pc, euler or dpmpp_2m")
        if self.shift < 0:
            raise ConfigError(f"config key '{path}.shift' must not be negative (0 = the model's own), got {self.shift}")
        check_at_most(f"config key '{path}.shift'", self.shift, MAX_SHIFT, "Wan samples at 3 to 17 (0 = the default)")
        for key in ("cfg_scale", "image_guidance_scale"):
            check_at_most(f"config key '{path}.{key}'", getattr(self, key), MAX_GUIDANCE_SCALE,
                          "Wan samples at CFG 1 to 10")
        if self.e2v_posterior == "sample" and not self.elements:
            raise ConfigError(f"config key '{path}.e2v_posterior' is 'sample' but the sample has no elements: "
                              "the posterior choice applies to E2V samples only; set it to 'mode' or add elements")
        if self.steps < 1:
            raise ConfigError(f"config key '{path}.steps' must be at least 1, got {self.steps}")
        if self.vace_scale < 0:
            raise ConfigError(f"config key '{path}.vace_scale' must not be negative, got {self.vace_scale}")
        if self.last_image and not self.image:
            raise ConfigError(f"config key '{path}.last_image' needs '{path}.image' (the first frame)")
        if self.control_mask and not self.control_video:
            raise ConfigError(f"config key '{path}.control_mask' needs '{path}.control_video' (the video it masks)")
        for key in ("cfg_scale", "image_guidance_scale"):
            if getattr(self, key) < 0:
                raise ConfigError(f"config key '{path}.{key}' must not be negative, got {getattr(self, key)}")
        if self.image_guidance_scale != 1 and not self.elements:
            raise ConfigError(f"config key '{path}.image_guidance_scale' is {self.image_guidance_scale} but the sample "
                              "has no elements: image guidance applies to E2V samples (SkyReels-V3 layout); set it to 1 "
                              "or add elements")
        for key in ("height", "width"):
            if getattr(self, key) < 16 or getattr(self, key) % 16:
                raise ConfigError(f"config key '{path}.{key}' must be a positive multiple of 16, got {getattr(self, key)}")
            check_resolution_side(f"config key '{path}.{key}'", getattr(self, key))


@dataclasses.dataclass
class SampleOverrides(BaseConfig):
    """Sampler settings every training sample takes instead of its own (null: the sample's). A base distilled for
    few steps (a Lightning LoRA in base_loras) samples as users run it: e.g. 4 steps, CFG 1, shift 5, euler."""

    steps: int | None = option(None, "Denoising steps of every sample (distilled bases: 4-8; null = each sample's).")
    cfg_scale: float | None = option(None, "CFG of every sample; 1 = no guidance and no negative pass, what CFG-distilled bases need (null = each sample's).")
    shift: float | None = option(None, "Flow shift of every sample's schedule; 0 = the model folder's (null = each sample's).")
    sampler: str | None = option(None, "uni_pc | euler | dpmpp_2m | diffusers_* for every sample (null = each sample's).")
    scheduler: str | None = option(None, "simple | normal | sgm_uniform | beta for every sample (null = each sample's).")

    def apply(self, sample: SampleConfig) -> SampleConfig:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}
        return dataclasses.replace(sample, **values) if values else sample

    def validate(self, path: str) -> None:
        self.apply(SampleConfig()).validate(path)  # the sample's own checks, naming sample_overrides.<key>
