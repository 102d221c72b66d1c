"""The dataset JSON's visualization block writes latents and decoded frames every `frequency` steps.

Latents are always safetensors, also for the seeds' `"format": "pt"`: a .pt file needs unpickling to read."""
from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
from modules.trainer.GenericTrainer import GenericTrainer
from tests.conftest import train_config_dict
from tests.run_paths import run_dir


def test_visualization_writes_latents_and_frames(tiny_model, tmp_path):
    data = write_e2v_dataset(tmp_path / "data", count=2, frames=17, height=32, width=32)
    dataset = e2v_dataset_json(data, 32, 32, 17)
    dataset["datasets"][0]["visualization"] = {
        "enabled": True, "output_dir": "visualizations/{run_id}", "frequency": 2,
        "processors": [
            {"type": "latent_save", "data": ["input_latents", "noisy_latents"], "format": "safetensors"},
            {"type": "latent_save", "data": ["conditioned_latents", "predicted_latents"], "format": "pt"},
            {"type": "vae_decode", "data": ["input_latents", "reference_images"], "frames": [0, -1]},
        ]}
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(dataset))
    trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(
        tiny_model("i2v"), data, tmp_path, dataset_config=str(path), concepts=[], epochs=2)))
    trainer.start()
    trainer.train()
    (run,) = (run_dir(tmp_path / "workspace") / "visualizations").iterdir()
    assert sorted(p.name for p in run.iterdir()) == ["step-00000002", "step-00000004"]
    step = run / "step-00000002"
    names = sorted(p.name for p in step.iterdir())
    assert names == ["conditioned_latents.safetensors", "input_latents.safetensors", "input_latents_frame000.png",
                     "input_latents_frame016.png", "noisy_latents.safetensors", "predicted_latents.safetensors",
                     "reference_images_frame000.png", "reference_images_frame016.png"]
    for name in ("input_latents", "predicted_latents"):
        latents = load_file(str(step / f"{name}.safetensors"))["latents"]
        assert latents.shape == (16, 5, 4, 4) and torch.isfinite(latents).all()
