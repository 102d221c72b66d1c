"""Configs a careless or hostile user writes: each ends in one line naming the key or file, never a traceback."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from modules.config.e2v_dataset_config import load_dataset_config
from modules.config.loading import MAX_JSON_DEPTH, json_depth, load_concepts, load_train_config
from modules.util.base_config import ConfigError
from tests.conftest import REPO_ROOT

DEEP = "[" * 200_000 + "]" * 200_000  # valid JSON that overflows json's recursive parser


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_dotted_key_into_a_number_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"'epochs.x': 'epochs' holds 1, not an object or list"):
        load_train_config(write(tmp_path, {"epochs": 1}), overrides=["epochs.x=1"])


def test_a_dotted_key_into_a_concept_file_says_to_edit_the_file(tmp_path):
    concepts = write(tmp_path, [{"path": "videos"}], "concepts.json")
    with pytest.raises(ConfigError, match=r"'concepts.0.path': 'concepts' is the concept file .*concepts.json"):
        load_train_config(write(tmp_path, {"concepts": str(concepts)}), overrides=["concepts.0.path=X"])


@pytest.mark.parametrize("version", [-1, True, 1.5])
def test_a_config_version_below_zero_or_not_whole_is_refused(tmp_path, version):
    with pytest.raises(ConfigError, match="config_version.*whole number from 0"):
        load_train_config(write(tmp_path, {"config_version": version}))


def test_json_depth_counts_nesting_without_recursion_and_ignores_brackets_in_strings():
    assert json_depth(DEEP) == 200_000
    assert json_depth('{"a": ["[[[[", {"b": "\\"[["}]}') == 3
    assert json_depth('"[]"') == 0


@pytest.mark.parametrize("reader,what", [(load_train_config, "config file"), (load_concepts, "concept file"),
                                         (load_dataset_config, "dataset config file")])
def test_very_deep_json_is_refused_in_one_line(tmp_path, reader, what):
    path = write(tmp_path, DEEP, "deep.json")
    with pytest.raises(ConfigError, match=f"{what} '.*deep.json' nests lists/objects more than {MAX_JSON_DEPTH}"):
        reader(path)


def test_very_deep_json_in_a_config_value_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--config-value 'samples' nests"):
        load_train_config(write(tmp_path, {}), overrides=[f"samples={DEEP}"])


def test_the_guis_load_config_and_dataset_refuse_very_deep_json(tmp_path):
    from modules.ui.controllers.config_controller import ConfigController
    from modules.ui.controllers.e2v_dataset import DatasetController

    path = write(tmp_path, DEEP, "deep.json")
    with pytest.raises(ConfigError, match="nests lists/objects"):
        ConfigController(tmp_path / "presets").load_file(path)
    with pytest.raises(ConfigError, match="nests lists/objects"):
        DatasetController().load(path)


def test_cli_refuses_very_deep_json_in_one_line(tmp_path):
    path = write(tmp_path, DEEP, "deep.json")
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: config file '{path}' nests")
