"""Round 5's start-up causes and #50's deliverables 8-9: every error that needs no model comes from one check, each
with its config key (`start_up_problems`: what the GUI shows beside the field), before any model loads; the model
type is the checkpoint's; guidance_preserving works on Animate-2, and its scale, a sample's shift and the samples as
merged with sample_overrides are bounded; a run stopped by NaN losses names the real cause."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from modules.config.train_config import SampleConfig, TrainConfig
from modules.trainer.preflight import check_before_loading
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, train_config_dict
from tests.faults.test_fault_suite import make_trainer, one_thread  # noqa: F401  (autouse fixture)
from tests.test_animate2_training import triplets


def test_every_problem_that_needs_no_model_is_found_at_once_with_its_key(tiny_model, video_dataset, tmp_path):
    from modules.trainer.preflight import start_up_problems

    image = tmp_path / "ref.png"
    image.write_bytes(b"")
    values = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                               base_loras=[{"path": str(tmp_path / "missing.safetensors")},
                                           {"path": str(tmp_path / "missing2.safetensors"), "expert": "HIGH"}],
                               samples=[{"prompt": "a", "driving_video": str(image)}])
    problems = start_up_problems(TrainConfig.from_dict(values))
    assert [p.key for p in problems] == ["base_loras[0].path", "samples[0].driving_video"]
    assert problems[0].message.startswith("config key 'base_loras[0].path': '")
    assert "does not exist" in problems[0].message
    lora = tmp_path / "ok.safetensors"
    shutil.copy(next(Path(tiny_model("t2v")).glob("transformer/*.safetensors")), lora)  # not read: expert first
    values["base_loras"] = [{"path": str(lora), "expert": "HIGH"}]
    problems = start_up_problems(TrainConfig.from_dict(values))
    assert problems[0].key == "base_loras[0].expert"  # old code: never flagged on a one-transformer base
    assert "expert is HIGH but the t2v model has one transformer" in problems[0].message
    values["base_model_name"] = str(tmp_path / "nowhere")
    (problem, *_) = start_up_problems(TrainConfig.from_dict(values))
    assert problem.key == "base_model_name" and "does not exist" in problem.message


def test_an_animate_2_sample_without_its_driving_video_is_named_before_any_weights_load(tiny_model, tmp_path):
    from modules.trainer.preflight import start_up_problems

    data = triplets(tmp_path / "data")
    values = train_config_dict(tiny_model("animate_2"), data, tmp_path,
                               samples=[{"prompt": "a", "image": str(data / "001_reference.png")}])
    (problem,) = start_up_problems(TrainConfig.from_dict(values), data=False)
    assert problem.key == "samples[0].driving_video"
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "sample.py"), "--model",
                             str(tiny_model("animate_2")), "--prompt", "a", "--image", str(data / "001_reference.png"),
                             "--frames", "5", "--height", "32", "--width", "32", "--steps", "1",
                             "--output", str(tmp_path / "out.mp4")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    # old code: the same refusal came from the sampler, after the weights had loaded
    assert result.stderr.strip().splitlines()[-1].startswith("error: --driving-video: an Animate-2 model animates")
    assert "loading" not in result.stdout.lower()


def test_the_model_type_is_the_checkpoints(tiny_model, video_dataset, tmp_path):
    from modules.config.loading import load_train_config
    from modules.model.detection import detect_variant

    assert detect_variant(tiny_model("animate_2")).model_type.name == "WAN_2_2"  # Wan2.2-Animate-2 (old: WAN_2_1)
    wrong = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, model_type="WAN_2_2"))
    with pytest.raises(UserError) as error:  # old code: trained, model_type was decoration
        check_before_loading(wrong)
    assert str(error.value).startswith("config key 'model_type' is WAN_2_2, but base_model_name '")
    assert "is a WAN_2_1 checkpoint (t2v)" in str(error.value)
    data = triplets(tmp_path / "data")
    config_file = tmp_path / "mine.json"
    config_file.write_text(json.dumps(train_config_dict(tiny_model("animate_2"), data, tmp_path)), encoding="utf-8")
    preset = load_train_config(str(config_file), "#wan2.2 animate-2 14B lora",
                               [f"base_model_name={json.dumps(str(tiny_model('animate_2')))}"])
    assert preset.model_type.name == "WAN_2_2"
    check_before_loading(preset)  # the shipped preset starts on an Animate-2 base
    old = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path))
    assert old.model_type.name == "AUTO"
    presets = sorted((REPO_ROOT / "training_presets").glob("#wan2.2*.json"))
    assert presets and all(json.loads(p.read_text())["model_type"] == "WAN_2_2" for p in presets)


def test_a_config_of_an_older_version_gives_its_model_type_to_the_checkpoint(tmp_path):
    from modules.config.loading import load_train_config

    path = tmp_path / "old.json"
    path.write_text(json.dumps({"config_version": 3, "model_type": "WAN_2_1"}), encoding="utf-8")
    assert load_train_config(str(path)).model_type.name == "AUTO"


def test_guidance_preserving_trains_on_an_animate_2_base(tiny_model, tmp_path):
    data = triplets(tmp_path / "data")
    values = train_config_dict(tiny_model("animate_2"), data, tmp_path, frames=9, resolution=[32, 32], max_steps=1,
                               guidance_preserving={"scale": 3.0})
    from modules.trainer.GenericTrainer import GenericTrainer

    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()
    trainer.train()  # old code: TypeError in the unconditional pass at the first step
    trainer.close()
    assert trainer.progress.global_step == 1 and trainer.nonfinite_total == 0


def test_guidance_scale_shift_and_merged_sample_settings_are_bounded(tiny_model, video_dataset, tmp_path):
    base = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path)
    with pytest.raises(ConfigError, match=r"^config key 'guidance_preserving.scale' is 1e\+30, more than 100"):
        TrainConfig.from_dict({**base, "guidance_preserving": {"scale": 1e30}})
    with pytest.raises(ConfigError, match=r"^config key 'sample.shift' is 1e\+08, more than 100"):
        SampleConfig.from_dict({"prompt": "a", "shift": 1e8}, "sample")  # sample.py --shift: an all-black video
    with pytest.raises(ConfigError) as error:  # old code: the beta scheduler was dropped silently
        TrainConfig.from_dict({**base, "samples": [{"prompt": "a", "scheduler": "beta"}],
                               "sample_overrides": {"sampler": "diffusers_unipc"}})
    assert str(error.value).startswith("config key 'samples[0].scheduler' is 'beta' but sampler 'diffusers_unipc'")
    assert str(error.value).endswith("(with sample_overrides' sampler 'diffusers_unipc')")


def test_a_nan_stop_names_a_damaged_base_weight(tiny_model, video_dataset, tmp_path):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, epochs=4)
    trainer.start()
    with torch.no_grad():
        trainer.model.transformer.blocks[0].ffn.net[2].weight[0, 0] = float("nan")  # as a NaN int8 scale made it
    with pytest.raises(UserError) as error:
        trainer.train()
    trainer.close()
    assert "the base model's 'blocks.0.ffn.net.2.base_layer.weight' holds NaN/inf values" in str(error.value) or \
        "the base model's 'blocks.0.ffn.net.2.weight' holds NaN/inf values" in str(error.value), str(error.value)
    assert "lower learning_rate" not in str(error.value)  # old code: the advice that cannot help
