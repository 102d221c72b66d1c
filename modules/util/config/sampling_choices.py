"""The sampler's named choices, shared by the typed config and the scripts' argument parsers. Plain strings with no
imports, so `sample.py --help` and `evaluate.py --help` answer without importing torch."""
from __future__ import annotations

SAMPLE_SCHEDULERS = ("default", "unipc", "unipc_a2", "euler", "dpmpp")  # modules/modelSampler/schedulers.py builds them
E2V_POSTERIORS = ("mode", "sample")
# E2V reference layouts (docs/e2v.md): SkyReels-A2's (CLIP tokens + leading VAE reference frames in the condition
# channels) or SkyReels-V3's reference-to-video (each reference one VAE latent frame appended after the video's)
REFERENCE_LAYOUTS = ("a2", "skyreels_v3")
