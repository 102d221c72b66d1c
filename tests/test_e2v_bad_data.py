"""E2V bad data (docs/e2v.md §7): a training run over a folder that mixes good samples with broken ones
finishes, skipping and counting each broken sample; config errors stop before any model loads; and
scripts/preview_e2v.py writes what the trainer feeds the transformer, or a one-line error."""
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
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.synthetic.synthetic_data import e2v_dataset_json, render_clip, write_e2v_dataset
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from modules.util.video_write import write_video
from tests.conftest import REPO_ROOT, train_config_dict
from tests.test_pixel_budget import huge_png

F, H, W = 17, 32, 32
T = (F - 1) // 4 + 1
GOOD = ["001", "002", "003"]  # 001 has an empty caption: not an error, it trains with an empty prompt
BROKEN = {  # sample -> (skip category, the file the skip names)
    "004": ("unreadable video", "004.mp4"),  # an mp4 cut in half (no moov atom)
    "005": ("unreadable video", "005.mp4"),  # random bytes named .mp4
    "006": ("too few frames", "006.mp4"),  # 3 frames; a fixed F = 17 with K = 3 reference latents needs 17 − 12 = 5
    "007": ("unreadable image", "007_subject.png"),  # garbage bytes named .png
    "008": ("missing element", "008.mp4"),  # the required subject image is absent
    "009": ("too many pixels", "009_subject.png"),  # its header declares 20000x20000: refused before decoding
}


