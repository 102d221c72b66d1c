"""Videos are read by presentation timestamp (PyAV): variable frame rates resample correctly, rotation metadata
is applied, animated GIF and WebP are videos with their own frame durations."""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
from fractions import Fraction

import av
import cv2
import numpy as np
import pytest
from PIL import Image

from modules.dataLoader.discovery import discover_concept, read_jsonl_manifest
from modules.dataLoader.video_io import probe_video, read_video_frames

TICK = Fraction(1, 240)


def write_coded_video(path, starts: list[int], size: int = 32, rotation: int = 0) -> None:
    """An mp4 whose frame i is grey level 6i, shown from starts[i] ticks of 1/240 s (any rates, VFR too)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=240)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = TICK
        stream.options = {"qscale": "1"}
        if rotation:
            stream.set_display_rotation(rotation)
        for i, pts in enumerate(starts):
            pixels = coded(i, size)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = pts, TICK
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def coded(index: int, size: int = 32) -> np.ndarray:
    """Frame `index` as 6 bits in 8x8 blocks of the lower half (robust to lossy coding), under a plain upper
    half whose top left carries a mark (to see rotations)."""
    pixels = np.full((size, size, 3), 60, np.uint8)
    for bit in range(6):
        if index >> bit & 1:
            row, column = size // 2 + 8 * (bit // 4), 8 * (bit % 4)
            pixels[row:row + 8, column:column + 8] = 230
    pixels[:4, :8] = 255
    return pixels


def indices(frames: np.ndarray) -> list[int]:
    def index(frame: np.ndarray) -> int:
        half = frame.shape[0] // 2
        return sum(1 << bit for bit in range(6)
                   if frame[half + 8 * (bit // 4) + 2:half + 8 * (bit // 4) + 6, 8 * (bit % 4) + 2:8 * (bit % 4) + 6].mean() > 145)
    return [index(frame) for frame in frames]


def demuxed_starts(path) -> list[Fraction]:
    """What ffprobe reports: the packets' presentation timestamps, in seconds."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pts = sorted(p.pts for p in container.demux(stream) if p.pts is not None)
    return [Fraction(p) * stream.time_base for p in pts]


