"""UMT5 and CLIP leave after caching (docs/memory.md, "Encoders and the cache"): every sample's prompts and images
are encoded ahead, the encoders freed, and the samples stay bit-identical to those made with the encoders loaded; a
prompt nobody encoded ahead loads UMT5 again (logged); a restart with the same samples runs neither encoder."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from PIL import Image

from modules.config.sample_config import SampleConfig
from modules.config.train_config import TrainConfig
from modules.dataLoader.encoder_placement import park_after_caching
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.synthetic.synthetic_data import render_clip
from modules.trainer.sample_inputs import encode_ahead
from modules.util.video_write import write_video
from tests.conftest import train_config_dict

SIZE, FRAMES = 32, 5
META = torch.device("meta")


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sample-media")
    rng = np.random.default_rng(0)
    for name in ("first", "last", "subject", "object"):
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(folder / f"{name}.png")
    write_video(folder / "driving.mp4", render_clip("circle", "blue", "left to right", 9, SIZE, SIZE), 16.0)
    write_video(folder / "control.mp4", render_clip("square", "red", "left to right", 9, SIZE, SIZE), 16.0)
    return folder


# (tiny variant, the sample's media, config keys): each sampler path that encodes something
CASES = {
    "t2v": ("t2v", {}, {}),
    "i2v": ("i2v", {"image": "first"}, {}),  # diffusers' pipeline encodes the image with CLIP
    "i2v-last": ("i2v", {"image": "first", "last_image": "last"}, {"last_frame_condition": True}),  # ours
    "flf2v": ("flf2v", {"image": "first", "last_image": "last"}, {}),
    "e2v": ("i2v", {"elements": ["subject", "object"], "frames": 13}, {}),  # CLIP of each element
    "vace": ("vace", {"elements": ["subject"], "control_video": "control.mp4"}, {}),
    "animate_2": ("animate_2", {"image": "first", "driving_video": "driving.mp4"}, {}),  # one batch of 3 prompts
    "skyreels_v2": ("skyreels_v2", {}, {}),  # our loop (an fps embedding)
    "a14b": ("a14b", {}, {}),
}


def sample_for(media, values: dict) -> SampleConfig:
    def path(name: str) -> str:
        return str(media / (name if "." in name else f"{name}.png"))

    sample = {"prompt": "a red fox", "negative_prompt": "blurry", "frames": FRAMES, "height": SIZE, "width": SIZE,
              "steps": 2, "seed": 5, "sampler": "euler"}
    for key, value in values.items():
        sample[key] = [path(v) for v in value] if key == "elements" else path(value) if isinstance(value, str) else value
    return SampleConfig.from_dict(sample, "sample")


def loaded(tiny_model, variant: str, work, **keys):
    config = TrainConfig.from_dict(train_config_dict(tiny_model(variant), work, work, **keys))
    return config, WanModelLoader().load_for_config(config, torch.device("cpu"))


def forward_calls(*modules) -> list:
    calls = []
    for module in modules:
        module.register_forward_hook(lambda m, args, out: calls.append(type(m).__name__))
    return calls


def check_case(case, tiny_model, media, tmp_path):
    variant, values, keys = CASES[case]
    config, model = loaded(tiny_model, variant, tmp_path, **keys)
    sample = sample_for(media, values)
    sampler = WanModelSampler(model)
    with_encoders = sampler.generate(sample, show_progress=False)
    encode_ahead(config, model, sampler, [sample], writes=True, keep_text=False)
    released = {"text", "clip"} if model.image_encoder is not None else {"text"}
    assert model.residency.released == released
    assert all(p.device == META for name in released
               for p in getattr(model, {"text": "text_encoder", "clip": "image_encoder"}[name]).parameters())
    without = sampler.generate(sample, show_progress=False)
    assert not model.residency.loaded_again  # nothing loaded again: everything was encoded ahead
    assert with_encoders.std() > 0 and np.array_equal(with_encoders, without)
    return config, sample, model


@pytest.mark.parametrize("case", list(CASES))
def test_samples_without_the_encoders_are_bit_identical(case, tiny_model, media, tmp_path):
    check_case(case, tiny_model, media, tmp_path)


def test_a_prompt_not_encoded_ahead_loads_umt5_again_says_so_and_is_kept(tiny_model, media, tmp_path, caplog):
    config, sample, model = check_case("t2v", tiny_model, media, tmp_path)
    resident = loaded(tiny_model, "t2v", tmp_path)[1].encode_prompts(["a blue fox"])
    with caplog.at_level(logging.INFO, logger="modules.model.encoder_residency"):
        late = model.encode_prompts(["a blue fox"])
    assert torch.equal(late, resident)
    assert "loading the text encoder (UMT5) again for the prompt 'a blue fox'" in caplog.text
    assert model.residency.loaded_again and "text" not in model.residency.released
    park_after_caching(config, model, keep_text=False)  # what the trainer does after the round
    assert model.residency.released == {"text"} and not model.residency.loaded_again
    assert torch.equal(model.encode_prompts(["a blue fox"]), resident)  # kept: no second load
    assert model.residency.released == {"text"}


def test_an_image_not_encoded_ahead_loads_clip_again(tiny_model, media, tmp_path, caplog):
    config, sample, model = check_case("i2v", tiny_model, media, tmp_path)
    other = sample_for(media, {"image": "last"})
    resident = WanModelSampler(loaded(tiny_model, "i2v", tmp_path)[1]).generate(other, show_progress=False)
    with caplog.at_level(logging.INFO, logger="modules.model.encoder_residency"):
        late = WanModelSampler(model).generate(other, show_progress=False)
    assert np.array_equal(late, resident)
    assert "loading the image encoder (CLIP) again for a sample image" in caplog.text
    assert model.residency.released == {"text"}


def test_a_restart_with_the_same_samples_runs_neither_encoder(tiny_model, media, tmp_path):
    config, sample, first = check_case("i2v", tiny_model, media, tmp_path)
    _, model = loaded(tiny_model, "i2v", tmp_path)
    sampler = WanModelSampler(model)
    calls = forward_calls(model.text_encoder, model.image_encoder)
    encode_ahead(config, model, sampler, [sample], writes=True, keep_text=False)
    assert calls == [] and model.residency.released == {"text", "clip"}
    assert set(model.encoded.kept) == set(first.encoded.kept)
    assert all(torch.equal(model.encoded.kept[k][n], t) for k, e in first.encoded.kept.items() for n, t in e.items())


def test_the_trainer_frees_umt5_and_clip_and_trains_and_samples_without_them(tiny_model, media, tmp_path, caplog):
    from modules.synthetic.synthetic_data import write_video_dataset
    from modules.trainer.GenericTrainer import GenericTrainer

    data = write_video_dataset(tmp_path / "data", count=2, frames=9, height=32, width=32)
    samples = [{"prompt": "a red fox", "image": str(media / "first.png"), "frames": FRAMES, "height": SIZE,
                "width": SIZE, "steps": 2, "sampler": "euler"}]
    config = TrainConfig.from_dict(train_config_dict(tiny_model("i2v"), data, tmp_path, epochs=1, max_steps=1,
                                                     caption_dropout_probability=1.0,  # the empty caption's row
                                                     samples=samples, sample_at_end=True))
    trainer = GenericTrainer(config)
    with caplog.at_level(logging.INFO, logger="modules.model.encoder_residency"):
        trainer.start()
        try:
            assert trainer.model.residency.released == {"text", "clip"}
            trainer.train()
            trainer.end()
        finally:
            trainer.close()
    assert len(trainer.sample_paths) == 1 and not trainer.sample_failures
    assert trainer.model.residency.released == {"text", "clip"} and "loading the" not in caplog.text  # none came back
    assert "text encoder (UMT5) freed" in caplog.text and "image encoder (CLIP) freed" in caplog.text


@pytest.mark.parametrize("keys, kept", [({"latent_caching": False}, {"text", "clip"}),  # every step encodes
                                        ({"sample_metrics": True, "tensorboard": True}, {"clip"})])
def test_what_stays_loaded(keys, kept, tiny_model, media, tmp_path):
    config, model = loaded(tiny_model, "i2v", tmp_path, **keys)
    sample = sample_for(media, {"image": "first"})
    encode_ahead(config, model, WanModelSampler(model), [sample], writes=True, keep_text=False)
    park_after_caching(config, model, keep_text=False, keep_clip=config.sample_metrics)
    assert {"text", "clip"} - model.residency.released == kept


def test_sample_now_with_a_new_prompt_loads_umt5_for_the_round_and_frees_it_after(tiny_model, tmp_path, caplog):
    from modules.synthetic.synthetic_data import write_video_dataset
    from modules.trainer.GenericTrainer import GenericTrainer
    from modules.util.commands import TrainCommands

    data = write_video_dataset(tmp_path / "data", count=2, frames=9, height=32, width=32)
    sample = {"prompt": "a red fox", "frames": FRAMES, "height": SIZE, "width": SIZE, "steps": 2}
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), data, tmp_path, epochs=1, max_steps=1,
                                                     samples=[sample]))
    commands = TrainCommands()
    trainer = GenericTrainer(config, commands=commands)
    with caplog.at_level(logging.INFO, logger="modules.model.encoder_residency"):
        trainer.start()
        commands.sample([SampleConfig.from_dict({**sample, "prompt": "a green owl"}, "sample")])  # the GUI's list now
        try:
            trainer.train()
        finally:
            trainer.close()
    assert len(trainer.sample_paths) == 1 and not trainer.sample_failures
    assert "loading the text encoder (UMT5) again for the prompt 'a green owl'" in caplog.text
    assert trainer.model.residency.released == {"text"}  # freed again after the round


def test_the_guis_sample_now_sends_the_sampling_tabs_list_as_it_is_now(tmp_path):
    from modules.ui.controllers.app_controller import AppController
    from tests.ui.test_training_controller import FakeTrainer, run_until

    app = AppController(tmp_path / "presets", trainer_factory=lambda *a: FakeTrainer(*a))
    app.samples.add(prompt="a red fox")
    app.training.start(object())
    try:
        app.samples.set(0, "prompt", "a green owl")  # edited while it trains
        assert app.sample_now()
        assert app.training.commands.take_sample()
        assert [s.prompt for s in app.training.commands.take_samples()] == ["a green owl"]
        app.samples.set(0, "height", "20")  # not a multiple of 16: one line, nothing asked
        assert not app.sample_now() and not app.training.commands.take_sample()
        assert app.training.state.status.startswith("cannot sample now: config key 'samples[0].height'")
    finally:
        app.training.stop()
        run_until(app.training, lambda: not app.training.running)
