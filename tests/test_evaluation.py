"""The evaluation tool: each metric on constructed input with a known answer, the encoders from local folders,
and scripts/evaluate.py --compare-base end to end (metrics.json, index.html whose links all exist)."""
from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch

from modules.evaluation import metrics
from tests.comfyui_nodes import problems
from tests.conftest import REPO_ROOT, train_config_dict
from tests.run_paths import run_dir
from tests.script_runner import run_script


def moving_square(frames: int = 9, speed: int = 2, size: int = 48) -> np.ndarray:
    video = np.full((frames, size, size, 3), 40, np.uint8)
    for i in range(frames):
        x = 6 + speed * i
        video[i, 18:30, x:x + 12] = (220, 180, 60)
    return video


def pixel_embeddings(video: np.ndarray) -> torch.Tensor:
    """A transparent 'encoder': the centred pixels (so unrelated frames are near-orthogonal)."""
    flat = torch.from_numpy(video.reshape(len(video), -1).astype(np.float32))
    return flat - flat.mean()


def test_a_static_video_has_no_motion_and_full_consistency():
    still = np.repeat(moving_square()[:1], 9, axis=0)
    assert metrics.motion(still) == 0.0
    assert metrics.temporal_consistency(pixel_embeddings(still)) == pytest.approx(1.0)
    assert metrics.motion(still[:1]) is None and metrics.temporal_consistency(pixel_embeddings(still[:1])) is None


def test_motion_grows_with_speed_and_shuffling_lowers_consistency():
    slow, fast = moving_square(speed=1), moving_square(speed=3)
    assert 0 < metrics.motion(slow) < metrics.motion(fast)
    smooth = moving_square(frames=12, speed=2)
    shuffled = smooth[[0, 7, 2, 11, 4, 9, 1, 6, 3, 10, 5, 8]]
    assert metrics.temporal_consistency(pixel_embeddings(shuffled)) < metrics.temporal_consistency(
        pixel_embeddings(smooth))


def test_element_fidelity_and_text_alignment():
    video = moving_square()
    element = video[4]
    unrelated = np.random.default_rng(0).integers(0, 255, video[0].shape, dtype=np.uint8)
    frames = pixel_embeddings(np.concatenate([video, element[None], unrelated[None]]))
    assert metrics.element_fidelity(frames[-2], frames[:-2]) == pytest.approx(1.0)  # it appears in frame 4
    assert metrics.element_fidelity(frames[-1], frames[:-2]) < 0.5
    text = torch.tensor([1.0, 0.0])
    assert metrics.text_alignment(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]), text) == pytest.approx(100 / 3)


def test_an_element_pasted_into_frames_scores_higher_than_an_unrelated_image():
    checker = np.kron(np.indices((4, 4)).sum(0) % 2, np.ones((4, 4), int))[..., None] * np.array([250, 30, 200])
    element = np.full((48, 48, 3), 40, np.uint8)
    element[30:46, 16:32] = checker  # the reference: the element alone on a plain ground
    video = moving_square()
    pasted = video.copy()
    pasted[3:6, 30:46, 16:32] = checker  # beside the moving square, in frames 3-5 only
    unrelated = np.full_like(element, 40)
    unrelated[4:20, 28:44] = (30, 200, 90)

    def fidelity(image, frames):
        embeddings = pixel_embeddings(np.stack([image, *frames]))  # one centring for the image and its frames
        return metrics.element_fidelity(embeddings[0], embeddings[1:])

    scores = {"element": fidelity(element, pasted), "unrelated": fidelity(unrelated, pasted)}
    assert scores["element"] > 0.6 > scores["unrelated"]
    # the maximum over frames: without the frames that show it, the element scores as low as the unrelated image
    absent = fidelity(element, video)
    assert absent < 0.1


