"""A ComfyUI workflow (API format: node id -> {class_type, inputs}) that renders the same sample in ComfyUI.

Node and input names are ComfyUI's (a125cd84): nodes.py (UNETLoader, CLIPLoader, VAELoader, LoraLoaderModelOnly,
CLIPTextEncode, CLIPVisionLoader, CLIPVisionEncode, LoadImage, KSampler, KSamplerAdvanced, VAEDecode),
comfy_extras/nodes_model_advanced.py (ModelSamplingSD3), nodes_hunyuan.py (EmptyHunyuanLatentVideo), nodes_wan.py
(WanImageToVideo, WanFirstLastFrameToVideo, Wan22ImageToVideoLatent, WanVaceToVideo, TrimVideoLatent),
nodes_video.py (LoadVideo, GetVideoComponents) and nodes_images.py (SaveAnimatedWEBP, lossless). A link is
[node id, output index]. Two-expert models get a model chain per expert and two KSamplerAdvanced split at the step
our sampler switches experts (comfy_scheduler.split_step), which is how ComfyUI's scheduler runs it too.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from modules.config.sample_config import SampleConfig
from modules.config.sampling_choices import COMFY_SAMPLERS
from modules.model.WanVariant import WanVariant
from modules.modelSampler.comfy_scheduler import split_step
from modules.modelSampler.comfy_sigmas import COMFY_WAN_SHIFT, ksampler_sigmas
from modules.util.atomic import atomic_path

WORKFLOW_SUFFIX = ".workflow.json"


@dataclasses.dataclass(frozen=True)
class WorkflowModels:
    """The files the workflow's loaders name (ComfyUI's models/ folders; images and videos: its input/ folder)."""
    unets: tuple[str, ...]  # diffusion_models/: one per expert, the high-noise one first
    loras: tuple[tuple[tuple[str, float], ...], ...]  # loras/: per expert, (file, strength) in the order applied
    text_encoder: str = "umt5_xxl_fp16.safetensors"
    vae: str = "wan_2.1_vae.safetensors"
    clip_vision: str = "clip_vision_h.safetensors"


def unsupported(variant: WanVariant, sample: SampleConfig) -> str | None:
    """Why ComfyUI's nodes cannot render this sample as we do (None: they can)."""
    if variant.name == "animate_2":
        return "Animate-2 (the ComfyUI code checked here has no Animate-2 nodes)"
    if sample.sampler not in COMFY_SAMPLERS:
        return f"sampler {sample.sampler} is diffusers' (ComfyUI has uni_pc, euler and dpmpp_2m as ours)"
    if variant.vace_layers:
        if sample.control_mask:
            return "a VACE control_mask (WanVaceToVideo takes a MASK, not a mask video)"
        if len(sample.elements) > 1:
            return "more than one VACE reference image (WanVaceToVideo takes one)"
    elif sample.elements:
        return "E2V reference elements (ComfyUI has no node for the A2 / SkyReels-V3 reference layouts)"
    if variant.fps_embedding:
        return "SkyReels-V2's fps embedding"
    if sample.cfg_scale < 1:
        return "cfg_scale below 1 (ComfyUI guides there; our pipelines do not)"
    return None


class _Graph:
    def __init__(self):
        self.nodes: dict[str, dict[str, Any]] = {}

    def add(self, class_type: str, **inputs) -> str:
        node_id = str(len(self.nodes) + 1)
        self.nodes[node_id] = {"class_type": class_type, "inputs": inputs}
        return node_id


def _image(graph: _Graph, path: str) -> str:
    return graph.add("LoadImage", image=Path(path).name)