def ffprobe_starts(path) -> list[Fraction]:
    """ffprobe's own packet timestamps (where it is installed), in seconds."""
    out = subprocess.run([shutil.which("ffprobe"), "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=time_base:packet=pts", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    base = Fraction(data["streams"][0]["time_base"])
    return sorted(Fraction(int(p["pts"])) * base for p in data["packets"] if "pts" in p)


def nearest(starts: list[Fraction], end: Fraction, fps: int) -> list[int]:
    """Source frame of each timestamp k / fps inside the clip: the nearest start, ties to the later."""
    out, k = [], 0
    while Fraction(k, fps) < end:
        t = Fraction(k, fps)
        out.append(min(range(len(starts)), key=lambda i: (abs(starts[i] - t), -i)))
        k += 1
    return out


def test_a_variable_rate_video_is_resampled_by_its_timestamps(tmp_path):
    """8 fps for 10 frames, then 48 fps for 30: read at 16 fps, the first part is not sped up 2x nor the
    second slowed down 3x (what reading it as constant-rate did)."""
    starts = [30 * i for i in range(10)] + [300 + 5 * i for i in range(30)]
    path = tmp_path / "vfr.mp4"
    write_coded_video(path, starts)
    seconds = [s * TICK for s in starts]
    assert demuxed_starts(path) == seconds  # the file holds what we wrote
    if shutil.which("ffprobe"):
        assert ffprobe_starts(path) == seconds
    every, _ = read_video_frames(path)
    assert indices(every) == list(range(40))  # all frames, in order
    resampled, _ = read_video_frames(path, target_fps=16)
    expected = nearest(seconds, seconds[-1] + Fraction(5, 240), 16)
    assert indices(resampled) == expected
    assert expected[:4] == [0, 1, 1, 2] and expected[-3:] == [31, 34, 37]  # 2 per frame at 8 fps; 1 of 3 at 48
    capped, _ = read_video_frames(path, target_fps=16, max_frames=5)
    assert indices(capped) == expected[:5]


def test_a_constant_rate_video_reads_as_before(tmp_path):
    path = tmp_path / "cfr.mp4"
    write_coded_video(path, [10 * i for i in range(24)])  # 24 fps
    frames, fps = read_video_frames(path, target_fps=16)
    assert fps == pytest.approx(24)
    ratio = 24 / 16
    assert indices(frames) == [min(int(k * ratio + 0.5), 23) for k in range(16)]  # round(k · 1.5), half up


def test_rotation_metadata_is_applied_as_opencv_did(tmp_path):
    path = tmp_path / "rotated.mp4"
    write_coded_video(path, [10 * i for i in range(5)], rotation=90)
    ours, _ = read_video_frames(path)
    capture = cv2.VideoCapture(str(path))  # OpenCV applies the display matrix by default: today's reader
    ok, theirs = capture.read()
    capture.release()
    assert ok and ours.shape[1:] == theirs.shape
    assert np.abs(ours[0].astype(int) - theirs[..., ::-1].astype(int)).max() <= 2
    assert ours[0, :4, :8].mean() < 200 and ours[0].max() == 255  # the mark moved: the frame was turned


def animated(path, durations_ms: list[int], size: int = 32) -> None:
    frames = [Image.fromarray(coded(i, size)) for i in range(len(durations_ms))]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=durations_ms, loop=0,
                   **({"lossless": True} if str(path).endswith(".webp") else {}))


@pytest.mark.parametrize("suffix", [".gif", ".webp"])
def test_animated_gif_and_webp_are_videos_with_their_frame_durations(tmp_path, suffix):
    durations = [250, 250, 50, 50, 50, 50, 500]  # ms
    path = tmp_path / f"clip{suffix}"
    animated(path, durations)
    every, fps = read_video_frames(path)
    assert indices(every) == list(range(7))
    assert fps == pytest.approx(6 / 0.7)  # the mean rate of the frame starts (0 ... 0.7 s)
    starts = [Fraction(sum(durations[:i]), 1000) for i in range(7)]
    resampled, _ = read_video_frames(path, target_fps=8)
    assert indices(resampled) == nearest(starts, Fraction(1200, 1000), 8)
    if suffix == ".gif":  # FFmpeg's count and timestamps (it decodes no animated WebP)
        assert len(demuxed_starts(path)) == 7
        fine, _ = read_video_frames(path, target_fps=200)  # frames picked every 5 ms
        assert indices(fine) == nearest(demuxed_starts(path), Fraction(1200, 1000), 200)
        if shutil.which("ffprobe"):
            assert ffprobe_starts(path) == starts


def test_gif_and_webp_train_as_multi_frame_clips(tiny_model, tmp_path):
    from modules.config.train_config import TrainConfig
    from modules.trainer.GenericTrainer import GenericTrainer
    from tests.conftest import train_config_dict

    folder = tmp_path / "clips"
    folder.mkdir()
    for name in ("a.gif", "b.webp"):
        animated(folder / name, [60] * 12)
        (folder / name).with_suffix(".txt").write_text("a fading square")
    config = train_config_dict(tiny_model("t2v"), folder, tmp_path / "run", frames=9, epochs=1)
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    assert sorted((i.sample.media_path.name, i.bucket.frames) for i in trainer.data.items) == [("a.gif", 9),
                                                                                              ("b.webp", 9)]
    trainer.train()


def test_probing_a_clip_keeps_thumbnails_only(tmp_path):
    from modules.dataLoader.video_io import probe_video

    path = tmp_path / "vfr.mp4"
    write_coded_video(path, [30 * i for i in range(10)] + [300 + 5 * i for i in range(30)], size=128)
    full, _ = read_video_frames(path, target_fps=16)
    thumbnails, size = probe_video(path, 16)
    assert size == (128, 128) and thumbnails.shape == (len(full), 64, 64, 3)  # the same frames, 1/4 the area


@pytest.mark.parametrize("suffix", [".gif", ".webp"])
def test_delays_of_at_most_10_ms_last_100_ms_as_browsers_play_them(tmp_path, suffix):
    path = tmp_path / f"fast{suffix}"
    animated(path, [0, 10, 20, 100, 30])  # FFmpeg would keep the GIF's 10 ms frame at 10 ms
    starts = [Fraction(ms, 1000) for ms in (0, 100, 200, 220, 320)]
    frames, _ = read_video_frames(path, target_fps=100)
    assert indices(frames) == nearest(starts, Fraction(350, 1000), 100)


@pytest.mark.parametrize("suffix", [".gif", ".webp"])
def test_a_one_frame_gif_or_webp_is_an_image(tmp_path, suffix):
    path = tmp_path / f"still{suffix}"
    Image.fromarray(coded(5)).save(path, **({"lossless": True} if suffix == ".webp" else {}))
    frames, fps = read_video_frames(path, target_fps=16)
    assert frames.shape == (1, 32, 32, 3) and fps == 0.0 and indices(frames) == [5]


def test_a_transparent_gif_is_composited_on_the_background(tmp_path):
    path = tmp_path / "sprite.gif"
    frames = []
    for i in range(4):
        rgba = np.zeros((16, 16, 4), np.uint8)
        rgba[4 * i:4 * i + 4, :4] = (255, 0, 0, 255)  # a red square moving down a transparent field
        frames.append(Image.fromarray(rgba, "RGBA"))
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0, disposal=2)
    read, _ = read_video_frames(path, background=(0, 255, 0))
    assert len(read) == 4
    for i, frame in enumerate(read):
        assert frame[4 * i + 1, 1].tolist() == [255, 0, 0]
        assert frame[(4 * i + 8) % 16, 8].tolist() == [0, 255, 0]  # the rest: the background, no trail