def test_measure_skips_text_alignment_with_a_note_without_a_clip_model(tmp_path):
    from modules.evaluation.encoders import clip_model
    from modules.evaluation.run import Encoders, Prompt, measure
    from modules.synthetic.tiny_eval_models import write_tiny_clip

    video, prompt = moving_square(), Prompt("a red square moving right")
    bare = Encoders()
    assert set(measure(video, prompt, bare, [])) == {"motion"}
    assert any("text alignment skipped" in note and "--clip-model" in note for note in bare.notes())
    image, text = clip_model(write_tiny_clip(tmp_path / "clip"), torch.device("cpu"))
    clip = Encoders(clip_image=image, clip_pair=(image, text))  # --clip-model's tower for every CLIP metric
    values = measure(video, prompt, clip, [video[2]])
    assert {"motion", "temporal_consistency", "text_alignment", "element_0_clip"} == set(values)
    assert all(np.isfinite(v) for v in values.values()) and 0 <= values["text_alignment"] <= 100
    assert not any("text alignment" in note for note in clip.notes())


def test_prompt_files_are_checked_before_any_model_loads(tmp_path):
    from modules.evaluation.prompts import read_prompts
    from modules.util.errors import UserError

    listed = tmp_path / "prompts.json"
    listed.write_text(json.dumps(["a cat", {"prompt": "a dog", "elements": [str(tmp_path / "gone.png")]}]))
    with pytest.raises(UserError, match=r"--prompts .* prompt 1: image .*gone\.png' does not exist"):
        read_prompts(listed)
    listed.write_text(json.dumps([{"prompt": "a dog", "seed": 3}]))
    with pytest.raises(UserError, match="entry 0 must be"):
        read_prompts(listed)
    text = tmp_path / "prompts.txt"
    text.write_text("# only a comment\n\n")
    with pytest.raises(UserError, match="holds no prompt"):
        read_prompts(text)


def test_sample_metrics_need_tensorboard(tmp_path):
    from modules.config.train_config import TrainConfig
    from modules.util.base_config import ConfigError

    values = train_config_dict(tmp_path / "model", tmp_path / "data", tmp_path, sample_metrics=True)
    with pytest.raises(ConfigError, match="'sample_metrics' writes to tensorboard"):
        TrainConfig.from_dict({**values, "tensorboard": False})
    assert TrainConfig.from_dict({**values, "tensorboard": True}).sample_metrics


def test_local_clip_and_dino_folders_embed_frames_and_text(tmp_path):
    from modules.evaluation.encoders import clip_model, dino_model
    from modules.synthetic.tiny_eval_models import write_tiny_clip, write_tiny_dino

    image, text = clip_model(write_tiny_clip(tmp_path / "clip"), torch.device("cpu"))
    dino = dino_model(write_tiny_dino(tmp_path / "dino"), torch.device("cpu"))
    video = moving_square()
    for encoder in (image, dino):
        frames = encoder.embed(list(video))
        assert frames.shape[0] == 9 and torch.isfinite(frames).all()
        same = encoder.embed([video[4]])[0]
        assert metrics.element_fidelity(same, frames) == pytest.approx(1.0, abs=1e-5)  # an exact frame: 1
    score = metrics.text_alignment(image.embed(list(video)), text.embed(["a red square moving right"])[0])
    assert 0 <= score <= 100
    from modules.util.errors import UserError

    with pytest.raises(UserError, match="--clip-model"):
        clip_model(tmp_path / "missing", torch.device("cpu"))


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        self.links += [value for key, value in attrs if key in ("src", "href")]


