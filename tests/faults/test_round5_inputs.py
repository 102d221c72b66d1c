"""Round 5, "inputs overwritten": no output of train.py may be a file the run reads (a base LoRA, a training clip,
the config file itself), with `overwrite_output: true` too; and the run's workspace, cache and output folders are
never read as data (a workspace inside the concept folder trained the next run on the last run's samples)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modules.config.train_config import TrainConfig
from modules.trainer.preflight import check_before_loading
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, train_config_dict
from tests.test_merge_lora import write_lora


def config_with(tiny_model, data, work, **overrides) -> TrainConfig:
    return TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), data, work, overwrite_output=True, **overrides))


def test_the_output_cannot_be_a_base_lora_file(tiny_model, video_dataset, tmp_path):
    lora = write_lora(tiny_model("t2v"), "t2v", tmp_path)
    config = config_with(tiny_model, video_dataset, tmp_path, base_loras=[{"path": str(lora)}],
                         output_model_destination=str(lora))
    with pytest.raises(UserError) as error:  # old code: the base LoRA was replaced by the trained one
        check_before_loading(config)
    assert str(error.value).startswith("config key 'output_model_destination' (overwrite_output true) '")
    assert "is the same path as config key 'base_loras[0].path'" in str(error.value)
    from modules.trainer.preflight import start_up_problems

    assert [p.key for p in start_up_problems(config, data=False)] == ["output_model_destination"]


def test_the_output_cannot_be_a_training_clip(tiny_model, video_dataset, tmp_path):
    data = Path(shutil.copytree(video_dataset, tmp_path / "data"))
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text(json.dumps({"path": str(data / "001.mp4"), "prompt": "a clip"}) + "\n", encoding="utf-8")
    for concept, clip in ((data, data / "000.mp4"), (manifest, data / "001.mp4")):
        config = config_with(tiny_model, concept, tmp_path, output_model_destination=str(clip))
        with pytest.raises(UserError, match=r"is the same (file|path) as config key 'concepts\[0\].path'"):
            check_before_loading(config)  # old code: the clip was overwritten with LoRA weights


def test_the_output_cannot_be_the_config_file(tiny_model, video_dataset, tmp_path):
    config_file = tmp_path / "my.json"
    values = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, overwrite_output=True,
                               output_model_destination=str(config_file))
    config_file.write_text(json.dumps(values), encoding="utf-8")
    before = config_file.read_bytes()
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--config-path",
                             str(config_file)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "is the same path as --config-path" in line
    assert config_file.read_bytes() == before  # old code: the config became a LoRA file


def test_without_overwrite_an_existing_input_is_never_the_output(tiny_model, video_dataset, tmp_path):
    lora = write_lora(tiny_model("t2v"), "t2v", tmp_path)
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                                     base_loras=[{"path": str(lora)}],
                                                     output_model_destination=str(lora)))
    check_before_loading(config)  # the save numbers its name: lightning-2.safetensors


def test_a_workspace_inside_the_concept_folder_is_not_data(tiny_model, video_dataset, tmp_path):
    from modules.dataLoader.verdict import DataVerdict
    from modules.util.video_write import write_video
    from modules.synthetic.synthetic_data import render_clip

    data = Path(shutil.copytree(video_dataset, tmp_path / "data"))
    samples = data / "workspace" / "run-1" / "samples"
    samples.mkdir(parents=True)
    for name in ("step-00000010-0.mp4", "step-00000020-0.mp4"):  # the last run's samples
        write_video(samples / name, render_clip("circle", "red", "left to right", 9, 32, 32), 16.0)
    (data / "cache").mkdir()
    write_video(data / "cache" / "stray.mp4", render_clip("circle", "red", "left to right", 9, 32, 32), 16.0)
    config = TrainConfig.from_dict(train_config_dict(
        tiny_model("t2v"), data, tmp_path, workspace_dir=str(data / "workspace"), cache_dir=str(data / "cache"),
        concepts=[{"path": str(data), "include_subdirectories": True}]))
    (verdict,) = DataVerdict(config).all()
    assert sorted(s.media_path.name for s in verdict.files) == ["000.mp4", "001.mp4", "002.mp4"]  # old code: 5 + 1
    assert verdict.usable == 3
