"""scripts/dataset_stats.py and scripts/estimate_vram.py on an E2V config read its dataset JSON (they counted 0 items
and estimated the default 480x832x81); estimate_vram.py refuses a GPU size that is not one."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
from tests.conftest import REPO_ROOT, train_config_dict
from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / script), *args], capture_output=True,
                          text=True, timeout=300)


def test_dataset_stats_counts_an_e2v_configs_datasets(tiny_model, tmp_path):
    data = write_e2v_dataset(tmp_path / "data", count=3, frames=17, height=32, width=32)
    (data / "002.txt").unlink()  # a missing caption
    document = e2v_dataset_json(data, 32, 32, 17)
    held_out = json.loads(json.dumps(document["datasets"][0]))
    held_out["type"] = "VALIDATION"
    document["datasets"].append(held_out)
    dataset = tmp_path / "dataset.json"
    dataset.write_text(json.dumps(document))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(train_config_dict(tiny_model("t2v"), data, tmp_path / "run", concepts=[],
                                                   dataset_config=str(dataset))))
    result = run("dataset_stats.py", "--config-path", str(config), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    trained, validation = report["concepts"]
    assert (trained["name"], trained["type"], validation["type"]) == ("datasets[0]", "STANDARD", "VALIDATION")
    # 17 frames at 16 fps: HEAD trains each sample once, the references (1 + 4 + 4 frames) inside its 17
    assert trained["files"] == trained["samples"] == trained["items"] == 3
    assert trained["items_per_length"] == {"17": 3} and trained["buckets"] == {"32x32, 17 frames": 3}
    assert trained["captions"]["missing"] == 1 and trained["skipped"] == {}
    assert report["items"] == 3  # the validation dataset is not trained on


def test_estimate_vram_takes_an_e2v_configs_resolution_and_frames_from_its_dataset(tmp_path):
    folder = write_config_folder(tmp_path / "wan-1.3b", TRANSFORMER_1_3B)
    dataset = tmp_path / "dataset.json"
    dataset.write_text(json.dumps(e2v_dataset_json(tmp_path / "data", 256, 448, 33)))
    e2v = tmp_path / "e2v.json"
    e2v.write_text(json.dumps({"base_model_name": str(folder), "dataset_config": str(dataset)}))
    plain = tmp_path / "plain.json"  # what the dataset trains at, as a clips config
    plain.write_text(json.dumps({"base_model_name": str(folder), "resolution": [256, 448], "frames": 33}))
    reports = []
    for config in (e2v, plain):
        result = run("estimate_vram.py", "--config-path", str(config), "--gpu-gib", "80", "--json")
        assert result.returncode == 0, result.stderr[-2000:]
        reports.append(json.loads(result.stdout))
    assert reports[0]["terms"] == reports[1]["terms"]  # before: the E2V config was estimated at 480x832x81


@pytest.mark.parametrize("value", ["-5", "nan"])
def test_estimate_vram_refuses_a_gpu_size_that_is_not_one(tmp_path, value):
    result = run("estimate_vram.py", "--config-path", str(tmp_path / "any.json"), "--gpu-gib", value)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: --gpu-gib must be the GPU's memory in GiB")


def test_an_e2v_config_is_sized_at_its_trained_datasets(tmp_path):
    """The script and the GUI's estimate take the config through with_dataset_shapes."""
    from modules.config.e2v_dataset_config import with_dataset_shapes
    from modules.config.train_config import TrainConfig

    document = e2v_dataset_json(tmp_path / "data", 256, 448, 33)
    held_out = {**json.loads(json.dumps(document["datasets"][0])), "type": "VALIDATION", "max_frames": 81}
    document["datasets"].append(held_out)
    dataset = tmp_path / "dataset.json"
    dataset.write_text(json.dumps(document))
    sized = with_dataset_shapes(TrainConfig.from_dict({"dataset_config": str(dataset)}))
    assert (sized.resolution, sized.frames) == ([[256, 448]], [33])
    plain = TrainConfig()
    assert with_dataset_shapes(plain) is plain