def dataset_json(data_root: Path, **changes) -> dict:
    data = e2v_dataset_json(data_root, H, W, F)
    data["datasets"][0].update({"auto_frame_buckets": False, "frames": F, **changes})
    return data


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("e2v-bad")
    data = write_e2v_dataset(work / "data", count=len(GOOD) + len(BROKEN), frames=F, height=H, width=W)
    (data / "001.txt").write_text("", encoding="utf-8")
    good = (data / "002.mp4").read_bytes()
    (data / "004.mp4").write_bytes(good[: len(good) // 2])
    (data / "005.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    (data / "006.mp4").unlink()
    write_video(data / "006.mp4", render_clip("circle", "red", "left to right", 3, H, W), 16.0)
    (data / "007_subject.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (data / "008_subject.png").unlink()
    huge_png(data / "009_subject.png")
    (work / "dataset.json").write_text(json.dumps(dataset_json(data)))
    return work


def e2v_config(model_dir: Path, work: Path, dataset: Path, **overrides) -> TrainConfig:
    config = train_config_dict(model_dir, work / "unused", work, dataset_config=str(dataset), concepts=[],
                               resolution=[H, W], frames=F, epochs=1, train_device="cpu")
    config.update(overrides)
    return TrainConfig.from_dict(config)


@pytest.fixture(scope="module")
def trained(tiny_model, mixed):
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect(logging.WARNING)
    logging.getLogger().addHandler(handler)
    try:
        trainer = GenericTrainer(e2v_config(tiny_model("i2v"), mixed, mixed / "dataset.json"))
        trainer.start()
        trainer.train()
        outputs = trainer.end()
    finally:
        logging.getLogger().removeHandler(handler)
    return trainer, outputs, records


def test_run_over_bad_data_finishes_and_counts_each_skip(trained, mixed):
    trainer, outputs, records = trained
    assert trainer.progress.epoch == 1 and trainer.progress.global_step == len(GOOD)
    assert outputs and all(Path(p).is_file() for p in outputs)
    assert sorted(item.source["sample_id"] for item in trainer.data.items) == GOOD
    empty = next(item for item in trainer.data.items if item.source["sample_id"] == "001")
    assert empty.source["caption"] == ""  # trained with an empty prompt

    expected_counts: dict[str, int] = {}
    for category, _ in BROKEN.values():
        expected_counts[category] = expected_counts.get(category, 0) + 1
    assert trainer.skips.counts() == expected_counts
    entries = trainer.skips.entries
    assert sorted(Path(e.path).name for e in entries) == sorted(name for _, name in BROKEN.values())
    for entry in entries:
        category, _ = next(v for v in BROKEN.values() if v[1] == Path(entry.path).name)
        assert entry.category == category and entry.message and "\n" not in entry.message
    assert "'subject'" in next(e.message for e in entries if e.path.endswith("008.mp4"))
    # one warning line per skipped file, naming it
    skip_lines = [r.getMessage() for r in records if r.getMessage().startswith("skipping ")]
    for _, name in BROKEN.values():
        assert sum(name in line for line in skip_lines) == 1, name
    assert all("\n" not in line for line in skip_lines)


# --- config errors stop before any model loads ------------------------------------------------------------


@pytest.mark.parametrize("changes, key", [
    pytest.param({"frames": 5}, "datasets[0].frames", id="P>F"),
    pytest.param({"frames": 9}, "datasets[0]", id="P<=F-but-separate-needs-4K+1"),
    pytest.param({"elements": "centre_crop"}, "datasets[0].elements[2].vae.preprocess", id="bad-preprocess"),
])
def test_config_errors_stop_before_the_model_loads(tiny_model, mixed, tmp_path, monkeypatch, changes, key):
    data = dataset_json(mixed / "data", **{k: v for k, v in changes.items() if k != "elements"})
    if "elements" in changes:
        data["datasets"][0]["elements"][2]["vae"]["preprocess"] = changes["elements"]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the config error")

    monkeypatch.setattr("modules.trainer.GenericTrainer.WanModelLoader.load", no_model)
    trainer = GenericTrainer(e2v_config(tiny_model("i2v"), tmp_path, path))
    with pytest.raises(ConfigError) as error:
        trainer.start()
    message = str(error.value)
    assert isinstance(error.value, UserError) and "\n" not in message
    assert key in message and str(path) in message
    if "elements" in changes:
        assert "center_crop" in message  # the suggestion
    else:
        assert "frames" in message
    assert trainer.model is None


@pytest.mark.parametrize("elements, frames, key, hint", [
    # A2's layout: subject, object, background take 1 + 4 + 4 = 9 reference frames; "separate" needs 4·3 + 1
    pytest.param(3, 9, "samples[0].frames", "at least 13", id="references-fill-the-video"),
    pytest.param(4, 17, "samples[0].elements", "at most 3", id="more-elements-than-the-layout"),
])
def test_e2v_sample_errors_stop_before_the_model_loads(tiny_model, mixed, tmp_path, monkeypatch, elements, frames,
                                                       key, hint):
    """Regression: a sample whose frames hold only its reference frames crashed the run at its first sample (a
    ValueError from the video writer, nothing left after the references were dropped)."""
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the config error")

    monkeypatch.setattr("modules.trainer.GenericTrainer.WanModelLoader.load", no_model)
    images = [str(mixed / "data" / f"002_{role}.png") for role in ("subject", "object", "background", "subject")]
    sample = {"prompt": "p", "elements": images[:elements], "frames": frames, "height": H, "width": W}
    trainer = GenericTrainer(e2v_config(tiny_model("i2v"), tmp_path, mixed / "dataset.json", samples=[sample]))
    with pytest.raises(UserError) as error:
        trainer.start()
    message = str(error.value)
    assert "\n" not in message and f"'{key}'" in message and hint in message, message
    assert trainer.model is None


# --- scripts/preview_e2v.py ------------------------------------------------------------------------------


def preview_config(tiny_model, mixed: Path, **e2v) -> Path:
    """A train config file for the mixed folder sharing the trained run's cache (so no encoder runs again)."""
    config = {"base_model_name": str(tiny_model("i2v")), "dataset_config": str(mixed / "dataset.json"),
              "resolution": [H, W], "frames": F, "train_device": "cpu", "cache_dir": str(mixed / "cache"),
              "workspace_dir": str(mixed / "preview-workspace"), "e2v": e2v}
    path = mixed / f"preview-{'-'.join(e2v.values()) or 'default'}.json"
    path.write_text(json.dumps(config))
    return path


def run_preview(config: Path, sample: str, output: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "preview_e2v.py"), "--config-path", str(config),
                           "--sample", sample, "--output", str(output)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


def test_preview_script_writes_what_the_trainer_feeds(trained, tiny_model, mixed, tmp_path):
    trainer, _, _ = trained
    result = run_preview(preview_config(tiny_model, mixed), "002", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    tensors = load_file(tmp_path / "002.safetensors")
    assert set(tensors) == {"mask", "condition_latents", "clip_embeds", "target_latents"}
    assert tensors["mask"].shape == (4, T, H // 8, W // 8) and tensors["clip_embeds"].shape[0] == 3 * 257
    expected, references = trainer.data.preview("002")
    for key, value in expected.items():
        torch.testing.assert_close(tensors[key], value.float(), rtol=0, atol=1e-5)
    with Image.open(tmp_path / "002.png") as png:
        assert png.width >= references.shape[1] * W and png.height > H  # the 9 reference frames above the mask


def test_preview_of_an_unknown_sample_is_a_one_line_error(trained, tiny_model, mixed, tmp_path):
    result = run_preview(preview_config(tiny_model, mixed), "999", tmp_path)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "'999'" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "999.safetensors").exists()


def test_preview_of_the_clip_pathway_writes_tensors_without_a_png(trained, tiny_model, mixed, tmp_path, monkeypatch,
                                                                  capsys):
    """Regression: with e2v_type 'clip' there are no reference frames and no mask, and the PNG step crashed."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "scripts"))
    import preview_e2v

    config = preview_config(tiny_model, mixed, e2v_type="clip")
    monkeypatch.setattr(sys, "argv", ["preview_e2v.py", "--config-path", str(config), "--sample", "003",
                                      "--output", str(tmp_path)])
    assert preview_e2v.main() == 0
    assert set(load_file(tmp_path / "003.safetensors")) == {"clip_embeds", "target_latents"}
    assert not (tmp_path / "003.png").exists() and "no 003.png" in capsys.readouterr().out
