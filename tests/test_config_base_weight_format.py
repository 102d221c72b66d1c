"""Config version 6: the old `fp8_base_weights` flag folded into `base_weight_format` (one control for how the frozen
base is stored): true is FP8 (fp8_scale still picks the scale), false goes, true beside INT8_CONVROT is refused in
one line naming both keys; old files, old presets, old GUI rows and old --config-value overrides read alike."""
from __future__ import annotations

import json

import pytest

from modules.config.loading import LEGACY_KEYS, load_train_config, migrate
from modules.config.train_config import CONFIG_VERSION, TrainConfig
from modules.util.base_config import ConfigError
from modules.util.enum import BaseWeightFormat, Fp8Scale
from tests.conftest import REPO_ROOT


def test_the_flag_is_no_key_of_the_current_config():
    assert CONFIG_VERSION == 6 and "fp8_base_weights" not in TrainConfig().to_dict()
    assert LEGACY_KEYS["fp8_base_weights"] == 5  # a file without config_version that holds it is of version 5


@pytest.mark.parametrize("old, expected", [
    ({"fp8_base_weights": True}, {"base_weight_format": "FP8"}),
    ({"fp8_base_weights": True, "base_weight_format": "BF16"}, {"base_weight_format": "FP8"}),  # an old saved file
    ({"fp8_base_weights": True, "fp8_scale": "CHANNEL"}, {"base_weight_format": "FP8", "fp8_scale": "CHANNEL"}),
    ({"fp8_base_weights": True, "base_weight_format": "FP8_SCALED"}, {"base_weight_format": "FP8_SCALED"}),
    ({"fp8_base_weights": False}, {}),
    ({"fp8_base_weights": False, "base_weight_format": "INT8_CONVROT"}, {"base_weight_format": "INT8_CONVROT"}),
])
def test_the_flag_migrates_into_base_weight_format(old, expected):
    assert migrate({"config_version": 5, **old}, "old.json") == {"config_version": CONFIG_VERSION, **expected}
    assert migrate(dict(old), "old.json") == expected  # no config_version: the old key says version 5
    assert TrainConfig.from_dict(dict(old)).to_dict() == TrainConfig.from_dict(expected).to_dict()  # a GUI row


@pytest.mark.parametrize("old, key", [
    ({"fp8_base_weights": True, "base_weight_format": "INT8_CONVROT"}, "base_weight_format"),
    ({"fp8_base_weights": "yes"}, "true or false"),
])
def test_a_contradiction_is_refused_in_one_line_naming_both_keys(old, key, tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"config_version": 5, **old}))
    with pytest.raises(ConfigError, match="config key 'fp8_base_weights'") as error:
        load_train_config(path)
    assert key in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="config key 'fp8_base_weights'"):
        TrainConfig.from_dict(dict(old))


def test_fp8_scaled_with_another_scale_is_still_refused_by_fp8_scale():
    with pytest.raises(ConfigError, match="config key 'fp8_scale' is CHANNEL, but base_weight_format FP8_SCALED"):
        TrainConfig.from_dict(migrate({"fp8_base_weights": True, "base_weight_format": "FP8_SCALED",
                                       "fp8_scale": "CHANNEL"}, "old.json"))


def test_an_old_preset_and_an_old_override_load(tmp_path):
    """A preset saved by an older WanTrainer (every key written, version 5, the flag true) trains the base in fp8; so
    does an old --config-value on the command line, over a current file."""
    shipped = json.loads((REPO_ROOT / "training_presets" / "#wan2.1 t2v 1.3B lora.json").read_text())
    saved = {**TrainConfig.from_dict(shipped).to_dict(), "config_version": 5, "fp8_base_weights": True,
             "fp8_scale": "TENSOR"}
    preset = tmp_path / "my old preset.json"
    preset.write_text(json.dumps(saved))
    loaded = load_train_config(preset=str(preset))
    assert loaded.base_weight_format == BaseWeightFormat.FP8 and loaded.fp8_scale == Fp8Scale.TENSOR
    assert loaded.fp8_base() and loaded.config_version == CONFIG_VERSION and loaded.lora_rank == 32
    current = tmp_path / "config.json"
    current.write_text(json.dumps({"lora_rank": 8}))
    overridden = load_train_config(current, str(preset), ["fp8_base_weights=false"])
    assert overridden.base_weight_format == BaseWeightFormat.FP8  # false only drops the flag: the preset's FP8 stays
    plain = load_train_config(current, overrides=["fp8_base_weights=true"])
    assert plain.base_weight_format == BaseWeightFormat.FP8 and plain.lora_rank == 8
