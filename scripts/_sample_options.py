"""Command-line options that scripts/sample.py and scripts/evaluate.py share: one definition and help text each."""
from __future__ import annotations

import argparse


def add_e2v_pathway_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--e2v-type", default="auto", choices=["auto", "dual", "vae", "clip"],
                        help="E2V models: which conditioning pathways the elements take (CLIP, VAE or both); auto: "
                             "what the model has")
    parser.add_argument("--target-layout", default="separate", choices=["separate", "joint"],
                        help="E2V models (a2 reference layout): the reference frames before the video (separate) or "
                             "within it (joint), as the model was trained")


def add_video_options(parser: argparse.ArgumentParser, frames: int) -> None:
    """Size, steps and guidance of the generated videos."""
    parser.add_argument("--frames", type=int, default=frames, help="frame count, 4k+1 (default %(default)s)")
    parser.add_argument("--height", type=int, default=480, help="height in pixels (default %(default)s)")
    parser.add_argument("--width", type=int, default=832, help="width in pixels (default %(default)s)")
    parser.add_argument("--steps", type=int, default=30, help="sampling steps (default %(default)s)")
    parser.add_argument("--cfg-scale", type=float, default=5.0,
                        help="classifier-free guidance scale; 1 = no guidance (default %(default)s)")


def add_schedule_and_device_options(parser: argparse.ArgumentParser) -> None:
    from modules.config.sampling_choices import SAMPLE_SAMPLERS, SAMPLE_SCHEDULERS

    parser.add_argument("--sampler", default="uni_pc", choices=SAMPLE_SAMPLERS,
                        help="ComfyUI's uni_pc, euler or dpmpp_2m as ComfyUI computes them (a ComfyUI workflow is "
                             "written beside the video), or a diffusers solver with its own sigmas (diffusers_*; "
                             "diffusers_unipc_a2: UniPC with the flow sigmas SkyReels-A2 ran on) (default %(default)s)")
    parser.add_argument("--scheduler", default="simple", choices=SAMPLE_SCHEDULERS,
                        help="ComfyUI's sigma schedule of the ComfyUI samplers (default %(default)s)")
    parser.add_argument("--shift", type=float, default=0.0,
                        help="flow shift of the sigma schedule (ComfyUI's ModelSamplingSD3); 0 = ComfyUI's Wan "
                             "default 8 (the diffusers_* samplers: the model folder's)")
    parser.add_argument("--device", default="auto",
                        help="auto (a CUDA/ROCm GPU if one is visible, else the CPU), cpu, cuda or cuda:N")
