"""Captioning (scripts/caption.py, modules/dataTools/captions.py, vlm.py): a tiny random Qwen3-VL runs the real
generate path on video clips; templates, trigger words and prefix removal; existing captions kept; every caption
written atomically, so a run killed with SIGKILL loses no finished caption and the next run does the rest."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from modules.dataTools.captions import CaptionOptions, caption_folder, find_jobs, finish
from modules.dataTools.model_source import resolve_model
from modules.dataTools.vlm import Media
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT
from tests.script_runner import run_script


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    from modules.synthetic.tiny_vlm import write_tiny_qwen3_vl

    return write_tiny_qwen3_vl(tmp_path_factory.mktemp("qwen") / "tiny-qwen3-vl")


@pytest.fixture(scope="module")
def captioner(tiny_qwen):
    from modules.dataTools.vlm import Qwen3VLCaptioner

    return Qwen3VLCaptioner(tiny_qwen, device="cpu", max_new_tokens=6)


def clips(folder, count: int = 3, frames: int = 17):
    from modules.synthetic.synthetic_data import write_video_dataset

    folder = write_video_dataset(folder, count=count, frames=frames, height=48, width=64)
    for caption in folder.glob("*.txt"):
        caption.unlink()
    return folder


class Echo:
    """A captioner that answers with a fixed text and records what it was asked."""

    sample_fps, max_frames = 2.0, 8

    def __init__(self, answer: str = "The video shows a red circle moving right."):
        self.answer, self.asked = answer, []

    def caption(self, media, prompts):
        self.asked += list(zip(media, prompts))
        return [self.answer] * len(prompts)


def test_the_tiny_qwen3_vl_captions_video_clips_through_generate(tmp_path, captioner):
    folder = clips(tmp_path / "clips")
    report = caption_folder(folder, captioner, CaptionOptions(batch_size=2), progress=False)
    assert report.written == 3
    texts = [p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))]
    assert len(texts) == 3 and all(t.endswith("\n") and t.strip() for t in texts)
    # one clip alone gives the same caption as in a batch of two (left padding, greedy decoding)
    alone = captioner.caption([Media(np.zeros((4, 48, 64, 3), np.uint8), 2.0)], ["Describe."])
    pair = captioner.caption([Media(np.zeros((4, 48, 64, 3), np.uint8), 2.0),
                              Media(np.full((6, 48, 64, 3), 200, np.uint8), 2.0)], ["Describe.", "Describe it."])
    assert alone[0] == pair[0]


def test_the_video_placeholder_is_the_one_transformers_builds(captioner):
    import torch
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.video_utils import VideoMetadata

    frames = np.random.default_rng(0).integers(0, 255, (5, 40, 72, 3), np.uint8)
    pixels, grid, stamps = captioner.video_input(Media(frames, 2.0))
    assert pixels.shape == (grid[0] * grid[1] * grid[2], 3 * 2 * 16 * 16) and grid[0] == 3  # 5 frames -> 3 groups
    assert abs(float(pixels.mean())) < 1.0  # normalised to about [-1, 1]
    stand_in = SimpleNamespace(video_processor=SimpleNamespace(merge_size=2, temporal_patch_size=2),
                               video_token="<|video_pad|>", vision_start_token="<|vision_start|>",
                               vision_end_token="<|vision_end|>",
                               _calculate_timestamps=lambda *a: Qwen3VLProcessor._calculate_timestamps(None, *a))
    metadata = VideoMetadata(total_num_frames=5, fps=2.0, frames_indices=list(range(5)))
    theirs = Qwen3VLProcessor.replace_video_token(stand_in, {"video_grid_thw": torch.tensor([grid]),
                                                             "video_metadata": [metadata]}, 0)
    ours = captioner._expand_video("<|video_pad|>", grid, stamps)
    assert ours == theirs and theirs.startswith("<0.2 seconds><|vision_start|>")


def test_a_still_image_goes_through_the_image_path(tmp_path, captioner):
    from PIL import Image

    Image.fromarray(np.full((40, 56, 3), 90, np.uint8)).save(tmp_path / "still.png")
    echo = Echo()
    caption_folder(tmp_path, echo, CaptionOptions(), progress=False)
    media, prompt = echo.asked[0]
    assert media.fps == 0 and len(media.frames) == 1 and "image" in prompt
    assert captioner.caption([media], [prompt])[0] is not None


def test_template_trigger_and_prefix_removal(tmp_path):
    folder = clips(tmp_path / "clips", count=2)
    echo = Echo()
    caption_folder(folder, echo, CaptionOptions(template="detailed", trigger="sks"), progress=False)
    assert (folder / "000.txt").read_text(encoding="utf-8") == "sks a red circle moving right.\n"
    assert echo.asked[0][1].startswith("Describe this video in detail")
    assert len(echo.asked[0][0].frames) == 3 and echo.asked[0][0].fps == 2.0  # 17 frames at 16 fps: 0, 0.5, 1 s
    assert finish("The clip shows: a dog", CaptionOptions(strip_prefixes=False)) == "The clip shows: a dog"
    assert finish("In this video, a dog runs", CaptionOptions()) == "a dog runs"


def test_a_long_clip_spreads_the_frame_budget_over_its_whole_length(tmp_path):
    from modules.dataTools.captions import load_media
    from modules.util.video_write import write_video

    frames = np.zeros((160, 16, 16, 3), np.uint8)
    frames[:, :, :, 0] = np.arange(160)[:, None, None]  # red = frame index: which frames were taken
    write_video(tmp_path / "long.mp4", frames, 16.0)  # 10 s: 21 frames at 2 fps, over Echo's budget of 8
    media = load_media(tmp_path / "long.mp4", Echo())
    assert len(media.frames) == 8 and media.fps == pytest.approx(0.8)
    assert media.frames[0, 0, 0, 0] < 8 and media.frames[-1, 0, 0, 0] > 130  # from the start to near the end


def test_existing_captions_are_kept_unless_asked(tmp_path):
    folder = clips(tmp_path / "clips", count=2)
    (folder / "000.txt").write_text("my own words", encoding="utf-8")
    report = caption_folder(folder, Echo("a new caption"), CaptionOptions(), progress=False)
    assert (report.kept, report.written) == (1, 1)
    assert (folder / "000.txt").read_text(encoding="utf-8") == "my own words"
    caption_folder(folder, Echo("a new caption"), CaptionOptions(overwrite=True), progress=False)
    assert (folder / "000.txt").read_text(encoding="utf-8") == "a new caption\n"
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temp left behind


def test_nothing_to_caption_loads_no_model(tmp_path):
    folder = clips(tmp_path / "clips", count=1)
    (folder / "000.txt").write_text("done", encoding="utf-8")

    def factory():
        raise AssertionError("the model was loaded")

    assert caption_folder(folder, factory, CaptionOptions(), progress=False).kept == 1


def test_element_aware_prompts_name_the_samples_elements(tmp_path):
    import json

    from modules.config.e2v_dataset_config import E2VDatasetFile
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset

    folder = write_e2v_dataset(tmp_path / "e2v", count=2, with_object=False)
    (folder / "001.elements.json").write_text(json.dumps({"elements": {"subject": {"prompt": "red circle"}}}))
    elements = tuple(E2VDatasetFile.from_dict(e2v_dataset_json(folder)).datasets[0].elements)
    options = CaptionOptions(overwrite=True, elements=elements)
    assert [j.media.name for j in find_jobs(folder, options)] == ["001.mp4", "002.mp4"]  # no element image
    echo = Echo()
    caption_folder(folder, echo, options, progress=False)
    assert echo.asked[0][1].endswith("Name these in the description, with the same words: subject (red circle), "
                                     "object, background.")
    assert echo.asked[1][1].endswith("subject, background.")  # 002 has no object image


def test_a_plain_folder_leaves_element_images_and_masks_out(tmp_path):
    folder = clips(tmp_path / "clips", count=1)
    shutil.copy(folder / "000.mp4", folder / "000-masklabel.mp4")
    from PIL import Image

    Image.new("RGB", (8, 8)).save(folder / "000_subject.png")
    Image.new("RGB", (8, 8)).save(folder / "photo.png")
    assert [j.media.name for j in find_jobs(folder, CaptionOptions())] == ["000.mp4", "photo.png"]


def test_a_model_is_a_local_folder_unless_a_download_is_asked_for(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="no local folder.*--download") as error:
        resolve_model("Qwen/Qwen3-VL-4B-Instruct", False, "captioning")
    assert "\n" not in str(error.value)
    import huggingface_hub

    def offline(*_args, **_kwargs):
        raise ConnectionError("Failed to resolve 'huggingface.co'")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="cannot reach the Hugging Face hub.*offline") as error:
        resolve_model("Qwen/Qwen3-VL-4B-Instruct", True, "captioning")
    assert "\n" not in str(error.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        resolve_model(str(tmp_path / "empty"), False, "captioning")


def captions(folder) -> list:
    """The finished captions (a write in flight is a hidden temp file beside them)."""
    return [p for p in folder.glob("*.txt") if not p.name.startswith(".")]


@pytest.mark.slow
def test_a_run_killed_with_sigkill_loses_no_finished_caption(tmp_path, tiny_qwen, captioner):
    folder = clips(tmp_path / "clips", count=8)
    reference = shutil.copytree(folder, tmp_path / "reference")
    caption_folder(reference, captioner, CaptionOptions(), progress=False)
    command = [sys.executable, str(REPO_ROOT / "scripts" / "caption.py"), str(folder), "--model", str(tiny_qwen),
               "--max-new-tokens", "6", "--no-progress", "--device", "cpu"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not captions(folder) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done = {p.name: (p.read_text(encoding="utf-8"), p.stat().st_mtime_ns) for p in captions(folder)}
    assert 1 <= len(done) < 8
    assert all(text == (reference / name).read_text(encoding="utf-8") for name, (text, _) in done.items())
    result = run_script("caption.py", str(folder), "--model", str(tiny_qwen), "--max-new-tokens", "6",
                        "--no-progress", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert f"{8 - len(done)} caption(s) written, {len(done)} kept" in result.stdout
    for name, (_, mtime) in done.items():
        assert (folder / name).stat().st_mtime_ns == mtime  # a finished caption is never written again
    assert {p.name: p.read_text(encoding="utf-8") for p in captions(folder)} == \
        {p.name: p.read_text(encoding="utf-8") for p in captions(reference)}
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
