"""Training-time visualisation of E2V steps (the `visualization` block of the dataset JSON, seed 001).

Every `frequency` optimizer steps, for the first sample of the batch:
- `latent_save` writes the chosen latents as `<name>.safetensors` (tensor `latents`), also for the
  seeds' `"format": "pt"`: a `.pt` file can only be read by unpickling, which runs any code planted in it;
- `vae_decode` decodes them with the VAE and writes PNGs of the chosen frames.
Data names: `input_latents` (x0), `noisy_latents` (x_t), `conditioned_latents` (the VAE-pathway condition
latents), `predicted_latents` (the model's clean estimate x0̂ = x_t − σ·v̂), `reference_images` (the
condition latents decoded: what the references look like through the VAE).
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

from modules.config.e2v_dataset_config import VisualizationConfig
from modules.model.step_inputs import StepInputs
from modules.model.WanModel import WanModel
from modules.modelSetup.BaseWanSetup import StepOutput
from modules.util.atomic import atomic_path

logger = logging.getLogger(__name__)


def _latents(name: str, output: StepOutput, inputs: StepInputs) -> torch.Tensor | None:
    """(C, T, h, w) of the batch's first sample, or None when the step has no such data."""
    c = output.input_latents.shape[1]
    if name == "input_latents":
        return output.input_latents[0]
    if name == "noisy_latents":
        return output.noisy_latents[0]
    if name == "predicted_latents":
        sigma = output.sigmas[0].to(output.noisy_latents.dtype)
        return (output.noisy_latents[0] - sigma * output.predicted[0].to(output.noisy_latents.dtype))
    if name in ("conditioned_latents", "reference_images"):
        condition = inputs.payload.condition
        return condition[0, -c:] if condition is not None else None
    raise ValueError(f"unknown visualization data '{name}'")


class Visualizer:
    def __init__(self, config: VisualizationConfig, workspace: Path, run_id: str, model: WanModel):
        self.config, self.model = config, model
        folder = Path(config.output_dir.replace("{run_id}", run_id))
        self.folder = folder if folder.is_absolute() else workspace / folder
        if any(p.type == "latent_save" and p.format == "pt" for p in config.processors):
            logger.info("visualization: latents are written as .safetensors (format 'pt' would need unpickling "
                        "to read)")

    def due(self, global_step: int) -> bool:
        return self.config.enabled and self.config.frequency > 0 and global_step % self.config.frequency == 0

    @torch.no_grad()
    def write(self, global_step: int, output: StepOutput, inputs: StepInputs) -> list[Path]:
        written = []
        for processor in self.config.processors:
            for name in processor.data:
                latents = _latents(name, output, inputs)
                if latents is None:
                    continue
                stem = self.folder / f"step-{global_step:08d}" / name
                if processor.type == "latent_save":
                    written.append(self._save_latents(stem, latents.detach().float().cpu()))
                else:
                    written.extend(self._save_frames(stem, latents, processor.frames))
        if written:
            logger.info("visualization: %d files in %s", len(written), self.folder / f"step-{global_step:08d}")
        return written

    @staticmethod
    def _save_latents(stem: Path, latents: torch.Tensor) -> Path:
        path = stem.with_suffix(".safetensors")
        with atomic_path(path) as tmp:
            save_file({"latents": latents.contiguous()}, str(tmp))
        return path

    def _save_frames(self, stem: Path, latents: torch.Tensor, frames: list[int]) -> list[Path]:
        video = self.model.decode_latents(latents[None].to(next(self.model.vae.parameters()).device))[0]
        pixels = ((video.permute(1, 2, 3, 0).cpu().numpy() + 1) * 127.5).round().clip(0, 255).astype(np.uint8)
        picks = frames or list(range(len(pixels)))
        paths = []
        for index in picks:
            frame = pixels[index]  # negative indices count from the end, as in the seed's [0, -1]
            path = stem.parent / f"{stem.name}_frame{index % len(pixels):03d}.png"
            with atomic_path(path) as tmp:
                Image.fromarray(frame).save(tmp, format="PNG")
            paths.append(path)
        return paths
