"""`scripts/sample.py` faults (issue #10 items 6, 7, 13): a LoRA made for another variant is refused (or
forced with a warning), a missing expert sibling is named, a bad LoRA file or output path ends in one line
before the model loads where it can, and .gif / .webp outputs are real animations with no leftovers.
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from modules.config.train_config import SampleConfig
from modules.model.detection import detect_variant
from modules.model.WanModel import WanModel
from modules.modelFile.lora_checks import check_lora_file
from modules.modelFile.lora_formats import COMFY_LORA, LoRALayer, LoRAWeights, to_state_dict
from modules.modelLoader.lora_inference import attach_lora_for_inference
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.video_output import write_video_output
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
from modules.util.errors import UserError
from modules.util.video_write import write_video
from tests.conftest import REPO_ROOT
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)

T2V_TAG, A14B_TAG = "wan-2.1-t2v", "wan-2.2-a14b-t2v"  # `wantrainer.variant` as WanModelSaver writes it


def model_width(model_dir: Path) -> int:
    config = json.loads((model_dir / "transformer" / "config.json").read_text())
    return config["num_attention_heads"] * config["attention_head_dim"]


def lora_weights(width: int, rank: int = 4) -> LoRAWeights:
    generator = torch.Generator().manual_seed(0)
    down, up = torch.randn(rank, width, generator=generator), torch.randn(width, rank, generator=generator)
    return LoRAWeights({"blocks.0.attn1.to_q": LoRALayer(down, up, float(rank))})


def write_ours(path: Path, tag: str, width: int) -> Path:
    save_lora(lora_weights(width), path, COMFY_LORA, lora_metadata(tag))
    return path


def write_foreign(path: Path, width: int) -> Path:
    """A ComfyUI-style file: LoRA keys, no header metadata."""
    save_file(to_state_dict(lora_weights(width), COMFY_LORA), str(path))
    return path


def load(model_dir: Path) -> WanModel:
    return WanModelLoader().load(str(model_dir), torch.device("cpu"))


def small_sample() -> SampleConfig:
    return SampleConfig.from_dict({"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 2,
                                   "seed": 1}, "sample")


# --- the command line: one `error:` line, before the model loads ---------------------------------------

@pytest.fixture(scope="module")
def cli_runs(tiny_model, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """sample.py runs that must fail, all started at once (most of their time is importing torch)."""
    folder = tmp_path_factory.mktemp("cli")
    t2v_lora = write_ours(folder / "t2v.safetensors", T2V_TAG, model_width(tiny_model("t2v")))
    garbage = folder / "garbage.safetensors"
    garbage.write_bytes(bytes(range(256)) * 8)  # the first 8 bytes read as a huge header length
    (folder / "a_file").write_text("not a folder")
    cases = {
        "variant": (tiny_model("ti2v"), ["--lora", str(t2v_lora)], folder / "variant.mp4"),
        "garbage": (tiny_model("t2v"), ["--lora", str(garbage)], folder / "garbage.mp4"),
        "parent_is_file": (tiny_model("t2v"), [], folder / "a_file" / "out.gif"),
    }
    procs = {}
    for name, (model, extra, output) in cases.items():
        args = ["--model", str(model), "--prompt", "a red circle", "--frames", "5", "--height", "32", "--width",
                "32", "--steps", "2", "--output", str(output), *extra]
        procs[name] = subprocess.Popen([sys.executable, str(REPO_ROOT / "scripts" / "sample.py"), *args],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        runs[name] = (subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), cases[name][2])
    return runs


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "WanModelLoader: loading" not in result.stderr  # refused before any weights were read
    return errors[0]


def test_cli_refuses_a_lora_made_for_another_variant_in_one_line(cli_runs):
    result, output = cli_runs["variant"]
    error = one_error_line(result)
    assert "t2v.safetensors" in error and T2V_TAG in error and "ti2v" in error and "--force" in error
    assert not output.exists()


def test_cli_names_a_corrupt_lora_file_in_one_line(cli_runs):
    error = one_error_line(cli_runs["garbage"][0])
    assert "garbage.safetensors" in error and "header too large" in error and "not a valid .safetensors" in error


def test_cli_refuses_an_output_whose_parent_is_a_file_in_one_line(cli_runs):
    result, output = cli_runs["parent_is_file"]
    error = one_error_line(result)
    assert str(output) in error and f"'{output.parent}' is a file, not a folder" in error


# --- LoRA metadata against the model -------------------------------------------------------------------

@pytest.mark.parametrize("tag, model_variant", [(T2V_TAG, "ti2v"), (T2V_TAG, "i2v"), (A14B_TAG, "t2v"),
                                                (T2V_TAG, "a14b")])
def test_lora_for_another_variant_is_refused_from_its_header(tiny_model, tmp_path, tag, model_variant):
    name = "lora_high_noise.safetensors" if tag == A14B_TAG else "lora.safetensors"
    path = write_ours(tmp_path / name, tag, model_width(tiny_model(model_variant)))
    with pytest.raises(UserError) as error:
        check_lora_file(path, detect_variant(tiny_model(model_variant)), force_option="--force")
    message = str(error.value)
    assert "\n" not in message and str(path) in message and f"made for {tag}" in message


def test_force_applies_a_lora_made_for_another_variant_with_a_warning(tiny_model, tmp_path, caplog):
    path = write_ours(tmp_path / "t2v.safetensors", T2V_TAG, model_width(tiny_model("ti2v")))
    model = load(tiny_model("ti2v"))
    with caplog.at_level(logging.WARNING):
        attach_lora_for_inference(model, path, force=True)
    assert "lora" in model.transformer.peft_config
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(path) in warning and T2V_TAG in warning and "anyway" in warning


def test_lora_without_variant_metadata_is_applied_with_an_info_line(tiny_model, tmp_path, caplog):
    path = write_foreign(tmp_path / "comfy.safetensors", model_width(tiny_model("t2v")))
    model = load(tiny_model("t2v"))
    with caplog.at_level(logging.INFO, logger="modules.modelLoader.lora_inference"):
        attach_lora_for_inference(model, path)
    assert "lora" in model.transformer.peft_config
    assert any(str(path) in r.getMessage() and "not checked" in r.getMessage() for r in caplog.records)


def test_missing_low_noise_sibling_is_warned_in_one_line(tiny_model, tmp_path, caplog):
    high = write_ours(tmp_path / "lora_high_noise.safetensors", A14B_TAG, model_width(tiny_model("a14b")))
    model = load(tiny_model("a14b"))
    with caplog.at_level(logging.WARNING):
        attach_lora_for_inference(model, high)
    assert "high" in model.transformer.peft_config and not hasattr(model.transformer_2, "peft_config")
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "low-noise expert" in warning and str(tmp_path / "lora_low_noise.safetensors") in warning


# --- LoRA files that do not fit: one line each ---------------------------------------------------------

def test_single_lora_without_metadata_on_a_two_expert_model_names_the_expert_files(tiny_model, tmp_path):
    path = write_foreign(tmp_path / "comfy.safetensors", model_width(tiny_model("a14b")))
    with pytest.raises(UserError) as error:
        attach_lora_for_inference(load(tiny_model("a14b")), path)
    message = str(error.value)
    assert "\n" not in message and "comfy_high_noise.safetensors" in message and "comfy_low_noise" in message


def test_lora_of_another_model_size_is_one_line(tiny_model, tmp_path, capfd):
    path = write_foreign(tmp_path / "wide.safetensors", model_width(tiny_model("t2v")) + 16)
    with pytest.raises(UserError) as error:
        attach_lora_for_inference(load(tiny_model("t2v")), path)
    message = str(error.value)
    assert "\n" not in message and str(path) in message and "size mismatch for blocks.0.attn1.to_q" in message
    assert "unsuccessful" not in capfd.readouterr().err  # diffusers' own report of the same error stays quiet


def test_safetensors_file_without_lora_keys_is_refused_from_its_header(tiny_model, tmp_path):
    path = tmp_path / "unrelated.safetensors"
    save_file({"foo.bar": torch.zeros(3)}, str(path))
    with pytest.raises(UserError) as error:
        check_lora_file(path, detect_variant(tiny_model("t2v")))
    message = str(error.value)
    assert "\n" not in message and str(path) in message and "not a usable LoRA file" in message


# --- video outputs -------------------------------------------------------------------------------------

def distinct_frames(count: int, size: int = 32) -> np.ndarray:
    return np.stack([np.full((size, size, 3), 40 * i, np.uint8) for i in range(count)])


def test_gif_sample_has_every_frame_and_leaves_no_temp_files(tiny_model, tmp_path):
    output = tmp_path / "sample.gif"
    WanModelSampler(load(tiny_model("t2v"))).sample_to_file(small_sample(), output, show_progress=False)
    with Image.open(output) as gif:
        assert gif.n_frames == 5 and abs(gif.info["duration"] - 1000 / 16) < 10 and gif.info["loop"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample.gif", "sample.png"]


def test_webp_output_is_animated_at_the_given_fps(tmp_path):
    write_video_output(tmp_path / "clip.webp", distinct_frames(4), fps=24)
    with Image.open(tmp_path / "clip.webp") as webp:
        webp.seek(1)
        webp.load()  # the frame's duration is known once it is decoded
        assert webp.n_frames == 4 and webp.info["duration"] == round(1000 / 24)
    assert [p.name for p in tmp_path.iterdir()] == ["clip.webp"]


def test_unsupported_output_extension_is_refused_before_generating(tiny_model, tmp_path, monkeypatch):
    sampler = WanModelSampler(load(tiny_model("t2v")))
    monkeypatch.setattr(sampler, "generate", lambda *a, **k: pytest.fail("generated before checking the output"))
    with pytest.raises(UserError) as error:
        sampler.sample_to_file(small_sample(), tmp_path / "sample.avi")
    assert ".mp4, .gif, .webp" in str(error.value) and "sample.avi" in str(error.value)


def test_mp4_writer_never_falls_back_to_an_image_sequence(tmp_path):
    with pytest.raises(OSError):  # opencv's image-sequence writer would take the digits as a frame number
        write_video(tmp_path / "clip 12.gif", distinct_frames(3), fps=16)
    assert list(tmp_path.iterdir()) == []
