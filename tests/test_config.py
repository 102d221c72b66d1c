"""Config: strict typing, suggestions, lossless round trip, presets, overrides, migrations, docs."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from modules.config.loading import MIGRATIONS, load_train_config, migrate
from modules.config.train_config import CONFIG_VERSION, TrainConfig
from modules.util.base_config import ConfigError
from modules.util.enum import ModelType, TimeUnit, TrainingMethod
from tests.conftest import REPO_ROOT


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_unknown_key_names_it_and_suggests_the_closest(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'learning_rte'; did you mean 'learning_rate'\?"):
        load_train_config(write(tmp_path, {"learning_rte": 1e-4}))


def test_unknown_nested_key_has_its_full_path(tmp_path):
    with pytest.raises(ConfigError, match=r"'concepts\[0\]\.pth'; did you mean 'concepts\[0\]\.path'"):
        load_train_config(write(tmp_path, {"concepts": [{"pth": "data"}]}))


@pytest.mark.parametrize("key, value, message", [
    ("epochs", "ten", "config key 'epochs' must be an integer, got 'ten'"),
    ("epochs", 1.5, "config key 'epochs' must be an integer, got 1.5"),
    ("latent_caching", "yes", "config key 'latent_caching' must be true or false"),
    ("learning_rate", "fast", "config key 'learning_rate' must be a number"),
    ("resolution", "480x832", "config key 'resolution' must be a list"),
])
def test_wrong_type_names_the_key(tmp_path, key, value, message):
    with pytest.raises(ConfigError) as error:
        load_train_config(write(tmp_path, {key: value}))
    assert str(error.value).startswith(message)


def test_enum_value_suggests_the_closest_member(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'WAN_2_2'"):
        load_train_config(write(tmp_path, {"model_type": "WAN22"}))


def test_enum_accepts_names_in_any_case(tmp_path):
    assert load_train_config(write(tmp_path, {"backup_after_unit": "step"})).backup_after_unit == TimeUnit.STEP


def test_integer_is_accepted_for_a_float_key(tmp_path):
    assert load_train_config(write(tmp_path, {"learning_rate": 1})).learning_rate == 1.0


@pytest.mark.parametrize("key, value", [("frames", 80), ("resolution", [480, 830]), ("batch_size", 0),
                                        ("min_sigma", 1.0)])
def test_invalid_values_are_rejected_by_name(tmp_path, key, value):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        load_train_config(write(tmp_path, {key: value}))


def test_lora_training_rejects_a_full_model_format(tmp_path):
    with pytest.raises(ConfigError, match="output_model_format"):
        load_train_config(write(tmp_path, {"training_method": "LORA", "output_model_format": "DIFFUSERS"}))


def test_json_round_trip_is_lossless():
    config = TrainConfig.from_dict({
        "model_type": "WAN_2_2", "training_method": "FINE_TUNE", "output_model_format": "DIFFUSERS",
        "concepts": [{"path": "a", "balancing": 3}], "samples": [{"prompt": "p", "frames": 5}],
        "e2v": {"e2v_type": "dual"}, "learning_rate": 3e-5, "lora_blocks": [0, 2],
    })
    data = json.loads(json.dumps(config.to_dict()))
    assert TrainConfig.from_dict(data) == config
    assert data["model_type"] == "WAN_2_2" and data["concepts"][0]["balancing"] == 3


def test_stable_top_level_keys_exist():
    keys = set(TrainConfig().to_dict())
    stable = {"model_type", "training_method", "base_model_name", "workspace_dir", "cache_dir",
              "output_model_destination", "output_model_format", "concepts", "epochs", "max_steps", "batch_size",
              "learning_rate", "seed", "continue_last_backup", "backup_after", "backup_after_unit",
              "dataset_config", "e2v"}
    assert stable <= keys


def test_preset_layers_under_the_config_and_overrides_win(tmp_path):
    preset = write(tmp_path, {"learning_rate": 2e-4, "epochs": 5, "lora_rank": 32}, "preset.json")
    config = write(tmp_path, {"epochs": 7})
    loaded = load_train_config(config, str(preset), ["lora_rank=8", "concepts.0.path=data"])
    assert (loaded.learning_rate, loaded.epochs, loaded.lora_rank) == (2e-4, 7, 8)
    assert loaded.concepts[0].path == "data"


def test_nested_objects_merge_key_by_key(tmp_path):
    preset = write(tmp_path, {"e2v": {"e2v_type": "vae", "target_layout": "joint"}}, "preset.json")
    loaded = load_train_config(write(tmp_path, {"e2v": {"e2v_type": "dual"}}), str(preset))
    assert (loaded.e2v.e2v_type, loaded.e2v.target_layout) == ("dual", "joint")


def test_every_shipped_preset_loads():
    presets = sorted((REPO_ROOT / "training_presets").glob("#*.json"))
    assert presets
    for preset in presets:
        load_train_config(preset=str(preset))


def test_shipped_preset_is_found_by_name():
    name = sorted((REPO_ROOT / "training_presets").glob("#*.json"))[0].stem
    assert load_train_config(preset=name) == load_train_config(preset=f"{name}.json")


def test_concepts_may_be_a_concept_file(tmp_path):
    concepts = write(tmp_path, [{"path": "videos", "repeats": 2}], "concepts.json")
    loaded = load_train_config(write(tmp_path, {"concepts": str(concepts)}))
    from modules.config.loading import load_concepts

    assert load_concepts(loaded.concepts)[0].balancing == 2  # the old name `repeats` is read as balancing


def test_migration_upgrades_an_old_file(tmp_path):
    assert 0 in MIGRATIONS
    migrated = migrate({"config_version": 0, "concept_file_name": "concepts.json"}, "old.json")
    assert migrated == {"config_version": CONFIG_VERSION, "concepts": "concepts.json"}


def test_a_newer_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="config_version"):
        load_train_config(write(tmp_path, {"config_version": CONFIG_VERSION + 1}))


def test_defaults_are_the_documented_ones():
    config = TrainConfig()
    assert (config.model_type, config.training_method, config.max_steps) == (ModelType.AUTO, TrainingMethod.LORA, 0)


def test_config_docs_are_up_to_date():
    from scripts.generate_config_docs import render

    assert (REPO_ROOT / "docs" / "config.md").read_text(encoding="utf-8") == render(), \
        "docs/config.md is stale: run python scripts/generate_config_docs.py"


def test_cli_reports_a_bad_key_in_one_line_without_traceback(tmp_path):
    config = write(tmp_path, {"epohcs": 3})
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(config)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: unknown config key 'epohcs'; did you mean 'epochs'?"


def test_cli_reports_a_missing_model_folder(tmp_path):
    config = write(tmp_path, {"base_model_name": str(tmp_path / "nope"), "concepts": [{"path": str(tmp_path)}],
                              "workspace_dir": str(tmp_path / "ws")})
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(config)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "nope" in result.stderr.strip().splitlines()[-1]
