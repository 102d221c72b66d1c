"""Untrusted input: an image, video or frame array whose header declares frames over `max_frame_pixels` is
refused before it is decoded (a `DataError` in its own skip category); the loaders count it like other bad
samples (tests/test_training.py, tests/test_e2v_bad_data.py)."""
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from modules.config.train_config import DEFAULT_MAX_FRAME_PIXELS, TrainConfig
from modules.dataLoader.errors import TOO_MANY_PIXELS, DataError
from modules.dataLoader.video_io import probe_video, read_image, read_video_frames
from modules.util.base_config import ConfigError
from modules.util.video_write import write_video


def huge_png(path: Path, width: int = 20000, height: int = 20000, mode: str = "RGB") -> Path:
    """A small PNG whose IHDR declares `width` x `height` (its pixel data is a 4x4 image's): only a header
    check refuses it without trying to decode 400 M pixels."""
    Image.new(mode, (4, 4), "red").save(path)
    data = bytearray(path.read_bytes())
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
@pytest.mark.parametrize("side", [20000, 9000])  # over Pillow's own limit (179 M pixels); under it, over ours
def test_a_huge_png_header_is_refused_before_decoding(tmp_path, monkeypatch, mode, side):
    path = huge_png(tmp_path / "huge.png", side, side, mode)
    assert path.stat().st_size < 200

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded an image over the budget")

    monkeypatch.setattr("modules.dataLoader.video_io.cv2.imdecode", no_decode)
    for read in (lambda: read_image(path), lambda: read_video_frames(path)):
        with pytest.raises(DataError) as caught:
            read()
        assert caught.value.category == TOO_MANY_PIXELS and "max_frame_pixels" in str(caught.value)
        assert side > 9000 or "9000x9000 = 81000000 pixels" in str(caught.value)


def test_the_budget_is_per_frame_and_configurable(tmp_path):
    image = tmp_path / "frame.png"
    Image.new("RGB", (40, 30), "blue").save(image)
    assert read_image(image, max_pixels=1200).shape == (30, 40, 3)  # exactly at the budget: read
    with pytest.raises(DataError, match="40x30 = 1200 pixels, more than max_frame_pixels 1199"):
        read_image(image, max_pixels=1199)


def test_videos_animations_and_npz_are_checked_from_their_headers(tmp_path, monkeypatch):
    video = tmp_path / "clip.mp4"
    write_video(video, np.zeros((5, 48, 64, 3), np.uint8), 16.0)
    gif = tmp_path / "anim.gif"
    frames = [Image.new("RGB", (64, 48), c) for c in ("red", "blue", "green")]
    frames[0].save(gif, save_all=True, append_images=frames[1:], duration=100)
    npz = tmp_path / "clip.npz"
    np.savez_compressed(npz, frames=np.zeros((3, 48, 64, 3), np.uint8))
    for path in (video, gif, npz):
        assert read_video_frames(path, max_pixels=64 * 48)[0].shape[1:] == (48, 64, 3)
        with pytest.raises(DataError) as caught:
            read_video_frames(path, max_pixels=64 * 48 - 1)
        assert caught.value.category == TOO_MANY_PIXELS, path
    with pytest.raises(DataError, match="more than max_frame_pixels"):
        probe_video(video, 16.0, max_pixels=100)

    def no_frames(*args, **kwargs):
        raise AssertionError("decoded a video over the budget")

    monkeypatch.setattr("modules.dataLoader.video_io._timed_frames", no_frames)  # the stream header decides
    with pytest.raises(DataError, match="more than max_frame_pixels"):
        read_video_frames(video, max_pixels=100)


def test_max_frame_pixels_is_a_validated_config_key(tmp_path):
    assert TrainConfig().max_frame_pixels == DEFAULT_MAX_FRAME_PIXELS == 8192 * 8192
    with pytest.raises(ConfigError, match="max_frame_pixels"):
        TrainConfig.from_dict({"max_frame_pixels": 0}).validate("config.json")