def _conditioning(graph: _Graph, variant: WanVariant, sample: SampleConfig, clip: str, vae: str,
                  models: WorkflowModels) -> tuple[list, list, list, str | None]:
    """(positive, negative, latent links, the VACE node whose output 3 is its trim amount)."""
    positive = [graph.add("CLIPTextEncode", text=sample.prompt, clip=[clip, 0]), 0]
    negative = [graph.add("CLIPTextEncode", text=sample.negative_prompt, clip=[clip, 0]), 0]  # unused at cfg 1
    size = dict(width=sample.width, height=sample.height, length=sample.frames, batch_size=1)
    if variant.vace_layers:
        extra = {}
        if sample.control_video:
            video = graph.add("LoadVideo", file=Path(sample.control_video).name)
            extra["control_video"] = [graph.add("GetVideoComponents", video=[video, 0]), 0]
        if sample.elements:
            extra["reference_image"] = [_image(graph, sample.elements[0]), 0]
        node = graph.add("WanVaceToVideo", positive=positive, negative=negative, vae=[vae, 0], **size,
                         strength=sample.vace_scale, **extra)
        return [node, 0], [node, 1], [node, 2], node
    if variant.expand_timesteps:  # TI2V 5B: a 48-channel latent, the image (if any) its first frame
        extra = {"start_image": [_image(graph, sample.image), 0]} if sample.image else {}
        return positive, negative, [graph.add("Wan22ImageToVideoLatent", vae=[vae, 0], **size, **extra), 0], None
    if not variant.channel_concat_condition:
        return positive, negative, [graph.add("EmptyHunyuanLatentVideo", **size), 0], None
    loader = graph.add("CLIPVisionLoader", clip_name=models.clip_vision) if variant.has_clip_branch else None

    def encoded(path: str) -> tuple[list, list | None]:
        image = [_image(graph, path), 0]
        vision = [graph.add("CLIPVisionEncode", clip_vision=[loader, 0], image=image, crop="center"), 0] if loader else None
        return image, vision

    first, first_clip = encoded(sample.image)
    if sample.last_image:
        last, last_clip = encoded(sample.last_image)
        clips = {"clip_vision_start_image": first_clip, "clip_vision_end_image": last_clip} if loader else {}
        node = graph.add("WanFirstLastFrameToVideo", positive=positive, negative=negative, vae=[vae, 0], **size,
                         start_image=first, end_image=last, **clips)
    else:
        node = graph.add("WanImageToVideo", positive=positive, negative=negative, vae=[vae, 0], **size,
                         start_image=first, **({"clip_vision_output": first_clip} if loader else {}))
    return [node, 0], [node, 1], [node, 2], None


def build_workflow(variant: WanVariant, sample: SampleConfig, models: WorkflowModels, prefix: str) -> dict[str, Any]:
    """The API-format workflow of one sample (call `unsupported` first)."""
    graph = _Graph()
    clip = graph.add("CLIPLoader", clip_name=models.text_encoder, type="wan", device="default")
    vae = graph.add("VAELoader", vae_name=models.vae)
    shift = sample.shift or COMFY_WAN_SHIFT
    experts = []
    for unet, loras in zip(models.unets, models.loras):
        model = [graph.add("UNETLoader", unet_name=unet, weight_dtype="default"), 0]
        for name, strength in loras:
            model = [graph.add("LoraLoaderModelOnly", model=model, lora_name=name, strength_model=strength), 0]
        experts.append([graph.add("ModelSamplingSD3", model=model, shift=shift), 0])
    positive, negative, latent, vace = _conditioning(graph, variant, sample, clip, vae, models)
    common = dict(cfg=sample.cfg_scale, sampler_name=sample.sampler, scheduler=sample.scheduler, positive=positive,
                  negative=negative)
    split = None
    if len(experts) == 2:
        split = split_step(ksampler_sigmas(sample.sampler, sample.scheduler, sample.steps, shift), variant.boundary_sigma)
    if split is None:
        expert = experts[0] if len(experts) == 1 or _all_high(sample, shift, variant) else experts[1]
        samples = [graph.add("KSampler", model=expert, seed=sample.seed, steps=sample.steps, latent_image=latent,
                             denoise=1.0, **common), 0]
    else:
        high = graph.add("KSamplerAdvanced", model=experts[0], add_noise="enable", noise_seed=sample.seed,
                         steps=sample.steps, latent_image=latent, start_at_step=0, end_at_step=split,
                         return_with_leftover_noise="enable", **common)
        samples = [graph.add("KSamplerAdvanced", model=experts[1], add_noise="disable", noise_seed=sample.seed,
                             steps=sample.steps, latent_image=[high, 0], start_at_step=split, end_at_step=10000,
                             return_with_leftover_noise="disable", **common), 0]
    if vace is not None:  # the reference image's latent frames leave the video
        samples = [graph.add("TrimVideoLatent", samples=samples, trim_amount=[vace, 3]), 0]
    images = graph.add("VAEDecode", samples=samples, vae=[vae, 0])
    graph.add("SaveAnimatedWEBP", images=[images, 0], filename_prefix=prefix, fps=float(variant.fps), lossless=True,
              quality=100, method="default")
    return graph.nodes


