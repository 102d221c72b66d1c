"""The project's VRAM estimate (modelSetup/memory_estimate.py) of a benchmark's run, beside what the run measures
(benchmarks/gpu_step.py on a GPU, benchmarks/memory_fullsize.py on the fake device)."""
from __future__ import annotations

import json
from pathlib import Path

WAN22_LATENT_CHANNELS = 48  # the Wan 2.2 VAE (TI2V-5B): z48, 16x spatial; the Wan 2.1 VAE: z16, 8x


def per_token_timesteps(config: dict) -> bool:
    """Wan 2.2 TI2V: 48-channel latents, a timestep per token (the model folder's expand_timesteps)."""
    return config["out_channels"] == WAN22_LATENT_CHANNELS


def vram_estimate(config: dict, train, width: int, height: int, frames: int, batch: int, experts: int,
                  vae: dict | None = None) -> dict:
    """The GUI's VRAM estimate of this run (its configs in a temporary folder), beside peak_vram_gib: the training
    phase, with the VAE term only when `vae` (its config) is given, as the measurement then holds that VAE."""
    import dataclasses
    import tempfile

    from modules.modelSetup.memory_estimate import estimate

    with tempfile.TemporaryDirectory() as folder:
        write_model_configs(Path(folder), config, experts, vae)
        run = dataclasses.replace(train, base_model_name=folder, resolution=[height, width], frames=frames,
                                  batch_size=batch)
        try:
            terms = estimate(run).phases["training"]
        except Exception as e:  # the estimate is a side result: never lose the measurement to it
            return {"estimate_error": str(e).splitlines()[0]}
    kept = {k: v for k, v in terms.items() if vae is not None or k != "vae_weights"}
    return {"estimate_training_gib": round(sum(kept.values()), 3),
            "estimate_terms_gib": {k: round(v, 3) for k, v in kept.items()}}


def write_model_configs(folder: Path, config: dict, experts: int = 1, vae: dict | None = None) -> None:
    """The model folder's configs the estimate reads: transformer(s), the VAE's (`vae`, or TI2V's 16x latent width)."""
    for name in ["transformer", "transformer_2"][:experts]:
        (folder / name).mkdir()
        (folder / name / "config.json").write_text(json.dumps({"_class_name": "WanTransformer3DModel", **config}))
    if vae is not None or per_token_timesteps(config):
        (folder / "vae").mkdir()
        (folder / "vae" / "config.json").write_text(json.dumps(vae or {"z_dim": config["out_channels"]}))
