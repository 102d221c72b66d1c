"""scripts/dataset_stats.py: what each concept trains on, counted without loading a model."""
from __future__ import annotations

import json
import subprocess
import sys

from modules.synthetic.synthetic_data import write_video_dataset
from tests.conftest import REPO_ROOT, train_config_dict
from tests.test_frame_sampling import counting_clip


def stats(config: dict, path) -> dict:
    path.write_text(json.dumps(config))
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "dataset_stats.py"), "--config-path",
                             str(path), "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_counts_per_strategy_captions_and_skips(tiny_model, tmp_path):
    clip = counting_clip(tmp_path / "ten_seconds")  # 161 frames at 16 fps
    folder = write_video_dataset(tmp_path / "folder", count=2, frames=9, height=32, width=48)
    (folder / "001.txt").unlink()  # a missing caption
    (folder / "broken.mp4").write_bytes(b"not a video")
    (folder / "broken.txt").write_text("a broken clip")
    concepts = [{"path": str(clip), "name": "head"},
                {"path": str(clip), "name": "slide", "frame_sample_strategy": "SLIDE", "frame_stride": 17},
                {"path": str(clip), "name": "uniform", "frame_sample_strategy": "UNIFORM", "frame_windows": 4},
                {"path": str(clip), "name": "full", "frame_sample_strategy": "FULL", "max_frames": 161},
                {"path": str(clip), "name": "lengths", "frames": [17, 33], "repeats": 2},
                {"path": str(folder), "name": "folder"}]
    config = train_config_dict(tiny_model("t2v"), clip, tmp_path / "run", frames=17, concepts=concepts,
                               aspect_bucketing=False)
    report = stats(config, tmp_path / "config.json")
    by_name = {c["name"]: c for c in report["concepts"]}
    assert {name: by_name[name]["items"] for name in by_name} == \
        {"head": 1, "slide": 9, "uniform": 4, "full": 1, "lengths": 2 * 2, "folder": 2}
    assert by_name["full"]["items_per_length"] == {"161": 1}
    assert by_name["lengths"]["items_per_length"] == {"17": 2, "33": 2}  # HEAD at each length, repeated twice
    assert by_name["slide"]["buckets"] == {"32x32, 17 frames": 9}
    assert by_name["head"]["seconds"] == round(161 / 16, 3) and by_name["head"]["samples"] == 1
    folder_stats = by_name["folder"]
    assert folder_stats["files"] == 3 and folder_stats["samples"] == 2
    assert folder_stats["captions"] == {"missing": 1, "empty": 1, "truncated": 0}
    assert sum(folder_stats["skipped"].values()) == 1
    assert report["items"] == 1 + 9 + 4 + 1 + 4 + 2


def test_the_table_names_every_concept(tiny_model, tmp_path):
    clip = counting_clip(tmp_path / "clip", frames=33)
    config = train_config_dict(tiny_model("t2v"), clip, tmp_path / "run", frames=17)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "dataset_stats.py"), "--config-path",
                             str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "clips (standard" in result.stdout and "1 training items per epoch" in result.stdout
