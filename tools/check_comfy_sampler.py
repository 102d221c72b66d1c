#!/usr/bin/env python
"""Compare our ComfyUI samplers with ComfyUI's own functions (not a CI test: the repo does not need ComfyUI).

    python tools/check_comfy_sampler.py --comfyui PATH/TO/ComfyUI [--scipy SITE_PACKAGES]

Imports ComfyUI's real `comfy/samplers.py` (`calculate_sigmas`, `KSampler.calculate_sigmas`, `KSAMPLER.sample`),
`comfy/k_diffusion/sampling.py` (`sample_euler`, `sample_dpmpp_2m`), `comfy/extra_samplers/uni_pc.py` and
`comfy/model_sampling.py` (`ModelSamplingDiscreteFlow` + `CONST`, as the ModelSamplingSD3 node builds it), with the
modules they import but these functions never call (model management, hooks, torchsde, ...) replaced by stubs, on the
CPU. `--scipy` adds a site-packages that holds scipy (the beta scheduler calls scipy.stats.beta.ppf; the venv has
none). Prints the largest differences: sigmas of every scheduler × shift × step count, and whole runs of every
sampler on a toy velocity model (one KSampler, and the two KSamplerAdvanced of a two-expert model), ComfyUI's loop
against ours (`ComfyFlowScheduler`, called as a diffusers pipeline calls it).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STUBS = ("comfy.model_management", "comfy.sampler_helpers", "comfy.model_patcher", "comfy.patcher_extension",
         "comfy.hooks", "comfy.context_windows", "comfy.utils", "comfy.k_diffusion.deis", "comfy.k_diffusion.sa_solver",
         "comfy.ldm", "comfy.ldm.modules", "comfy.ldm.modules.diffusionmodules",
         "comfy.ldm.modules.diffusionmodules.util", "torchsde")


class _Stub(types.ModuleType):
    def __getattr__(self, name):  # anything the import-time code names: a harmless class
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def load_comfy(root: Path):
    for name in STUBS:
        sys.modules.setdefault(name, _Stub(name))
    sys.path.insert(0, str(root))
    ms = importlib.import_module("comfy.model_sampling")
    return importlib.import_module("comfy.samplers"), ms


def velocity(x: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
    """A toy Wan: a smooth non-linear velocity of the latent and the timestep (1000 σ, float32, as Wan gets it)."""
    t = timestep.reshape(-1, *([1] * (x.ndim - 1))) / 1000
    return torch.tanh(1.3 * x + 0.7) * (0.5 + t) - 0.8 * x * t + 0.1


def comfy_run(samplers, model_sampling, sampler: str, sigmas: torch.Tensor, noise, latent) -> torch.Tensor:
    class Wrap:  # CFGGuider's role: the denoised of the model at (x, σ); CONST.calculate_denoised
        inner_model = types.SimpleNamespace(model_sampling=model_sampling)

        def __call__(self, x, sigma, **_):
            return model_sampling.calculate_denoised(sigma, velocity(x, model_sampling.timestep(sigma).float()), x)

    return samplers.sampler_object(sampler).sample(Wrap(), sigmas.clone(), {}, None, noise, latent, disable_pbar=True)


def our_run(sampler: str, scheduler: str, steps: int, shift: float, noise, split=None) -> torch.Tensor:
    from modules.modelSampler.comfy_scheduler import ComfyFlowScheduler

    ours = ComfyFlowScheduler(sampler, scheduler, shift, split_sigma=split)
    ours.set_timesteps(steps)
    latents = noise
    for t in ours.timesteps:  # as diffusers' WanPipeline calls a scheduler
        latents = ours.step(velocity(latents, t.expand(latents.shape[0])), t, latents, return_dict=False)[0]
    return latents


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--comfyui", required=True, type=Path, help="a ComfyUI checkout (its folder with comfy/)")
    parser.add_argument("--scipy", help="a site-packages folder holding scipy, appended to sys.path")
    args = parser.parse_args()
    if args.scipy:
        sys.path.append(args.scipy)
    from modules.modelSampler.comfy_scheduler import split_step  # diffusers first: it looks torchsde up, unstubbed
    from modules.modelSampler.comfy_sigmas import ksampler_sigmas
    samplers, ms = load_comfy(args.comfyui)

    def model_sampling(shift):
        class ModelSamplingAdvanced(ms.ModelSamplingDiscreteFlow, ms.CONST):  # nodes_model_advanced.ModelSamplingSD3
            pass
        m = ModelSamplingAdvanced()
        m.set_parameters(shift=shift, multiplier=1000)
        return m

    worst, exact = 0.0, 0
    cases = [(name, scheduler, steps, shift) for name in ("uni_pc", "euler", "dpmpp_2m")
             for scheduler in ("simple", "normal", "sgm_uniform", "beta")
             for steps in (1, 2, 3, 4, 8, 20, 50) for shift in (1.0, 3.0, 5.0, 8.0, 12.5)]
    for name, scheduler, steps, shift in cases:
        theirs = samplers.KSampler(types.SimpleNamespace(get_model_object=lambda _: model_sampling(shift)), steps,
                                   "cpu", name, scheduler).sigmas
        mine = ksampler_sigmas(name, scheduler, steps, shift)
        assert theirs.shape == mine.shape, (name, scheduler, steps, shift, theirs, mine)
        worst = max(worst, float((theirs.double() - mine.double()).abs().max()))
        exact += bool(torch.equal(theirs, mine))
    print(f"sigmas: {len(cases)} sampler x scheduler x steps x shift cases, {exact} bit-identical, "
          f"largest difference {worst:.3g}")

    generator = torch.Generator().manual_seed(0)
    noise = torch.randn((1, 16, 3, 6, 5), generator=generator)
    rows = []
    for name in ("uni_pc", "euler", "dpmpp_2m"):
        for scheduler in ("simple", "normal", "sgm_uniform", "beta"):
            for steps, shift in ((1, 8.0), (2, 8.0), (4, 5.0), (20, 8.0), (30, 3.0)):
                m = model_sampling(shift)
                sigmas = samplers.KSampler(types.SimpleNamespace(get_model_object=lambda _: m), steps, "cpu", name,
                                           scheduler).sigmas
                theirs = comfy_run(samplers, m, name, sigmas, noise, torch.zeros_like(noise))
                ours = our_run(name, scheduler, steps, shift, noise)
                rows.append((f"{name}/{scheduler}/{steps} steps/shift {shift:g}",
                             float((theirs - ours).abs().max()), float(theirs.abs().max())))
            # two experts: KSamplerAdvanced high (0..k, leftover noise) then low (k.., no new noise)
            m = model_sampling(8.0)
            sigmas = samplers.KSampler(types.SimpleNamespace(get_model_object=lambda _: m), 20, "cpu", name,
                                       scheduler).sigmas
            k = split_step(sigmas, 0.875)
            first = comfy_run(samplers, m, name, sigmas[:k + 1], noise, torch.zeros_like(noise))
            theirs = comfy_run(samplers, m, name, sigmas[k:], torch.zeros_like(noise), first)
            ours = our_run(name, scheduler, 20, 8.0, noise, split=0.875)
            rows.append((f"{name}/{scheduler}/20 steps/A14B split at {k}", float((theirs - ours).abs().max()),
                         float(theirs.abs().max())))
    for label, diff, scale in rows:
        print(f"  {label:44s} max |ComfyUI - ours| {diff:.3g} (of {scale:.3g})")
    print(f"runs: {len(rows)}, largest difference {max(d for _, d, _ in rows):.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
