"""The trainer on tiny models: variants, caching, resume, outputs, bad data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.model.detection import detect_variant
from modules.model.step_inputs import StepRandom
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.enum import ModelType
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.run_paths import run_dir
from tests.test_pixel_budget import huge_png


def make_trainer(model_dir, data_dir, work, **overrides) -> GenericTrainer:
    return GenericTrainer(TrainConfig.from_dict(train_config_dict(model_dir, data_dir, work, **overrides)))


def run(trainer: GenericTrainer):
    trainer.start()
    trainer.train()
    return trainer.end()


@pytest.mark.parametrize("variant, expected", [
    ("t2v", dict(name="t2v", in_channels=16, has_clip_branch=False, two_experts=False, fps=16)),
    ("i2v", dict(name="i2v", in_channels=36, has_clip_branch=True, has_image_encoder=True, fps=16)),
    ("ti2v", dict(name="ti2v", vae_z_dim=48, expand_timesteps=True, model_type=ModelType.WAN_2_2, fps=24)),
    ("a14b", dict(name="a14b_t2v", two_experts=True, boundary_ratio=0.875, model_type=ModelType.WAN_2_2)),
])
def test_variant_is_read_from_the_checkpoint_configs(tiny_model, variant, expected):
    detected = detect_variant(tiny_model(variant))
    assert {k: getattr(detected, k) for k in expected} == expected


def test_missing_model_folder_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        detect_variant(tmp_path / "missing")


def test_second_epoch_runs_no_encoder(tiny_model, video_dataset, tmp_path, monkeypatch):
    trainer = make_trainer(tiny_model("i2v"), video_dataset, tmp_path, epochs=2)
    trainer.start()
    calls = {"vae": 0, "text": 0, "clip": 0}
    model = trainer.model
    for name, module in (("vae", model.vae), ("text", model.text_encoder), ("clip", model.image_encoder)):
        original = module.forward if name != "vae" else module.encode

        def counting(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, "encode" if name == "vae" else "forward", counting)
    trainer.train()
    assert trainer.progress.epoch == 2
    assert calls == {"vae": 0, "text": 0, "clip": 0}


def test_a_second_run_reuses_the_cache(tiny_model, video_dataset, tmp_path):
    first = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=1)
    first.start()
    assert first.data.encoder_calls > 0
    second = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=1)
    second.start()
    assert second.data.encoder_calls == 0


def test_changing_the_resolution_invalidates_the_latent_cache(tiny_model, video_dataset, tmp_path):
    make_trainer(tiny_model("t2v"), video_dataset, tmp_path).start()
    other = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, resolution=[48, 48])
    other.start()
    assert other.data.encoder_calls == 3  # latents re-encoded, captions (unchanged) come from the cache


def test_uncached_training_encodes_every_epoch(tiny_model, video_dataset, tmp_path):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, latent_caching=False, epochs=2)
    trainer.start()
    trainer.train()
    assert trainer.data.encoder_calls == 2 * 2 * 3  # (latent + text) x 3 clips x 2 epochs


def trained_weights(trainer):
    return {k: v.clone() for k, v in trainer.setup.trainable_state().items()}


def test_resume_from_a_backup_is_bit_identical(tiny_model, video_dataset, tmp_path):
    common = dict(epochs=3, batch_size=2, gradient_accumulation_steps=1, lora_dropout=0.1,
                  learning_rate_scheduler="COSINE", learning_rate_warmup_steps=2)
    straight = make_trainer(tiny_model("t2v"), video_dataset, tmp_path / "a", **common)
    straight.start()
    straight.train()
    expected = trained_weights(straight)

    # The same run stopped after 3 of 6 steps (as Ctrl-C / the UI's Stop do), then resumed in a new trainer.
    from modules.trainer.GenericTrainer import TrainingStopped

    first = make_trainer(tiny_model("t2v"), video_dataset, tmp_path / "b", **common)
    first.start()
    first.callbacks.on_update = lambda update: first.commands.stop() if update.global_step == 3 else None
    with pytest.raises(TrainingStopped):
        first.train()
    resumed = make_trainer(tiny_model("t2v"), video_dataset, tmp_path / "b", continue_last_backup=True, **common)
    resumed.start()
    assert resumed.progress.global_step == 3 and resumed.progress.epoch == 1
    resumed.train()
    assert resumed.progress.global_step == straight.progress.global_step == 6
    actual = trained_weights(resumed)
    assert actual.keys() == expected.keys()
    assert all(torch.equal(actual[k], expected[k]) for k in expected)


def test_rolling_backups_keep_the_last_n(tiny_model, video_dataset, tmp_path):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=2, backup_after=1,
                           backup_after_unit="STEP", rolling_backup_count=2)
    trainer.start()
    trainer.train()
    names = sorted(p.name for p in (run_dir(tmp_path / "workspace") / "backup").iterdir())
    assert names == ["step-00000005", "step-00000006"]


def test_stop_request_writes_a_backup_at_a_step_boundary(tiny_model, video_dataset, tmp_path):
    from modules.trainer.GenericTrainer import TrainingStopped

    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=5)
    trainer.start()
    trainer.callbacks.on_update = lambda update: trainer.commands.stop() if update.global_step == 2 else None
    with pytest.raises(TrainingStopped) as stopped:
        trainer.train()
    progress = json.loads((stopped.value.path / "progress.json").read_text())["progress"]
    assert progress["global_step"] == 2 and progress["epoch_batch"] == 2


def test_two_expert_model_routes_each_batch_to_its_sigmas_expert(tiny_model, video_dataset, tmp_path):
    trainer = make_trainer(tiny_model("a14b"), video_dataset, tmp_path)
    trainer.start()
    boundary = trainer.model.variant.boundary_sigma
    for seed in range(40):  # each seed gives one expert choice
        sigmas, expert = trainer.setup.sample_sigmas(StepRandom.for_micro_step(seed, 0, 3))
        assert (sigmas >= boundary).all() if expert == 0 else (sigmas < boundary).all()


@pytest.mark.parametrize("expert, expected", [("HIGH", ["lora_high_noise"]), ("LOW", ["lora_low_noise"]),
                                              ("BOTH", ["lora_high_noise", "lora_low_noise"])])
def test_two_expert_lora_writes_one_file_per_trained_expert(tiny_model, video_dataset, tmp_path, expert, expected):
    outputs = run(make_trainer(tiny_model("a14b"), video_dataset, tmp_path, epochs=1, train_expert=expert))
    assert sorted(p.stem for p in outputs) == expected


def test_lora_file_has_model_spec_metadata(tiny_model, video_dataset, tmp_path):
    (path,) = run(make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=1))
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    assert meta["modelspec.architecture"] == "wan-2.1-t2v/lora"
    assert meta["wantrainer.rank"] == "4" and meta["wantrainer.base_model"] == str(tiny_model("t2v"))


def test_comfy_output_holds_only_original_wan_names(tiny_model, video_dataset, tmp_path):
    (path,) = run(make_trainer(tiny_model("i2v"), video_dataset, tmp_path, epochs=1, output_model_format="COMFY_LORA"))
    keys = load_file(str(path)).keys()
    assert all(k.startswith("diffusion_model.") for k in keys)
    assert any(".self_attn.q.lora_down.weight" in k for k in keys) and any(k.endswith(".alpha") for k in keys)
    assert not any("attn1" in k or "to_q" in k for k in keys)


def test_fine_tune_writes_a_diffusers_folder_that_loads(tiny_model, video_dataset, tmp_path):
    from diffusers import DiffusionPipeline

    out = tmp_path / "finetuned"
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=1, training_method="FINE_TUNE",
                           output_model_format="DIFFUSERS", output_model_destination=str(out), learning_rate=1e-2)
    run(trainer)
    pipe = DiffusionPipeline.from_pretrained(out)
    base = DiffusionPipeline.from_pretrained(tiny_model("t2v"))
    name, trained = next(iter(pipe.transformer.state_dict().items()))
    assert any(not torch.equal(p, base.transformer.state_dict()[n]) for n, p in pipe.transformer.state_dict().items())


def test_broken_and_short_files_are_skipped_and_counted(tiny_model, video_dataset, tmp_path):
    import shutil

    data = tmp_path / "mixed"
    shutil.copytree(video_dataset, data)
    (data / "broken.mp4").write_bytes(b"not a video at all")
    (data / "broken.txt").write_text("broken")
    huge_png(data / "huge.png")  # a 20000x20000 header over a few bytes: refused before decoding
    (data / "huge.txt").write_text("huge")
    trainer = make_trainer(tiny_model("t2v"), data, tmp_path, epochs=1)
    run(trainer)
    assert trainer.skips.counts() == {"too many pixels": 1, "unreadable video": 1}
    assert sorted(Path(e.path).name for e in trainer.skips.entries) == ["broken.mp4", "huge.png"]


def test_jsonl_manifest_of_npz_clips_trains(tiny_model, tmp_path):
    import numpy as np

    from modules.synthetic.synthetic_data import render_clip

    folder = tmp_path / "clips"
    folder.mkdir()
    lines = []
    for i, colour in enumerate(("red", "blue")):
        np.savez(folder / f"{i}.npz", frames=render_clip("circle", colour, "left to right", 9, 32, 32))
        lines.append(json.dumps({"path": f"{i}.npz", "prompt": f"a {colour} circle"}))
    (folder / "train.jsonl").write_text("\n".join(lines))
    trainer = make_trainer(tiny_model("t2v"), folder / "train.jsonl", tmp_path, epochs=1)
    run(trainer)
    assert len(trainer.data.items) == 2 and trainer.progress.global_step == 2


def test_no_usable_sample_is_a_user_error(tiny_model, tmp_path):
    (tmp_path / "empty").mkdir()
    trainer = make_trainer(tiny_model("t2v"), tmp_path / "empty", tmp_path)
    with pytest.raises(UserError, match="no usable training sample"):
        trainer.start()


def test_training_on_a_folder_made_outside_the_project(video_dataset, tmp_path):
    """A diffusers Wan folder assembled directly from diffusers/transformers classes (not our script)."""
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

    from modules.synthetic.tiny_model import write_tiny_model

    tokenizer_dir = write_tiny_model("t2v", tmp_path / "donor") / "tokenizer"  # only the offline tokenizer
    torch.manual_seed(0)
    pipe = WanPipeline(
        tokenizer=AutoTokenizer.from_pretrained(tokenizer_dir),
        text_encoder=UMT5EncoderModel(UMT5Config(vocab_size=AutoTokenizer.from_pretrained(tokenizer_dir).vocab_size,
                                                 d_model=24, d_kv=8, d_ff=32, num_layers=1, num_heads=3)),
        vae=AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                             temperal_downsample=[False, True, True]),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        transformer=WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                          in_channels=16, out_channels=16, text_dim=24, freq_dim=32, ffn_dim=48,
                                          num_layers=3, rope_max_seq_len=32),
    )
    pipe.save_pretrained(tmp_path / "external")
    outputs = run(make_trainer(tmp_path / "external", video_dataset, tmp_path, epochs=1))
    assert outputs[0].is_file()


def test_images_train_as_one_frame_videos(tiny_model, tmp_path):
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(2):
        Image.new("RGB", (40, 40), (200, 30 * i, 10)).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a picture {i}")
    trainer = make_trainer(tiny_model("t2v"), folder, tmp_path, epochs=1)
    run(trainer)
    assert {item.bucket.frames for item in trainer.data.items} == {1}
    assert trainer.progress.global_step == 2


def test_gradient_accumulation_takes_one_optimizer_step_per_n_batches(tiny_model, video_dataset, tmp_path):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=2, gradient_accumulation_steps=2)
    trainer.start()
    trainer.train()
    assert trainer.progress.global_step == 4 and trainer.progress.micro_step == 6  # 3 batches: 2 + a short tail


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_model, video_dataset, tmp_path):
    results = []
    for checkpointing in (False, True):
        trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path / str(checkpointing),
                               gradient_checkpointing=checkpointing)
        trainer.start()
        batch = trainer.data.load_batch([0], 0)
        random = StepRandom.for_micro_step(0, 0, 1)
        output = trainer.setup.predict(trainer.data.assemble(batch, random), random)
        output.loss.backward()
        results.append((output.loss.detach(), [p.grad.clone() for p in trainer.params]))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.allclose(loss_a, loss_b, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads_a, grads_b))


@pytest.mark.parametrize("fmt", ["DIFFUSERS_LORA", "COMFY_LORA"])
def test_training_continues_from_a_saved_lora(tiny_model, video_dataset, tmp_path, fmt):
    first = make_trainer(tiny_model("t2v"), video_dataset, tmp_path / "a", epochs=1, output_model_format=fmt,
                         lora_alpha=8, output_dtype="FLOAT32")  # exact files: the same weights come back
    (path,) = run(first)
    saved = trained_weights(first)
    second = make_trainer(tiny_model("t2v"), video_dataset, tmp_path / "b", epochs=1, lora_alpha=8,
                          lora_weight_path=str(path))
    second.start()
    loaded = trained_weights(second)
    assert all(torch.allclose(loaded[k], saved[k], atol=1e-6) for k in saved)