@pytest.mark.slow
def test_evaluate_compare_base_writes_metrics_and_a_report_whose_files_exist(tiny_model, tmp_path):
    from modules.config.train_config import TrainConfig
    from modules.synthetic.synthetic_data import write_video_dataset
    from modules.synthetic.tiny_eval_models import write_tiny_clip, write_tiny_dino
    from modules.trainer.GenericTrainer import GenericTrainer

    data = write_video_dataset(tmp_path / "data", count=1, frames=5, height=32, width=32)
    trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), data, tmp_path / "train",
                                                                     frames=5, max_steps=1)))
    trainer.start()
    trainer.train()
    lora = trainer.end()[0]
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# two prompts\na red cube moving left\n\na blue ball\n", encoding="utf-8")
    output = tmp_path / "report"
    command = [sys.executable, str(REPO_ROOT / "scripts" / "evaluate.py"), "--model", str(tiny_model("t2v")),
               "--lora", str(lora), "--prompts", str(prompts), "--seeds", "2", "--output", str(output),
               "--compare-base", "--clip-model", str(write_tiny_clip(tmp_path / "clip")),
               "--dino-model", str(write_tiny_dino(tmp_path / "dino")), "--frames", "5", "--height", "32",
               "--width", "32", "--steps", "2", "--device", "cpu"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((output / "metrics.json").read_text())
    assert len(report["videos"]) == 2 * 2 * 2  # models x prompts x seeds
    for video in report["videos"]:
        assert {"motion", "temporal_consistency", "text_alignment"} <= set(video["metrics"])
    assert set(report["means"]) == {"base", "trained"}
    assert report["means"]["base"]["motion"] >= 0
    parser = _Links()
    parser.feed((output / "index.html").read_text())
    assert len(parser.links) == 2 * len(report["videos"])  # a video and a strip each
    assert all((output / link).is_file() for link in parser.links)
    base = [v for v in report["videos"] if v["model"] == "base"][0]
    trained = [v for v in report["videos"] if v["model"] == "trained"][0]
    assert base["prompt"] == trained["prompt"] and base["seed"] == trained["seed"]
    assert (output / base["video"]).read_bytes() != (output / trained["video"]).read_bytes()  # the LoRA acts
    # a ComfyUI workflow beside each video: the trained run's loads the LoRA, the base run's none
    for video, loras in ((base, []), (trained, [(lora.name, 1.0)])):
        workflow = json.loads((output / video["video"]).with_suffix("").with_suffix(".workflow.json").read_text())
        assert problems(workflow) == []
        assert [(n["inputs"]["lora_name"], n["inputs"]["strength_model"]) for n in workflow.values()
                if n["class_type"] == "LoraLoaderModelOnly"] == loras


@pytest.mark.slow
def test_evaluate_e2v_elements_on_an_i2v_checkpoint_uses_its_image_encoder(tiny_model, tmp_path):
    from PIL import Image

    element = tmp_path / "subject.png"
    Image.fromarray(moving_square()[0]).save(element)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"prompt": "a cube", "elements": [str(element)]}]))
    output = tmp_path / "report"
    result = run_script("evaluate.py", "--model", str(tiny_model("i2v")), "--prompts", str(prompts), "--output",
                        str(output), "--frames", "17", "--height", "32", "--width", "32", "--steps", "2", "--device",
                        "cpu")  # in this process: the test above runs evaluate.py as a real one
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((output / "metrics.json").read_text())
    values = report["videos"][0]["metrics"]
    assert {"motion", "temporal_consistency", "element_0_clip"} <= set(values) and "text_alignment" not in values
    assert any("text alignment skipped" in note for note in report["notes"])
    assert report["encoders"]["clip_image"].startswith("checkpoint CLIP")


def test_samples_during_training_log_their_metrics(tiny_model, tmp_path):
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from modules.config.train_config import TrainConfig
    from modules.synthetic.synthetic_data import write_video_dataset
    from modules.trainer.GenericTrainer import GenericTrainer

    data = write_video_dataset(tmp_path / "data", count=1, frames=5, height=32, width=32)
    first = tmp_path / "first.png"
    Image.fromarray(moving_square(size=32)[0]).save(first)
    config = train_config_dict(tiny_model("i2v"), data, tmp_path / "run", frames=5, max_steps=1, tensorboard=True,
                               sample_at_end=True,
                               sample_metrics=True, samples=[{"prompt": "a cube", "image": str(first), "frames": 5,
                                                              "height": 32, "width": 32, "steps": 2}])
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    trainer.train()
    trainer.end()
    events = EventAccumulator(str(run_dir(tmp_path / "run" / "workspace") / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"sample_metrics/0/motion", "sample_metrics/0/temporal_consistency"} <= tags
    # the training sample's ComfyUI workflow: the I2V nodes and the LoRA this run writes
    workflows = sorted((run_dir(tmp_path / "run" / "workspace") / "samples").glob("*.workflow.json"))
    assert workflows and all(problems(json.loads(w.read_text(encoding="utf-8"))) == [] for w in workflows)
    nodes = json.loads(workflows[-1].read_text(encoding="utf-8")).values()
    assert {"WanImageToVideo", "CLIPVisionEncode", "LoadImage"} <= {n["class_type"] for n in nodes}
    assert [n["inputs"]["lora_name"] for n in nodes if n["class_type"] == "LoraLoaderModelOnly"] == \
        [Path(config["output_model_destination"]).name]
