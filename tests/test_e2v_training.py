"""E2V training on every base: train, save, continue from the file, sample from three element images."""
from __future__ import annotations

import dataclasses
import json
import logging

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
from modules.trainer.GenericTrainer import GenericTrainer
from tests.conftest import train_config_dict
from tests.script_runner import run_script

pytestmark = pytest.mark.slow

SIZE = {"i2v": 32, "t2v": 32, "a14b": 32, "ti2v": 64, "a14b_i2v": 32}


@pytest.fixture(scope="module")
def e2v_data(tmp_path_factory):
    """(dataset JSON path, data folder) per frame size."""
    made = {}

    def make(size: int):
        if size not in made:
            root = tmp_path_factory.mktemp(f"e2v{size}")
            data = write_e2v_dataset(root / "data", count=2, frames=17, height=size, width=size)
            path = root / "dataset.json"
            path.write_text(json.dumps(e2v_dataset_json(data, size, size, 17)))
            made[size] = (path, data)
        return made[size]

    return make


def e2v_config(tiny_model, e2v_data, work, variant, **overrides):
    dataset, _ = e2v_data(SIZE[variant])
    extra = {"e2v": {"image_encoder_model_name": str(tiny_model("i2v"))}} if variant == "t2v" else {}
    return train_config_dict(tiny_model(variant), dataset, work, dataset_config=str(dataset), concepts=[], epochs=1,
                             **{**extra, **overrides})


def lora_state(trainer):
    return {k: v.clone() for k, v in trainer.setup.trainable_state().items()}


@pytest.mark.parametrize("variant, pathways", [("i2v", "dual"), ("t2v", "dual"), ("a14b", "vae"), ("ti2v", "vae")])
def test_e2v_trains_saves_continues_and_samples(variant, pathways, tiny_model, e2v_data, tmp_path):
    first = GenericTrainer(TrainConfig.from_dict(e2v_config(tiny_model, e2v_data, tmp_path / "a", variant,
                                                            output_dtype="FLOAT32")))  # exact: reloaded below
    first.start()
    assert first.data.e2v_type == pathways
    first.train()
    written = [path for path in first.end() if "-i2v" not in path.name]  # the LoRA file(s), not the I2V export
    trained = lora_state(first)

    # continue training from the written file(s): the same weights come back
    second = GenericTrainer(TrainConfig.from_dict(e2v_config(
        tiny_model, e2v_data, tmp_path / "b", variant, lora_weight_path=str(written[0]).replace("_low_noise", "_high_noise"))))
    second.start()
    reloaded = lora_state(second)
    assert reloaded.keys() == trained.keys()
    assert all(torch.allclose(reloaded[k], trained[k], atol=1e-6) for k in trained)

    # sample from three element images through the command line
    _, data = e2v_data(SIZE[variant])
    out = tmp_path / "sample.mp4"
    args = ["--model", str(tiny_model(variant)),
            "--lora", str(written[-1]), "--prompt", "a red circle", "--frames", "17", "--height", str(SIZE[variant]),
            "--width", str(SIZE[variant]), "--steps", "2", "--output", str(out), "--elements",
            *(str(data / f"001_{name}.png") for name in ("subject", "object", "background"))]
    if variant == "t2v":
        args += ["--image-encoder", str(tiny_model("i2v"))]
    result = run_script("sample.py", *args)  # in this process: tests/faults/test_sample_faults.py runs real ones
    assert result.returncode == 0, result.stderr[-2000:]
    from modules.dataLoader.video_io import read_video_frames

    frames, _ = read_video_frames(out)
    assert len(frames) == 17 - 12  # F − 4K with K = 3 reference latents dropped
    assert out.with_suffix(".png").is_file()


