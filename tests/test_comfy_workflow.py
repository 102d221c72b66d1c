"""The ComfyUI workflow beside every sample: ComfyUI's node and input names for each family (checked against
tests/comfyui_nodes.py, re-stated from ComfyUI's source), the sample's numbers in its nodes, the LoRA stack, and the
two-expert split where our sampler switches experts."""
from __future__ import annotations

import dataclasses

import pytest

from modules.config.sample_config import SampleConfig
from modules.config.train_config import BaseLoRAConfig
from modules.model.WanVariant import WanVariant
from modules.modelSampler.comfy_scheduler import ComfyFlowScheduler
from modules.modelSampler.comfy_workflow import WorkflowModels, build_workflow, unsupported, workflow_models
from modules.util.enum import ModelType
from tests.comfyui_nodes import problems

T2V = WanVariant("t2v", ModelType.WAN_2_1, 16, 16, False, False, False, None, False, 16, 8, 4, (1, 2, 2), 16)
VARIANTS = {
    "t2v": T2V,
    "i2v": dataclasses.replace(T2V, name="i2v", in_channels=36, has_clip_branch=True, has_image_encoder=True),
    "flf2v": dataclasses.replace(T2V, name="flf2v", in_channels=36, has_clip_branch=True, paired_image_tokens=True),
    "ti2v": dataclasses.replace(T2V, name="ti2v", model_type=ModelType.WAN_2_2, in_channels=48, out_channels=48,
                                expand_timesteps=True, vae_z_dim=48, fps=24),
    "a14b_i2v": dataclasses.replace(T2V, name="a14b_i2v", model_type=ModelType.WAN_2_2, in_channels=36,
                                    two_experts=True, boundary_ratio=0.9),
    "vace": dataclasses.replace(T2V, name="vace", vace_layers=(0, 2)),
}
IMAGES = {"image": "/data/first.png", "last_image": "/data/last.png", "control_video": "/data/pose.mp4"}
CLASSES = {"t2v": {"EmptyHunyuanLatentVideo", "KSampler"},
           "i2v": {"WanImageToVideo", "CLIPVisionEncode", "LoadImage", "KSampler"},
           "flf2v": {"WanFirstLastFrameToVideo", "CLIPVisionEncode", "KSampler"},
           "ti2v": {"Wan22ImageToVideoLatent", "LoadImage", "KSampler"},
           "a14b_i2v": {"WanImageToVideo", "KSamplerAdvanced"},
           "vace": {"WanVaceToVideo", "LoadVideo", "GetVideoComponents", "TrimVideoLatent", "KSampler"}}


def sample_for(name: str, **values) -> SampleConfig:
    extra = {"image": IMAGES["image"]} if name in ("i2v", "ti2v", "a14b_i2v", "flf2v") else {}
    extra |= {"last_image": IMAGES["last_image"]} if name == "flf2v" else {}
    extra |= {"control_video": IMAGES["control_video"], "elements": ["/data/ref.png"]} if name == "vace" else {}
    return SampleConfig(prompt="a fox runs", frames=33, height=480, width=832, steps=20, cfg_scale=5.0, seed=123,
                        scheduler="normal", **extra, **values)


