"""Videos are read by presentation timestamp (PyAV): variable frame rates resample correctly, rotation metadata
is applied, animated GIF and WebP are videos with their own frame durations."""
from __future__ import annotations

from fractions import Fraction

import av
import cv2
import numpy as np
import pytest
from PIL import Image

from modules.dataLoader.video_io import read_video_frames

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
    if suffix == ".gif":  # FFmpeg reads the GIF: our frame count is ffprobe's
        assert len(demuxed_starts(path)) == 7


def test_gif_and_webp_train_as_multi_frame_clips(tiny_model, tmp_path):
    from modules.trainer.GenericTrainer import GenericTrainer
    from modules.util.config.train_config import TrainConfig
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
