#!/usr/bin/env python
"""Trainer overhead: steps/s of GenericTrainer (warm cache) against a bare training loop.

Both train the same small random Wan transformer (LoRA, same rank, batch, optimizer and step math) on
the CPU. The bare loop holds its batches in memory and does nothing but the step; the trainer reads
its disk cache, derives per-step seeds, updates tqdm and tensorboard. The ratio bare/trainer in
steps/s is the trainer's cost (goal <= 1.05).

    python benchmarks/train_overhead.py [--steps 40] [--repeats 2]
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_small_model(folder: Path) -> Path:
    """The tiny t2v folder with a larger transformer, so a step costs what it does on real data shapes."""
    import torch
    from diffusers import WanTransformer3DModel

    from modules.synthetic.tiny_model import TEXT_DIM, write_tiny_model

    write_tiny_model("t2v", folder)
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=32,
                                        in_channels=16, out_channels=16, text_dim=TEXT_DIM, freq_dim=256,
                                        ffn_dim=512, num_layers=4, rope_max_seq_len=1024)
    transformer.save_pretrained(folder / "transformer")
    return folder


def trainer_config(model: Path, data: Path, work: Path, steps: int):
    from modules.config.train_config import TrainConfig

    return TrainConfig.from_dict({
        "base_model_name": str(model), "concepts": [{"path": str(data)}], "resolution": [64, 64], "frames": 17,
        "epochs": 10_000, "max_steps": steps, "batch_size": 2, "learning_rate": 1e-4, "lora_rank": 16,
        "lora_alpha": 16, "checkpointing": {"policy": "NONE"}, "tensorboard": True, "sample_at_end": False,
        "backup_before_save": False, "workspace_dir": str(work / "workspace"), "cache_dir": str(work / "cache"),
        "output_model_destination": str(work / "out.safetensors"),
    })


def time_trainer(config) -> tuple[float, int]:
    from modules.trainer.GenericTrainer import GenericTrainer

    trainer = GenericTrainer(config)
    trainer.start()  # warm cache: reads it, runs no encoder
    assert trainer.data.encoder_calls == 0, "cache was not warm"
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start
    steps = trainer.progress.global_step
    trainer.close()
    return steps / elapsed, steps


def time_bare_loop(config, steps: int) -> float:
    """A training loop with nothing but the step: in-memory batches, LoRA, AdamW."""
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig

    from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
    from modules.modelLoader.WanModelLoader import WanModelLoader
    from modules.modelSetup.lora_targets import select_lora_targets

    model = WanModelLoader().load(config.base_model_name, torch.device("cpu"))
    data = WanBaseDataLoader(config, model)
    data.prepare()
    batches = [data.load_batch(indices, 0) for indices in data.epoch_batches(0)]
    transformer = model.transformer
    targets = select_lora_targets(transformer, config.lora_target_modules, [], "")
    transformer.add_adapter(LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=targets))
    params = [p for n, p in transformer.named_parameters() if "lora_" in n]
    for p in params:
        p.requires_grad_(True)
    transformer.train()
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for step in range(steps):
        batch = batches[step % len(batches)]
        x0 = model.normalize_latents(batch["latent_mean"] + batch["latent_std"] * torch.randn(
            batch["latent_mean"].shape, generator=generator))
        sigma = torch.rand(x0.shape[0], generator=generator)
        noise = torch.randn(x0.shape, generator=generator)
        s = sigma.view(-1, 1, 1, 1, 1)
        pred = transformer(hidden_states=(1 - s) * x0 + s * noise, timestep=sigma * 1000,
                           encoder_hidden_states=batch["prompt_embeds"], return_dict=False)[0]
        loss = F.mse_loss(pred.float(), (noise - x0).float())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5,
                        help="alternating measurements of each loop; the best of each is compared (least disturbed)")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()

    import logging

    import torch

    from modules.synthetic.synthetic_data import write_video_dataset

    logging.disable(logging.INFO)
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = make_small_model(work / "model")
        data = write_video_dataset(work / "data", count=8, frames=17, height=64, width=64)
        config = trainer_config(model, data, work, args.steps)
        from modules.trainer.GenericTrainer import GenericTrainer

        warm = GenericTrainer(config)
        warm.start()  # fills the cache
        warm.close()
        bare, trainer = [], []
        for _ in range(args.repeats):
            bare.append(time_bare_loop(config, args.steps))
            trainer.append(time_trainer(config)[0])
        result = {"steps": args.steps, "bare_steps_per_s": max(bare), "trainer_steps_per_s": max(trainer),
                  "overhead_ratio": max(bare) / max(trainer), "threads": torch.get_num_threads(),
                  # whole process (both loops, cache filling); Linux reports KiB
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
