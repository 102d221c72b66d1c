"""Mistakes in a config end at start-up with one line naming the key or path — before any model loads —
instead of a traceback after loading and caching (issue #10, items 4, 10, 11, 15)."""
from __future__ import annotations

import codecs
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modules.config.loading import load_train_config
from modules.config.train_config import TrainConfig
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, train_config_dict


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if a model starts loading: every check here must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the config error was reported")

    monkeypatch.setattr(WanModelLoader, "load", refuse)


def start_error(config: dict) -> str:
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    try:
        with pytest.raises(UserError) as error:
            trainer.start()
    finally:
        trainer.close()
    message = str(error.value)
    assert "\n" not in message
    return message


# --- values out of range (item 10) ---------------------------------------------------------------------

@pytest.mark.parametrize("override, message", [
    ("learning_rate=-1", "config key 'learning_rate' must be greater than 0, got -1.0"),
    ("learning_rate=NaN", "config key 'learning_rate' must be a finite number, got nan"),
    ("learning_rate=Infinity", "config key 'learning_rate' must be a finite number, got inf"),
    ("optimizer_options.ADAMW.beta1=1.5", "config key 'optimizer_options.ADAMW.beta1' must be at least 0 and below 1, got 1.5"),
    ("optimizer_options.ADAMW.beta2=1", "config key 'optimizer_options.ADAMW.beta2' must be at least 0 and below 1, got 1.0"),
    ("lora_dropout=2.0", "config key 'lora_dropout' must be at least 0 and below 1, got 2.0"),
    ("fps=-5", "config key 'fps' must not be negative, got -5.0"),
    ("lora_alpha=0", "config key 'lora_alpha' must be greater than 0, got 0.0"),
    ("lora_alpha=-4", "config key 'lora_alpha' must be greater than 0, got -4.0"),
    ("optimizer_options.ADAMW.eps=0", "config key 'optimizer_options.ADAMW.eps' must be greater than 0, got 0.0"),
    ("weight_decay=-0.1", "config key 'weight_decay' must not be negative, got -0.1"),
    ("max_grad_norm=-1", "config key 'max_grad_norm' must not be negative, got -1.0"),
    ("rolling_backup_count=-1", "config key 'rolling_backup_count' must not be negative, got -1"),
    ("transparent_background=[255, 255]", "config key 'transparent_background' must be [r, g, b] with values 0-255"),
    ("samples.0.steps=0", "config key 'samples[0].steps' must be at least 1, got 0"),
    ("samples.0.cfg_scale=NaN", "config key 'samples[0].cfg_scale' must be a finite number, got nan"),
])
def test_out_of_range_values_are_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as error:
        load_train_config(overrides=[override])
    assert str(error.value).startswith(message)


def test_the_cli_reports_a_bad_value_in_one_line_with_exit_code_1(tiny_model, video_dataset, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path)))
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(config),
                          "--config-value", "optimizer_options.ADAMW.beta1=1.5"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr + run.stdout
    assert [line for line in run.stderr.splitlines() if line.startswith("error:")] == [
        "error: config key 'optimizer_options.ADAMW.beta1' must be at least 0 and below 1, got 1.5"]
    assert not (tmp_path / "workspace").exists()


# --- config files as editors save them (item 4) --------------------------------------------------------

@pytest.mark.parametrize("bom, encoding", [(codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                                           (codecs.BOM_UTF16_BE, "utf-16-be")])
def test_a_config_saved_with_a_byte_order_mark_loads(tmp_path, bom, encoding):
    path = tmp_path / "config.json"
    path.write_bytes(bom + json.dumps({"epochs": 7, "concepts": [{"path": "données"}]}).encode(encoding))
    config = load_train_config(path)
    assert config.epochs == 7 and config.concepts[0].path == "données"


def test_a_config_that_is_not_utf8_names_the_file_and_the_fix(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes('{"concepts": [{"path": "données"}]}'.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"config file '.*config.json' is not UTF-8 text .*: save it as UTF-8"):
        load_train_config(path)


# --- paths that are the wrong kind of thing (items 11, 15) --------------------------------------------

def test_a_config_path_that_is_a_folder_says_so(tmp_path):
    with pytest.raises(ConfigError, match=rf"config file '{tmp_path}' is a folder, not a JSON file"):
        load_train_config(tmp_path)


def test_a_base_model_that_is_a_file_says_what_was_expected(tiny_model, video_dataset, tmp_path, no_model_load):
    weights = tmp_path / "wan.safetensors"
    weights.write_bytes(b"\0" * 16)
    message = start_error(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, base_model_name=str(weights)))
    assert message.startswith(f"config key 'base_model_name': '{weights}' is a file, not a folder")
    assert "diffusers-format Wan folder" in message and "transformer_override" in message


def test_a_base_model_folder_without_model_index_says_so(tiny_model, video_dataset, tmp_path, no_model_load):
    message = start_error(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                            base_model_name=str(tiny_model("t2v") / "transformer")))
    assert "has no model_index.json" in message and "base_model_name" in message


def test_a_missing_input_file_names_its_key(tiny_model, video_dataset, tmp_path, no_model_load):
    message = start_error(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                            lora_weight_path=str(tmp_path / "nope.safetensors")))
    assert message == (f"config key 'lora_weight_path': '{tmp_path / 'nope.safetensors'}' does not exist: "
                       "set it to a .safetensors LoRA file")


@pytest.mark.parametrize("key, relative", [("workspace_dir", "blocker/run"), ("cache_dir", "blocker/cache"),
                                           ("output_model_destination", "blocker/out/lora.safetensors")])
def test_an_output_location_under_a_file_is_one_line_before_loading(tiny_model, video_dataset, tmp_path, key,
                                                                      relative, no_model_load):
    (tmp_path / "blocker").write_text("I am a file")
    message = start_error(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                            **{key: str(tmp_path / relative)}))
    assert message.startswith(f"config key '{key}': ")
    assert f"because '{tmp_path / 'blocker'}' is a file, not a folder" in message and "cannot create" in message


def test_an_output_file_path_that_is_a_folder_is_refused(tiny_model, video_dataset, tmp_path, no_model_load):
    (tmp_path / "out.safetensors").mkdir()
    message = start_error(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                            output_model_destination=str(tmp_path / "out.safetensors")))
    assert message.startswith(f"config key 'output_model_destination': '{tmp_path / 'out.safetensors'}' is a folder")


def _can_mount_read_only(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c",
                            f"mount --bind '{folder}' '{folder}' && mount -o remount,bind,ro '{folder}'"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.parametrize("key", ["workspace_dir", "output_model_destination"])
def test_an_output_location_on_a_read_only_filesystem_is_one_line(tiny_model, video_dataset, tmp_path, key):
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    if not _can_mount_read_only(read_only):
        pytest.skip("needs `unshare -rm` to mount a read-only folder")
    target = read_only / ("run" if key == "workspace_dir" else "lora.safetensors")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **{key: str(target)})))
    command = (f"mount --bind '{read_only}' '{read_only}' && mount -o remount,bind,ro '{read_only}' && "
               f"exec '{sys.executable}' '{REPO_ROOT / 'scripts' / 'train.py'}' --config-path '{config}'")
    run = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: config key '{key}': cannot write to ")
    assert "the filesystem is read-only" in errors[0]
    assert "loading model" not in run.stderr  # said before any model loaded
