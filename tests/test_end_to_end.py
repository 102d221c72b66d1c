"""End to end through the command line, per variant: train.py -> LoRA -> diffusers and sample.py (T2V's and the
demos as real processes; the other variants' scripts in the test process, tests/script_runner.py: the same command
lines and exit codes without a new interpreter's ~8 CPU-s of imports each)."""
from __future__ import annotations

import json
import logging
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.conftest import REPO_ROOT, train_config_dict
from tests.run_paths import run_dir
from tests.script_runner import run_script as run_in_this_process

pytestmark = pytest.mark.slow


def run_script(name: str, *args: str, real_process: bool = True) -> subprocess.CompletedProcess:
    if real_process:
        result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / name), *map(str, args)],
                                capture_output=True, text=True, timeout=600)
    else:
        result = run_in_this_process(name, *map(str, args))
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def first_frame_png(video_dataset, path):
    from PIL import Image

    from modules.dataLoader.video_io import read_video_frames

    frames, _ = read_video_frames(video_dataset / "000.mp4")
    Image.fromarray(frames[0]).save(path)
    return path


def transformer_output(transformer, seed=0):
    config = transformer.config
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(1, config.in_channels, 2, 4, 4, generator=g)
    text = torch.randn(1, 512, config.text_dim, generator=g)
    image = torch.randn(1, 5, config.image_dim, generator=g) if config.image_dim else None
    with torch.no_grad():
        return transformer(hidden, torch.tensor([500.0]), text, encoder_hidden_states_image=image,
                           return_dict=False)[0]


@pytest.mark.parametrize("variant", ["t2v", "i2v", "ti2v", "a14b"])
def test_cli_trains_saves_and_the_lora_loads_in_diffusers(variant, tiny_model, video_dataset, tmp_path):
    from diffusers import DiffusionPipeline

    size = 64 if variant == "ti2v" else 32
    image = first_frame_png(video_dataset, tmp_path / "first.png")
    # A14B: σ shifted up so both experts get steps (uniform σ would rarely reach the high-noise one).
    extra = {"timestep_shift": 5.0, "epochs": 4} if variant == "a14b" else {"epochs": 2}
    config = train_config_dict(tiny_model(variant), video_dataset, tmp_path, **extra, resolution=[size, size],
                               samples=[{"prompt": "a red circle", "frames": 5, "height": size, "width": size,
                                         "steps": 2, "image": str(image) if variant == "i2v" else ""}],
                               sample_at_end=True, tensorboard=True)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    real = variant == "t2v"  # one variant through new interpreters, as a user runs them
    result = run_script("train.py", "--config-path", config_path, real_process=real)
    written = [line.split(" to ", 1)[1] for line in result.stdout.splitlines() if line.startswith("model written")]
    assert written and all(tmp_path.joinpath(p).is_file() for p in written)
    assert list((run_dir(tmp_path / "workspace") / "samples").glob("step-*-0.mp4"))
    assert list((run_dir(tmp_path / "workspace") / "tensorboard").iterdir())

    # diffusers' own loader consumes every key and the LoRA changes the transformer's output.
    pipe = DiffusionPipeline.from_pretrained(tiny_model(variant))
    before = [transformer_output(t) for t in (pipe.transformer, getattr(pipe, "transformer_2", None)) if t is not None]
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("diffusers").addHandler(handler)
    try:
        for path in written:
            pipe.load_lora_weights(path, load_into_transformer_2=path.endswith("_low_noise.safetensors"))
    finally:
        logging.getLogger("diffusers").removeHandler(handler)
    assert not [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    after = [transformer_output(t) for t in (pipe.transformer, getattr(pipe, "transformer_2", None)) if t is not None]
    assert all(not torch.allclose(a, b) for a, b in zip(after, before))

    # ... and sample.py generates with it (either expert's file finds its sibling).
    out = tmp_path / "sample.mp4"
    args = ["--model", tiny_model(variant), "--lora", written[-1], "--prompt", "a red circle", "--frames", 5,
            "--height", size, "--width", size, "--steps", 2, "--output", out]
    if variant == "i2v":
        args += ["--image", image]
    run_script("sample.py", *args, real_process=real)
    from modules.dataLoader.video_io import read_video_frames

    frames, _ = read_video_frames(out)
    assert frames.shape[0] == 5 and out.with_suffix(".png").is_file()


@pytest.mark.parametrize("mode, name", [(["--e2v"], "i2v-e2v"), (["--plain"], "t2v-plain")])
def test_demo_makes_everything_and_runs(tmp_path, mode, name):
    result = run_script("demo.py", "--folder", tmp_path, "--steps", 6, *mode)
    assert "Demo finished." in result.stdout
    assert (tmp_path / "output" / f"{name}-lora.safetensors").is_file()
    assert list((run_dir(tmp_path / "workspace" / name) / "samples").glob("*.mp4"))


def test_the_default_demo_is_the_shapes_one_and_prints_its_verdict_and_epochs_it_reaches(tmp_path):
    # 6 steps learn nothing: this checks the run and the report; tests/test_learning.py checks the learning
    result = run_script("demo.py", "--folder", tmp_path, "--steps", 6, "--strip", tmp_path / "strip.png")
    assert "Demo finished." in result.stdout
    assert "red circle moving right: " in result.stdout and "blue square moving down: " in result.stdout
    assert (tmp_path / "output" / "t2v-shapes-model" / "transformer").is_dir() and (tmp_path / "strip.png").is_file()
    assert "epoch=2/2" in result.stderr and "/100000" not in result.stderr  # 12 clips, batch 4: 3 steps an epoch


def test_training_loss_falls_on_one_clip(tiny_model, video_dataset, tmp_path):
    """Overfitting one clip at a fixed σ: the LoRA learns (loss falls clearly)."""
    from modules.config.train_config import TrainConfig
    from modules.trainer.GenericTrainer import GenericTrainer

    single = tmp_path / "one"
    single.mkdir()
    for suffix in (".mp4", ".txt"):
        (single / f"000{suffix}").write_bytes((video_dataset / f"000{suffix}").read_bytes())
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), single, tmp_path, epochs=150,
                                                     learning_rate=3e-3, lora_rank=16, lora_alpha=16,
                                                     min_sigma=0.5, max_sigma=0.5001))
    losses = []
    trainer = GenericTrainer(config)
    trainer.callbacks.on_update = lambda update: losses.append(update.loss)
    trainer.start()
    trainer.train()
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