def by_class(workflow: dict, class_type: str) -> list[dict]:
    return [node["inputs"] for node in workflow.values() if node["class_type"] == class_type]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_family_gets_a_valid_workflow_with_the_samples_numbers(name):
    variant, sample = VARIANTS[name], sample_for(name)
    stack = [BaseLoRAConfig("/loras/lightning.safetensors", 0.7)]
    trained = {0: "/out/fox_high_noise.safetensors", 1: "/out/fox_low_noise.safetensors"} \
        if variant.two_experts else {0: "/out/fox.safetensors"}
    models = workflow_models(variant, "/models/Wan2.1-T2V-1.3B-Diffusers", {"vae_override": "/c/vae/my_vae.safetensors"},
                             stack, trained, 0.9)
    assert unsupported(variant, sample) is None
    workflow = build_workflow(variant, sample, models, "fox")
    assert problems(workflow) == []
    assert CLASSES[name] <= {node["class_type"] for node in workflow.values()}
    assert by_class(workflow, "CLIPLoader")[0]["type"] == "wan"
    assert by_class(workflow, "VAELoader")[0]["vae_name"] == "my_vae.safetensors"
    assert [s["shift"] for s in by_class(workflow, "ModelSamplingSD3")] == [8.0] * len(models.unets)
    texts = {t["text"] for t in by_class(workflow, "CLIPTextEncode")}
    assert texts == {"a fox runs", sample.negative_prompt} and sample.negative_prompt.startswith("色调艳丽")
    chains = [(lo["lora_name"], lo["strength_model"]) for lo in by_class(workflow, "LoraLoaderModelOnly")]
    expected = [("lightning.safetensors", 0.7), (trained[0].rsplit("/", 1)[1], 0.9)]
    if variant.two_experts:
        expected += [("lightning.safetensors", 0.7), ("fox_low_noise.safetensors", 0.9)]
    assert chains == expected
    samplers = by_class(workflow, "KSampler") + by_class(workflow, "KSamplerAdvanced")
    for node in samplers:
        assert (node["steps"], node["cfg"], node["sampler_name"], node["scheduler"]) == (20, 5.0, "uni_pc", "normal")
        assert node.get("seed", node.get("noise_seed")) == 123
    size = next(n for c in ("EmptyHunyuanLatentVideo", "WanImageToVideo", "WanFirstLastFrameToVideo",
                            "Wan22ImageToVideoLatent", "WanVaceToVideo") for n in by_class(workflow, c))
    assert (size["width"], size["height"], size["length"]) == (832, 480, 33)
    assert by_class(workflow, "SaveAnimatedWEBP")[0]["fps"] == float(variant.fps)


def test_two_experts_split_where_our_sampler_switches_experts():
    variant, sample = VARIANTS["a14b_i2v"], sample_for("a14b_i2v")
    workflow = build_workflow(variant, sample, workflow_models(variant, "/m/A14B", {}, []), "x")
    high, low = by_class(workflow, "KSamplerAdvanced")
    ours = ComfyFlowScheduler("uni_pc", "normal", 8.0, split_sigma=variant.boundary_sigma)
    ours.set_timesteps(20)
    switch = next(i for i, t in enumerate(ours.timesteps) if not bool(t >= variant.boundary_sigma * 1000))
    assert (high["end_at_step"], low["start_at_step"]) == (switch, switch) and 0 < switch < 20
    assert (high["add_noise"], high["return_with_leftover_noise"]) == ("enable", "enable")
    assert (low["add_noise"], low["return_with_leftover_noise"]) == ("disable", "disable")
    unets = [u["unet_name"] for u in by_class(workflow, "UNETLoader")]
    assert unets == ["A14B_high_noise.safetensors", "A14B_low_noise.safetensors"]


def test_what_comfyui_cannot_render_gets_no_workflow_and_says_why():
    assert "diffusers" in unsupported(T2V, SampleConfig(prompt="x", sampler="diffusers_unipc"))
    assert "E2V" in unsupported(VARIANTS["i2v"], SampleConfig(prompt="x", image="a.png", elements=["a.png"]))
    vace = VARIANTS["vace"]
    assert "control_mask" in unsupported(vace, SampleConfig(prompt="x", control_video="v.mp4", control_mask="m.mp4"))
    assert "one" in unsupported(vace, SampleConfig(prompt="x", elements=["a.png", "b.png"]))


def test_training_only_base_loras_stay_out_of_the_workflow():
    @dataclasses.dataclass
    class Entry:  # another helper adds base_loras[].training_only; read with getattr
        path: str
        strength: float
        training_only: bool

    models = workflow_models(T2V, "/m/base", {"transformer_override": "/c/wan2.1_t2v_1.3B_fp16.safetensors"},
                             [Entry("/l/a.safetensors", 1.0, True), Entry("/l/b.safetensors", 0.5, False)])
    assert models == WorkflowModels(("wan2.1_t2v_1.3B_fp16.safetensors",), ((("b.safetensors", 0.5),),))
