"""The sampler's named choices, shared by the typed config and the scripts' argument parsers. Plain strings with no
imports, so `sample.py --help` and `evaluate.py --help` answer without importing torch."""
from __future__ import annotations

# ComfyUI's KSampler samplers and schedulers, computed as ComfyUI computes them (modules/modelSampler/comfy_*.py)
COMFY_SAMPLERS = ("uni_pc", "euler", "dpmpp_2m")
SAMPLE_SCHEDULERS = ("simple", "normal", "sgm_uniform", "beta")
# diffusers' solvers with their own sigma schedules (modules/modelSampler/schedulers.py): the model folder's
# scheduler, UniPC, flow-matching Euler, DPM++ 2M and UniPC with the flow sigmas SkyReels-A2 ran on
DIFFUSERS_SAMPLERS = ("diffusers_default", "diffusers_unipc", "diffusers_unipc_a2", "diffusers_euler",
                      "diffusers_dpmpp")
SAMPLE_SAMPLERS = COMFY_SAMPLERS + DIFFUSERS_SAMPLERS
# the `scheduler` values of config version 2, which named the diffusers solvers (loading.py migrates them)
OLD_SCHEDULERS = ("default", "unipc", "unipc_a2", "euler", "dpmpp")
E2V_POSTERIORS = ("mode", "sample")
# E2V reference layouts (docs/e2v.md): SkyReels-A2's (CLIP tokens + leading VAE reference frames in the condition
# channels) or SkyReels-V3's reference-to-video (each reference one VAE latent frame appended after the video's)
REFERENCE_LAYOUTS = ("a2", "skyreels_v3")
# Wan's own negative prompt (Wan2.1 wan/configs/shared_config.py, sample_neg_prompt), which ComfyUI's Wan templates use
WAN_NEGATIVE_PROMPT = ("色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，"
                       "丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，"
                       "静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走")
