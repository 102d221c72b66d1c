"""E2V in SkyReels-V3's reference layout end to end on the tiny T2V base (issue #27 "Done when"): a LoRA run trains,
resumes exactly from its backup, saves, and samples through scripts/sample.py with dual guidance; and the start-up
checks refuse what the layout cannot take, in one line, before a model loads."""
from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from modules.config.train_config import TrainConfig
from modules.dataLoader.e2v.config_check import validate_e2v_config
from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import train_config_dict, trains_and_resumes_exactly
from tests.run_paths import run_dir
from tests.script_runner import run_script

SIZE, FRAMES = 32, 17


@pytest.fixture(scope="module")
def v3_data(tmp_path_factory):
    """(dataset JSON, data folder): A2's three elements, each one latent frame (vae.repeat 1)."""
    root = tmp_path_factory.mktemp("v3")
    data = write_e2v_dataset(root / "data", count=2, frames=FRAMES, height=SIZE, width=SIZE)
    dataset = e2v_dataset_json(data, SIZE, SIZE, FRAMES)
    for element in dataset["datasets"][0]["elements"]:
        element["vae"]["repeat"] = 1
    path = root / "dataset.json"
    path.write_text(json.dumps(dataset))
    return path, data


def v3_config(tiny_model, dataset, work, variant="t2v", **overrides) -> dict:
    values = {"dataset_config": str(dataset), "concepts": [], "epochs": 1, "e2v": {"reference_layout": "skyreels_v3"},
              "output_dtype": "FLOAT32", **overrides}
    return train_config_dict(tiny_model(variant), dataset, work, **values)


@pytest.mark.slow
def test_v3_layout_trains_resumes_saves_and_samples(tiny_model, v3_data, tmp_path):
    dataset, data = v3_data

    # the run's own sample at the end: two references, dual guidance, through the trainer's sampler
    sample = {"prompt": "a red circle", "elements": [str(data / "001_subject.png"), str(data / "001_object.png")],
              "frames": 9, "height": SIZE, "width": SIZE, "steps": 2, "cfg_scale": 3.0, "image_guidance_scale": 2.0}

    def make_trainer(name, **overrides):  # half the samples drop their references (a fixed draw, so resumes match)
        config = v3_config(tiny_model, dataset, tmp_path / name, backup_after=0, backup_after_unit="NEVER",
                           samples=[sample], sample_at_end=name == "full", **overrides,
                           e2v={"reference_layout": "skyreels_v3", "reference_dropout_probability": 0.5})
        return GenericTrainer(TrainConfig.from_dict(config))

    trainer = trains_and_resumes_exactly(make_trainer, step=1)
    assert trainer.data.appends and trainer.setup.full_train == {}  # the T2V base as it is: nothing expanded
    from modules.dataLoader.video_io import read_video_frames

    sampled = sorted((run_dir(tmp_path / "full" / "workspace") / "samples").rglob("*.mp4"))
    assert len(sampled) == 1 and len(read_video_frames(sampled[0])[0]) == 9
    lora = tmp_path / "full" / "output" / "lora.safetensors"
    with safe_open(str(lora), "pt") as f:
        keys, header = list(f.keys()), f.metadata()
    assert header["wantrainer.e2v_reference_layout"] == "skyreels_v3"  # sample.py's --reference-layout auto reads it
    assert keys and not any("patch_embedding" in k or "add_k_proj" in k for k in keys)
    assert not (tmp_path / "full" / "output" / "lora-i2v").exists()  # no I2V export: the layout is the base's

    out = tmp_path / "sample.mp4"
    args = ["--model", str(tiny_model("t2v")),
            "--lora", str(lora), "--prompt", "a red circle", "--frames", str(FRAMES), "--height", str(SIZE),
            "--width", str(SIZE), "--steps", "2", "--cfg-scale", "3", "--image-guidance-scale", "2",
            "--e2v-posterior", "sample", "--output", str(out), "--elements",
            *(str(data / f"001_{name}.png") for name in ("subject", "object", "background"))]
    result = run_script("sample.py", *args)  # in this process: tests/faults/test_sample_faults.py runs real ones
    assert result.returncode == 0, result.stderr[-2000:]
    frames, _ = read_video_frames(out)
    assert len(frames) == FRAMES  # the references are not frames of the video: nothing is dropped
    assert out.with_suffix(".png").is_file()


def _dataset_with(tmp_path, data, change) -> str:
    dataset = e2v_dataset_json(data, SIZE, SIZE, FRAMES)
    for element in dataset["datasets"][0]["elements"]:
        element["vae"]["repeat"] = 1
    change(dataset["datasets"][0])
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(dataset))
    return str(path)


def test_v3_layout_start_up_errors(tiny_model, v3_data, tmp_path):
    dataset, data = v3_data

    def check(expected, error=ConfigError, variant="t2v", **overrides):
        with pytest.raises(error, match=expected) as caught:
            validate_e2v_config(TrainConfig.from_dict(v3_config(tiny_model, overrides.pop("dataset", dataset),
                                                                tmp_path, variant, **overrides)))
        assert "\n" not in str(caught.value)

    check("e2v.e2v_type' is 'dual' but reference_layout 'skyreels_v3' has no CLIP",
          e2v={"reference_layout": "skyreels_v3", "e2v_type": "dual"})
    check("e2v.target_layout' is 'joint'", e2v={"reference_layout": "skyreels_v3", "target_layout": "joint"})
    check("element 'object' has vae.repeat 4 .* set its repeat to 1", dataset=_dataset_with(
        tmp_path, data, lambda d: d["elements"][1]["vae"].update(repeat=4)))
    five = [{"name": f"e{i}", "suffixes": [f"_e{i}.png"], "vae": {"position": i}} for i in range(5)]
    check("has 5 elements .* at most 4 references", dataset=_dataset_with(tmp_path, data,
                                                                        lambda d: d.update(elements=five)))
    check("base_model_name .* is an image-to-video .* use a T2V base", error=UserError, variant="i2v")
    check("is a VACE model", error=UserError, variant="vace")
    sample = {"prompt": "p", "frames": 9, "height": SIZE, "width": SIZE}
    check("samples\\[0\\].elements' lists 5 reference images but SkyReels-V3's layout takes 1 to 4", error=UserError,
          samples=[{**sample, "elements": ["a.png"] * 5}])
    check("samples\\[0\\].image_guidance_scale' is 2.0 but image guidance applies only to e2v.reference_layout",
          e2v={}, samples=[{**sample, "elements": ["a.png"], "image_guidance_scale": 2.0}])
    with pytest.raises(ConfigError, match="image_guidance_scale' is 2.0 but the sample has no elements"):
        TrainConfig.from_dict(v3_config(tiny_model, dataset, tmp_path, samples=[{**sample, "image_guidance_scale": 2}]))


def test_changing_the_reference_layout_refuses_a_resume(tmp_path):
    """The layout decides what trains on a T2V base (A2 expands its input layer, V3 does not): structural."""
    from modules.trainer.resume_check import STRUCTURAL_KEYS, unloadable_reason

    assert "e2v.reference_layout" in STRUCTURAL_KEYS
    reason = unloadable_reason(tmp_path, [("e2v.reference_layout", "a2", "skyreels_v3")], None, {})
    assert reason is not None and "e2v.reference_layout" in reason
    assert unloadable_reason(tmp_path, [("e2v.vae_posterior", "mode", "sample")], None, {}) is None
