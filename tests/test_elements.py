"""E2V element images (scripts/make_elements.py, modules/dataTools/elements.py, element_images.py) and masks
(scripts/make_masks.py, masks.py): with a segmenter that returns a synthetic scene's true masks, the frame chosen,
the cut-out on white and the background plate are checked against the scene; a tiny random SAM 3 runs the real path."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from modules.config.e2v_dataset_config import E2VDatasetFile
from modules.dataLoader.video_io import read_image, read_video_frames
from modules.dataTools.element_images import background_plate, cut_out
from modules.dataTools.elements import ElementJob, ElementOptions, jobs_from_dataset, make_elements, parse_fill
from modules.dataTools.masks import MaskOptions, make_masks
from modules.synthetic.element_scene import BLUE, RED, SCENE_SIZE, ColourSegmenter, empty_background, scene
from modules.synthetic.shape_clips import psnr
from modules.util.errors import UserError
from modules.util.video_write import write_video
from tests.script_runner import run_script

H, W = SCENE_SIZE


def dataset_json(folder, background=True) -> E2VDatasetFile:
    elements = [{"name": "subject", "suffixes": ["_subject.png"], "required": True, "vae": {"repeat": 1, "position": 0}},
                {"name": "object", "suffixes": ["_object.png"], "vae": {"repeat": 4, "position": 1}}]
    if background:
        elements.append({"name": "background", "suffixes": ["_background.png"],
                         "vae": {"repeat": 4, "position": 2, "preprocess": "center_crop"}})
    data = {"datasets": [{"data_root": str(folder), "target_resolution": [64, 96], "max_frames": 81,
                          "elements": elements}]}
    return E2VDatasetFile.from_dict(data)


@pytest.fixture
def clip_folder(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    frames, _ = scene()
    write_video(folder / "001.mp4", frames, 16.0)
    return folder


def options(folder, **kwargs) -> ElementOptions:
    jobs = jobs_from_dataset(dataset_json(folder).datasets[0].elements, {"subject": "red disc", "object": "blue box"})
    return ElementOptions(jobs, **kwargs)


SEGMENTER = {"red disc": RED, "blue box": BLUE}


def test_the_subject_is_cut_from_its_largest_whole_unoccluded_frame_on_white(clip_folder):
    report = make_elements(clip_folder, ColourSegmenter(SEGMENTER), options(clip_folder), progress=False)
    assert report.written == 3 and report.not_found == []
    record = json.loads((clip_folder / "001.elements.json").read_text())
    subject = record["elements"]["subject"]
    assert subject["frame"] == 14  # the largest before the square hides part of it (15 on), not cut by the edge
    image = read_image(clip_folder / "001_subject.png")
    x0, y0, x1, y1 = subject["box"]
    assert image.shape[0] == image.shape[1] == max(x1 - x0, y1 - y0)  # a square: the crop padded on white
    frames, _ = read_video_frames(clip_folder / "001.mp4")
    mask = ColourSegmenter(SEGMENTER).mask(frames[14], "red disc")
    assert subject["mask_area"] == int(mask.sum())
    crop, crop_mask = frames[14][y0:y1, x0:x1], mask[y0:y1, x0:x1]
    top, left = (image.shape[0] - (y1 - y0)) // 2, (image.shape[1] - (x1 - x0)) // 2
    inside = image[top:top + y1 - y0, left:left + x1 - x0]
    assert np.array_equal(inside[crop_mask], crop[crop_mask])  # the element's own pixels
    assert (inside[~crop_mask] == 255).all() and (image[:top] == 255).all()  # white around it
    assert record["elements"]["object"]["frame"] >= 15


def test_the_background_plate_is_the_scene_without_its_elements(clip_folder):
    make_elements(clip_folder, ColourSegmenter(SEGMENTER), options(clip_folder), progress=False)
    plate = read_image(clip_folder / "001_background.png")
    truth = empty_background()
    frames, _ = read_video_frames(clip_folder / "001.mp4")
    assert psnr(plate, truth) > 33.0, psnr(plate, truth)  # only the clip's lossy coding between them
    assert psnr(frames[10], truth) < 25.0  # a frame of the clip itself shows the disc
    record = json.loads((clip_folder / "001.elements.json").read_text())["elements"]["background"]
    assert record["method"] == "median" and record["elements_removed"] == ["object", "subject"]


def test_pixels_covered_in_every_frame_are_inpainted():
    truth = empty_background()
    frames = np.repeat(truth[None], 6, axis=0).copy()
    masks = np.zeros(frames.shape[:3], bool)
    masks[:, 20:30, 40:50] = True  # a static element
    frames[:, 20:30, 40:50] = RED
    plate = background_plate(frames, masks, grow=0)
    assert plate.hole_fraction == pytest.approx(100 / (H * W))
    assert psnr(plate.image, truth) > 30.0 and not (plate.image == RED).all(axis=-1).any()


def test_cut_out_pads_a_wide_crop_to_a_centred_square():
    frame = np.full((40, 60, 3), 7, np.uint8)
    mask = np.zeros((40, 60), bool)
    mask[10:20, 5:45] = True
    image, box = cut_out(frame, mask, margin=0.0)
    assert box == (5, 10, 45, 20) and image.shape == (40, 40, 3)
    assert (image[15:25, :, 0] == 7).all() and (image[:15] == 255).all() and (image[25:] == 255).all()
    grey, _ = cut_out(frame, mask, margin=0.0, fill=parse_fill("110,110,110"))
    assert (grey[:15] == 110).all() and (grey[15:25] == 7).all()
    with pytest.raises(UserError, match="--fill"):
        parse_fill("pink")


def test_an_element_not_found_is_listed_and_not_guessed(clip_folder):
    jobs = (ElementJob("subject", "red disc", "_subject.png"), ElementJob("object", "a cat", "_object.png"))
    report = make_elements(clip_folder, ColourSegmenter(SEGMENTER), ElementOptions(jobs), progress=False)
    assert report.not_found == [("001.mp4", "object")] and not (clip_folder / "001_object.png").exists()
    assert json.loads((clip_folder / "001.elements.json").read_text())["elements"]["object"] == {
        "prompt": "a cat", "found": False}
    assert "1 not found: 001.mp4 object" in report.summary()


def test_existing_element_images_are_kept_unless_asked(clip_folder):
    (clip_folder / "001_subject.png").write_bytes(b"mine")
    segmenter = ColourSegmenter(SEGMENTER)
    report = make_elements(clip_folder, segmenter, options(clip_folder), progress=False)
    assert (clip_folder / "001_subject.png").read_bytes() == b"mine" and report.kept == 1 and report.written == 2
    again = make_elements(clip_folder, segmenter, options(clip_folder), progress=False)
    assert again.kept == 3 and again.written == 0
    make_elements(clip_folder, segmenter, options(clip_folder, overwrite=True), progress=False)
    assert read_image(clip_folder / "001_subject.png").shape[2] == 3


def test_the_first_frames_are_avoided_when_later_ones_show_the_element(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    frames = np.repeat(empty_background()[None], 6, axis=0).copy()
    for f, radius in enumerate([16, 14, 12, 10, 9, 8]):  # largest in frame 0
        cv2.circle(frames[f], (48, 32), radius, RED, -1)
    write_video(folder / "001.mp4", frames, 16.0)
    jobs = (ElementJob("subject", "red disc", "_subject.png"),)
    for avoid, expected in ((0, 0), (1, 1), (3, 3), (6, 0)):  # 6: no later frame shows it, so frame 0 after all
        make_elements(folder, ColourSegmenter(SEGMENTER), ElementOptions(jobs, overwrite=True, avoid_first=avoid),
                      progress=False)
        assert json.loads((folder / "001.elements.json").read_text())["elements"]["subject"]["frame"] == expected


def test_dataset_elements_need_known_names():
    elements = dataset_json("x").datasets[0].elements
    with pytest.raises(UserError, match="'cat' is no element"):
        jobs_from_dataset(elements, {"cat": "a cat"})
    jobs = jobs_from_dataset(elements, {"subject": "person"})
    assert [(j.name, j.background) for j in jobs] == [("subject", False), ("background", True)]


def test_masks_follow_the_prompt_in_every_frame_as_the_loader_reads_them(clip_folder):
    from modules.dataLoader.masks import read_mask_frames

    segmenter = ColourSegmenter(SEGMENTER)
    report = make_masks(clip_folder, segmenter, MaskOptions(("red disc",)), progress=False)
    assert report.written == 1
    frames, fps = read_video_frames(clip_folder / "001.mp4")
    pixels = read_mask_frames(clip_folder / "001-masklabel.mp4", fps, 0, len(frames), frames.shape[1:3])
    for frame, mask in zip(frames, pixels):
        truth = segmenter.mask(frame, "red disc")
        loaded = mask[..., 0] > 127
        assert (loaded & truth).sum() / (loaded | truth).sum() > 0.95
    assert make_masks(clip_folder, segmenter, MaskOptions(("red disc",)), progress=False).kept == 1
    assert make_masks(clip_folder, segmenter, MaskOptions(("a cat",), overwrite=True), progress=False).empty == \
        ["001.mp4"]


@pytest.fixture(scope="module")
def tiny_sam3(tmp_path_factory):
    from modules.synthetic.tiny_vlm import write_tiny_sam3

    return write_tiny_sam3(tmp_path_factory.mktemp("sam3") / "tiny-sam3")


def test_a_tiny_random_sam3_runs_the_real_path(clip_folder, tiny_sam3):
    from modules.dataTools.segmenter import Sam3Segmenter

    segmenter = Sam3Segmenter(tiny_sam3, device="cpu", threshold=0.0)
    frames, _ = read_video_frames(clip_folder / "001.mp4")
    found = segmenter.detect(frames[:3], "red disc")
    assert len(found) == 3 and all(len(f) == 8 for f in found)  # threshold 0: every query of the tiny DETR
    assert all(d.mask.shape == (H, W) and d.mask.dtype == bool and 0 <= d.score <= 1 for d in found[0])
    report = make_elements(clip_folder, segmenter, options(clip_folder, max_frames=4), progress=False)
    assert report.written + len(report.not_found) == 3


def test_the_scripts_make_elements_and_masks_with_a_sam3_folder(clip_folder, tiny_sam3, tmp_path):
    config = tmp_path / "dataset.json"
    config.write_text(json.dumps(dataset_json(clip_folder).to_dict()))
    result = run_script("make_elements.py", "--dataset-config", str(config), "--element", "subject=red disc",
                        "--model", str(tiny_sam3), "--threshold", "0", "--max-frames", "3", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "1 clip(s)" in result.stdout and (clip_folder / "001.elements.json").exists()
    masks = run_script("make_masks.py", str(clip_folder), "--prompt", "red disc", "--model", str(tiny_sam3),
                       "--threshold", "0", "--no-progress")
    assert masks.returncode == 0, masks.stderr
    missing = run_script("make_elements.py", "--dataset-config", str(config), "--element", "subject=x",
                         "--model", str(tmp_path / "no-such-model"))
    assert missing.returncode == 1 and "no-such-model" in missing.stderr and "--download" in missing.stderr
    bad = run_script("make_elements.py", "--dataset-config", str(config), "--element", "subject")
    assert bad.returncode == 1 and "NAME=PROMPT" in bad.stderr
