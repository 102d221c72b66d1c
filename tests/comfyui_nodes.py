"""ComfyUI's node inputs, re-stated for tests from ComfyUI a125cd84's source (the repo does not need ComfyUI;
tools/check_comfy_workflow.py compares this table with a checkout's source).

class_type -> (required inputs, optional inputs, output types). An input is its type: a link type in capitals
(MODEL, CLIP, ...), a tuple of allowed values (a combo), or INT / FLOAT / STRING / BOOLEAN. Files (unet_name,
lora_name, image, ...) are combos of the user's files: "FILE".
"""
from __future__ import annotations

from typing import Any

from modules.config.sampling_choices import COMFY_SAMPLERS, SAMPLE_SCHEDULERS

# comfy/samplers.py KSampler.SAMPLERS and SCHEDULERS (ours are a subset; the full lists are longer)
SAMPLERS = COMFY_SAMPLERS + ("uni_pc_bh2", "dpmpp_2m_sde", "ddim", "lcm")
SCHEDULERS = SAMPLE_SCHEDULERS + ("karras", "exponential", "ddim_uniform", "linear_quadratic", "kl_optimal")
_WAN_SIZE = {"positive": "CONDITIONING", "negative": "CONDITIONING", "vae": "VAE", "width": "INT", "height": "INT",
             "length": "INT", "batch_size": "INT"}
_SAMPLE = {"model": "MODEL", "steps": "INT", "cfg": "FLOAT", "sampler_name": SAMPLERS, "scheduler": SCHEDULERS,
           "positive": "CONDITIONING", "negative": "CONDITIONING", "latent_image": "LATENT"}

NODES: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]] = {
    # nodes.py
    "UNETLoader": ({"unet_name": "FILE", "weight_dtype": ("default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2")},
                   {}, ("MODEL",)),
    "CLIPLoader": ({"clip_name": "FILE", "type": ("stable_diffusion", "sd3", "wan", "mochi", "ltxv")},
                   {"device": ("default", "cpu")}, ("CLIP",)),
    "VAELoader": ({"vae_name": "FILE"}, {}, ("VAE",)),
    "LoraLoaderModelOnly": ({"model": "MODEL", "lora_name": "FILE", "strength_model": "FLOAT"}, {}, ("MODEL",)),
    "CLIPTextEncode": ({"text": "STRING", "clip": "CLIP"}, {}, ("CONDITIONING",)),
    "CLIPVisionLoader": ({"clip_name": "FILE"}, {}, ("CLIP_VISION",)),
    "CLIPVisionEncode": ({"clip_vision": "CLIP_VISION", "image": "IMAGE", "crop": ("center", "none")}, {},
                         ("CLIP_VISION_OUTPUT",)),
    "LoadImage": ({"image": "FILE"}, {}, ("IMAGE", "MASK")),
    "KSampler": ({**_SAMPLE, "seed": "INT", "denoise": "FLOAT"}, {}, ("LATENT",)),
    "KSamplerAdvanced": ({**_SAMPLE, "add_noise": ("enable", "disable"), "noise_seed": "INT", "start_at_step": "INT",
                          "end_at_step": "INT", "return_with_leftover_noise": ("disable", "enable")}, {}, ("LATENT",)),
    "VAEDecode": ({"samples": "LATENT", "vae": "VAE"}, {}, ("IMAGE",)),
    # comfy_extras/nodes_model_advanced.py, nodes_hunyuan.py, nodes_images.py, nodes_video.py
    "ModelSamplingSD3": ({"model": "MODEL", "shift": "FLOAT"}, {}, ("MODEL",)),
    "EmptyHunyuanLatentVideo": ({"width": "INT", "height": "INT", "length": "INT", "batch_size": "INT"}, {},
                                ("LATENT",)),
    "SaveAnimatedWEBP": ({"images": "IMAGE", "filename_prefix": "STRING", "fps": "FLOAT", "lossless": "BOOLEAN",
                          "quality": "INT", "method": ("default", "fastest", "slowest")}, {}, ()),
    "LoadVideo": ({"file": "FILE"}, {}, ("VIDEO",)),
    "GetVideoComponents": ({"video": "VIDEO"}, {}, ("IMAGE", "AUDIO", "FLOAT")),
    # comfy_extras/nodes_wan.py
    "WanImageToVideo": (_WAN_SIZE, {"clip_vision_output": "CLIP_VISION_OUTPUT", "start_image": "IMAGE"},
                        ("CONDITIONING", "CONDITIONING", "LATENT")),
    "WanFirstLastFrameToVideo": (_WAN_SIZE, {"clip_vision_start_image": "CLIP_VISION_OUTPUT",
                                             "clip_vision_end_image": "CLIP_VISION_OUTPUT", "start_image": "IMAGE",
                                             "end_image": "IMAGE"}, ("CONDITIONING", "CONDITIONING", "LATENT")),
    "WanVaceToVideo": ({**_WAN_SIZE, "strength": "FLOAT"},
                       {"control_video": "IMAGE", "control_masks": "MASK", "reference_image": "IMAGE"},
                       ("CONDITIONING", "CONDITIONING", "LATENT", "INT")),
    "Wan22ImageToVideoLatent": ({"vae": "VAE", "width": "INT", "height": "INT", "length": "INT", "batch_size": "INT"},
                                {"start_image": "IMAGE"}, ("LATENT",)),
    "TrimVideoLatent": ({"samples": "LATENT", "trim_amount": "INT"}, {}, ("LATENT",)),
}
_PLAIN = {"INT": int, "FLOAT": (int, float), "STRING": str, "BOOLEAN": bool, "FILE": str}


def problems(workflow: dict[str, Any]) -> list[str]:
    """Everything ComfyUI's prompt validation would refuse in an API-format workflow (empty: it is valid)."""
    found = []
    for node_id, node in workflow.items():
        kind = node.get("class_type")
        if kind not in NODES:
            found.append(f"{node_id}: unknown node {kind}")
            continue
        required, optional, _ = NODES[kind]
        inputs = node.get("inputs", {})
        found += [f"{node_id} {kind}: missing input {name}" for name in required if name not in inputs]
        for name, value in inputs.items():
            expected = required.get(name, optional.get(name))
            if expected is None:
                found.append(f"{node_id} {kind}: no input {name}")
            elif isinstance(value, list):  # a link [node id, output index]
                source = workflow.get(value[0]) if len(value) == 2 else None
                outputs = NODES.get(source["class_type"], ({}, {}, ()))[2] if source else ()
                if not (isinstance(expected, str) and value[1] < len(outputs) and outputs[value[1]] == expected):
                    found.append(f"{node_id} {kind}: input {name} links {value}, not a {expected}")
            elif isinstance(expected, tuple):
                if value not in expected:
                    found.append(f"{node_id} {kind}: {name} {value!r} is none of {expected}")
            elif expected not in _PLAIN or not isinstance(value, _PLAIN[expected]) or \
                    (expected != "BOOLEAN" and isinstance(value, bool)):
                found.append(f"{node_id} {kind}: {name} {value!r} is not a {expected}")
    return found