def test_a_video_with_alpha_is_composited_on_the_background(tmp_path):
    path = tmp_path / "alpha.mov"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("png", rate=10)
        stream.width = stream.height = 16
        stream.pix_fmt = "rgba"
        for i in range(3):
            rgba = np.zeros((16, 16, 4), np.uint8)
            rgba[:8] = (255, 0, 0, 255)
            frame = av.VideoFrame.from_ndarray(rgba, format="rgba")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    frames, fps = read_video_frames(path, background=(0, 255, 0))
    assert frames.shape == (3, 16, 16, 3) and fps == 10.0
    assert frames[:, 0, 0].tolist() == [[255, 0, 0]] * 3 and frames[:, 15, 0].tolist() == [[0, 255, 0]] * 3


def test_variable_rate_is_noted_once_per_file_and_a_constant_rate_never(tmp_path, caplog):
    vfr, cfr = tmp_path / "vfr.mp4", tmp_path / "cfr.webm"
    write_coded_video(vfr, [30 * i for i in range(10)] + [300 + 5 * i for i in range(30)])
    with av.open(str(cfr), "w") as container:  # 29.97 fps in milliseconds: gaps of 33 and 34 ms
        stream = container.add_stream("libvpx-vp9", rate=Fraction(30000, 1001))
        stream.width = stream.height = 32
        for i in range(30):
            frame = av.VideoFrame.from_ndarray(coded(i), format="rgb24")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    with caplog.at_level(logging.INFO, logger="modules.dataLoader.video_io"):
        for _ in range(2):
            read_video_frames(vfr, target_fps=16)
            read_video_frames(cfr, target_fps=16)
    notes = [r.getMessage() for r in caplog.records if "variable frame rate" in r.getMessage()]
    assert len(notes) == 1 and str(vfr) in notes[0] and "20.8 to 125.0 ms" in notes[0]


def test_gif_and_animated_webp_are_found_in_folders_and_manifests_and_probed_alike(tmp_path):
    animated(tmp_path / "a.gif", [60] * 5)
    animated(tmp_path / "b.webp", [60] * 5)
    assert [s.media_path.name for s in discover_concept(tmp_path, False, warn_missing_captions=False)] == ["a.gif",
                                                                                                         "b.webp"]
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text('{"path": "a.gif", "prompt": "x"}\n{"path": "b.webp", "prompt": "y"}\n')
    assert [s.media_path.name for s in read_jsonl_manifest(manifest)] == ["a.gif", "b.webp"]
    for name in ("a.gif", "b.webp"):
        frames, _ = read_video_frames(tmp_path / name, target_fps=16)
        thumbnails, size = probe_video(tmp_path / name, 16)
        assert len(frames) == len(thumbnails) == 5 and size == (32, 32)  # 0.3 s at 16 fps
