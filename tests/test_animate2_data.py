"""Animate-2's triplet data and the copying trap, checked at start-up before any model loads; its LoRA names are
the official checkpoint's, which diffusers' single-file converter reads back."""
from __future__ import annotations

import shutil

import cv2
import numpy as np
import pytest

from modules.config.train_config import TrainConfig
from modules.dataLoader.animate2_triplets import COPY_PSNR_DB, frame_psnr, triplet_for
from modules.dataLoader.verdict import DataVerdict
from modules.synthetic.synthetic_data import render_clip
from modules.trainer.preflight import check_before_loading
from modules.util.errors import UserError
from modules.util.video_write import write_video
from tests.conftest import train_config_dict


def _triplet(folder, name="001", driving=("circle", "blue", "left to right"), size=64):
    folder.mkdir(parents=True, exist_ok=True)
    write_video(folder / f"{name}.mp4", render_clip("square", "red", "left to right", 17, 64, 64), 16.0)
    (folder / f"{name}.txt").write_text("a red square moving right", encoding="utf-8")
    write_video(folder / f"{name}_driving.mp4", render_clip(*driving, 17, size, size), 16.0)
    cv2.imwrite(str(folder / f"{name}_reference.png"), np.full((64, 64, 3), (0, 0, 200), np.uint8))
    return folder


def _verdict(tiny_model, folder, tmp_path):
    config = TrainConfig.from_dict(train_config_dict(tiny_model("animate_2"), folder, tmp_path))
    return DataVerdict(config).concept(config.concepts[0], "concepts[0]")


def test_a_triplet_is_found_its_streams_are_no_samples_and_a_clip_without_one_is_skipped(tiny_model, tmp_path,
                                                                                           caplog):
    folder = _triplet(tmp_path / "data")
    shutil.copy(folder / "001.mp4", folder / "002.mp4")  # no driving video, no reference: skipped and counted
    (folder / "001_driving.txt").write_text("a blue circle moving right", encoding="utf-8")
    verdict = _verdict(tiny_model, folder, tmp_path)
    assert not verdict.error and [s.media_path.name for s in verdict.files] == ["001.mp4", "002.mp4"]
    assert {item.sample.media_path.name for item in verdict.items} == {"001.mp4"}
    t = triplet_for(folder / "001.mp4")
    assert (t.target.name, t.driving.name, t.reference.name, t.driving_caption) == (
        "001.mp4", "001_driving.mp4", "001_reference.png", "a blue circle moving right")
    assert verdict.summary() == "2 files: 1 usable, 1 skipped (missing file: 1)"
    assert "no driving video '002_driving.mp4'" in caplog.text
    assert frame_psnr(folder / "001.mp4", folder / "001_driving.mp4") < 20  # another performance: far under


@pytest.mark.parametrize("copy", ["same file", "resized"])
def test_a_target_used_as_its_own_driving_video_is_refused_in_one_line(tiny_model, tmp_path, copy):
    folder = _triplet(tmp_path / "data")
    target = render_clip("square", "red", "left to right", 17, 64, 64)
    if copy == "same file":
        shutil.copy(folder / "001.mp4", folder / "001_driving.mp4")
    else:
        write_video(folder / "001_driving.mp4", np.stack([cv2.resize(f, (96, 96)) for f in target]), 16.0)
    message = _verdict(tiny_model, folder, tmp_path).error
    assert "001_driving.mp4' is its target clip '001.mp4' itself" in message and "\n" not in message
    assert ("sha256" if copy == "same file" else "dB PSNR") in message
    if copy != "same file":
        assert frame_psnr(folder / "001.mp4", folder / "001_driving.mp4") >= COPY_PSNR_DB


def test_start_up_checks_an_animate_2_base_data_and_its_keys_in_one_line(tiny_model, tmp_path):
    data = tmp_path / "data"
    (data).mkdir()
    write_video(data / "001.mp4", render_clip("square", "red", "left to right", 17, 64, 64), 16.0)
    config = TrainConfig.from_dict(train_config_dict(tiny_model("animate_2"), data, tmp_path))
    with pytest.raises(UserError, match="no clip has its Animate-2 inputs beside it"):
        check_before_loading(config)
    _triplet(data)
    check_before_loading(config)  # the data checks out: the run may start
    with pytest.raises(UserError) as error:
        check_before_loading(TrainConfig.from_dict({**config.to_dict(), "last_frame_condition": True}))
    assert "'last_frame_condition' does not apply to a Wan2.2-Animate-2 base" in str(error.value)
    assert "\n" not in str(error.value)


def test_animate_2_lora_names_are_comfyuis_and_the_official_checkpoint_names_read_back():
    """Written: ComfyUI's names (Wan 2.1 I2V's, which its Animate-2 model keeps), read back under an Animate-2
    header; read too: the official checkpoint's in-context names (`blocks.N.block.self_attn.q`, DiffSynth-Studio's
    layout), which diffusers' single-file converter maps to the same modules."""
    import torch
    from diffusers.loaders.single_file_utils import convert_wan_animate_2_transformer_to_diffusers

    from modules.modelFile.lora_names import animate2_name, diffusers_to_wan_name, wan_to_diffusers_name
    from modules.synthetic.tiny_animate2 import tiny_animate2_transformer

    transformer = tiny_animate2_transformer()
    linears = [name for name, module in transformer.named_modules()
               if isinstance(module, torch.nn.Linear) and name.startswith("blocks.")]
    assert "blocks.1.self_attn.to_q" in linears and len(linears) == 2 * 12
    for name in linears:
        block, inner = name.split(".", 2)[1:]
        comfy = diffusers_to_wan_name(name)
        assert comfy is not None and not comfy.startswith(f"blocks.{block}.block."), name
        assert animate2_name(wan_to_diffusers_name(comfy)) == name  # Wan's module, renamed for Animate-2
        official = comfy.replace(f"blocks.{block}.", f"blocks.{block}.block.", 1)
        converted = convert_wan_animate_2_transformer_to_diffusers({f"model.diffusion_model.{official}.weight": 0})
        assert list(converted) == [f"{name}.weight"]
        assert wan_to_diffusers_name(official) == name
    assert diffusers_to_wan_name("blocks.0.attn1.to_q") == "blocks.0.self_attn.q"  # Wan's own names unchanged
    assert wan_to_diffusers_name("blocks.0.self_attn.q") == "blocks.0.attn1.to_q"


def test_the_memory_estimate_counts_both_streams_and_the_cached_driving_keys(tiny_model, tmp_path):
    import json

    from modules.modelSetup.memory_estimate import estimate, largest_tokens

    data = _triplet(tmp_path / "data")
    config = TrainConfig.from_dict(train_config_dict(tiny_model("animate_2"), data, tmp_path, frames=9,
                                                     resolution=[32, 32], gradient_checkpointing=True))
    transformer = json.loads((tiny_model("animate_2") / "transformer" / "config.json").read_text())
    per_frame, latent_frames = (32 // 8 // 2) ** 2, (9 - 1) // 4 + 1
    assert largest_tokens(transformer, {}, config)[0] == (2 * latent_frames + 1) * per_frame  # driving + 1 + video
    kv_cache = estimate(config).phases["training"]["activations.driving_kv_cache"] * 2 ** 30
    layers, dim = transformer["num_layers"], transformer["dim"]
    assert kv_cache == 2 * latent_frames * per_frame * dim * 2 * layers  # K and V, in bf16 (train_dtype AUTO on a GPU)