def _all_high(sample: SampleConfig, shift: float, variant: WanVariant) -> bool:
    sigmas = ksampler_sigmas(sample.sampler, sample.scheduler, sample.steps, shift)
    return bool(sigmas[0] >= variant.boundary_sigma)


def workflow_path(video: Path) -> Path:
    return video.with_name(video.stem + WORKFLOW_SUFFIX)


def write_workflow(video: Path, workflow: dict[str, Any]) -> Path:
    """`<video stem>.workflow.json` beside the video, atomically."""
    path = workflow_path(video)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(workflow, indent=1, ensure_ascii=False), encoding="utf-8")
    return path


def _name(path: str | Path | None) -> str:
    return Path(path).name if path else ""


def _applies(entry: Any, expert: int, experts: int) -> bool:
    which = getattr(getattr(entry, "expert", None), "name", "BOTH")
    return experts == 1 or which == "BOTH" or which == ("HIGH", "LOW")[expert]


def workflow_models(variant: WanVariant, base_model_name: str, overrides: dict[str, str], base_loras: list[Any],
                    trained: dict[int, str | Path] | None = None, trained_scale: float = 1.0,
                    trained_unet: str | Path | None = None) -> WorkflowModels:
    """The loaders' files: ComfyUI single files named by the run's `*_override` keys, else the base folder's name
    (and ComfyUI's own file names for the encoders); the LoRA chain of each expert is the run's base LoRAs (not
    those marked training_only; the sample_only ones after the others) then the trained LoRA (`trained`: expert ->
    file), the order sample.py's `--base-lora` gives (it matters to a DoRA, whose norm is of the weight before it);
    `trained_unet`: a fully trained model's file instead of the base."""
    experts = 2 if variant.two_experts else 1
    folder = Path(base_model_name).name or "wan"
    defaults = (f"{folder}.safetensors",) if experts == 1 else \
        (f"{folder}_high_noise.safetensors", f"{folder}_low_noise.safetensors")
    keys = ("transformer_override", "transformer_2_override")
    unets = tuple(_name(trained_unet) or _name(overrides.get(keys[e])) or defaults[e] for e in range(experts))
    chains = []
    for expert in range(experts):
        def entries(sample_only: bool) -> list[tuple[str, float]]:
            return [(_name(e.path), float(e.strength)) for e in base_loras if not getattr(e, "training_only", False)
                    and getattr(e, "sample_only", False) == sample_only and _applies(e, expert, experts)]

        chain = entries(sample_only=False) + entries(sample_only=True)  # as the weights hold them when sampling
        if trained and expert in trained:
            chain.append((_name(trained[expert]), float(trained_scale)))
        chains.append(tuple(chain))
    return WorkflowModels(
        unets=unets, loras=tuple(chains),
        text_encoder=_name(overrides.get("text_encoder_override")) or WorkflowModels.text_encoder,
        vae=_name(overrides.get("vae_override")) or ("wan2.2_vae.safetensors" if variant.vae_z_dim == 48
                                                      else WorkflowModels.vae),
        clip_vision=_name(overrides.get("image_encoder_override")) or WorkflowModels.clip_vision)