def diffusers_warnings(load):
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("diffusers").addHandler(handler)
    try:
        load()
    finally:
        logging.getLogger("diffusers").removeHandler(handler)
    return [r.getMessage() for r in records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("variant", ["i2v", "a14b_i2v"])
def test_e2v_lora_loads_in_diffusers_image_to_video_pipeline(variant, tiny_model, e2v_data, tmp_path):
    from diffusers import WanImageToVideoPipeline

    trainer = GenericTrainer(TrainConfig.from_dict(e2v_config(tiny_model, e2v_data, tmp_path, variant)))
    trainer.start()
    trainer.train()
    written = trainer.end()
    pipe = WanImageToVideoPipeline.from_pretrained(tiny_model(variant))
    before = {k: v.clone() for k, v in pipe.transformer.state_dict().items()}

    def load():
        for path in written:
            pipe.load_lora_weights(str(path), load_into_transformer_2=str(path).endswith("_low_noise.safetensors"))

    assert diffusers_warnings(load) == []
    lora_keys = [k for k in pipe.transformer.state_dict() if "lora" in k]
    assert lora_keys and len(pipe.transformer.state_dict()) > len(before)
    if variant == "a14b_i2v":
        assert any("lora" in k for k in pipe.transformer_2.state_dict())


def widened_i2v_model(tiny_model, folder):
    """The tiny i2v folder with a 128-wide transformer: the 32-wide one cannot carry x_t and the
    condition through its residual stream at once, so it could not show what conditioning adds."""
    import shutil

    from diffusers import WanTransformer3DModel

    shutil.copytree(tiny_model("i2v"), folder)
    config = dict(WanTransformer3DModel.load_config(folder / "transformer"))
    config.update(num_attention_heads=4, attention_head_dim=32, added_kv_proj_dim=128, ffn_dim=256)
    torch.manual_seed(0)
    WanTransformer3DModel.from_config(config).save_pretrained(folder / "transformer")
    return folder


def random_texture_dataset(folder, count: int, seed: int):
    """Samples that differ only in their random-texture references (one caption for all); the video
    shows the background, so the condition tells the model what the target is."""
    import cv2
    import numpy as np

    from modules.util.video_write import write_video

    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        images = {name: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for name in ("subject", "object", "background")}
        for name, image in images.items():
            cv2.imwrite(str(folder / f"{i:03d}_{name}.png"), image)
        write_video(folder / f"{i:03d}.mp4", np.repeat(images["background"][None], 13, axis=0), 16)
        (folder / f"{i:03d}.txt").write_text("a video")
    dataset = folder.with_suffix(".json")
    dataset.write_text(json.dumps(e2v_dataset_json(folder, 32, 32, 13)))
    return dataset


def test_conditioning_reaches_the_model(tiny_model, tmp_path):
    """Trained on samples that differ only in their references, a model that sees the condition fits
    them better and carries that over to unseen references than the same run with the mask, condition
    latents and CLIP embeddings zeroed."""
    from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader
    from modules.model.step_inputs import StepRandom

    model_dir = widened_i2v_model(tiny_model, tmp_path / "model")
    train_set = random_texture_dataset(tmp_path / "train", 8, seed=0)
    held_out = random_texture_dataset(tmp_path / "held_out", 4, seed=1)

    def blind(inputs):
        inputs.payload.condition = torch.zeros_like(inputs.payload.condition)
        inputs.payload.clip_embeds = torch.zeros_like(inputs.payload.clip_embeds)
        return inputs

    def run(zero_condition: bool, work):
        config = TrainConfig.from_dict(train_config_dict(
            model_dir, train_set, work, dataset_config=str(train_set), concepts=[], epochs=1000, max_steps=400,
            batch_size=2, training_method="FINE_TUNE", output_model_format="DIFFUSERS", learning_rate=1e-3,
            min_sigma=0.75, max_sigma=0.85, backup_before_save=False))
        trainer = GenericTrainer(config)
        trainer.start()
        if zero_condition:
            assemble = trainer.data.assemble
            trainer.data.assemble = lambda batch, random: blind(assemble(batch, random))
        losses = []
        trainer.callbacks.on_update = lambda update: losses.append(update.loss)
        trainer.train()
        # loss on unseen references, fixed noise
        data = WanE2VDataLoader(dataclasses.replace(config, dataset_config=str(held_out)), trainer.model)
        data.prepare()
        evaluation = []
        with torch.no_grad():
            for index, batch_indices in enumerate(data.epoch_batches(0)):
                batch = data.load_batch(batch_indices, 0)
                for repeat in range(4):
                    random = StepRandom.for_micro_step(7, 10 * index + repeat, len(batch_indices))
                    inputs = data.assemble(batch, random)
                    inputs = blind(inputs) if zero_condition else inputs
                    evaluation.append(float(trainer.setup.predict(inputs, random).loss))
        return sum(losses[:10]) / 10, sum(losses[-20:]) / 20, sum(evaluation) / len(evaluation)

    start, fitted, unseen = run(False, tmp_path / "with")
    _, blind_fitted, blind_unseen = run(True, tmp_path / "without")
    print(f"E2V conditioning: start {start:.4f}; fitted {fitted:.4f} vs {blind_fitted:.4f} zeroed; "
          f"held-out {unseen:.4f} vs {blind_unseen:.4f} zeroed")
    assert fitted < 0.25 * start
    # On a model this small the learned use of the condition is modest (a few percent after 400 steps,
    # see the issue note), but it is consistently there: seen and unseen references both fit better.
    assert fitted < blind_fitted
    assert unseen < blind_unseen
