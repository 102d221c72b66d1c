"""Model-free data path: decoding, resampling, 4k+1 rules, buckets, discovery, skips and the disk cache."""

import json
import logging
import os
import random
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from modules.dataLoader.buckets import Bucket, area_resolutions, batch_by_bucket, choose_bucket
from modules.dataLoader.cache import DiskCache, file_fingerprint, fingerprint
from modules.dataLoader.discovery import discover_concept, read_jsonl_manifest
from modules.dataLoader.errors import DataError
from modules.dataLoader.frames import (
    choose_frame_count,
    largest_4k1,
    pick_window,
    resize_and_crop,
    to_tensor,
)
from modules.dataLoader.skips import SkipCounter
from modules.dataLoader.video_io import read_video_frames
from modules.util.video_write import write_png_strip, write_video

H, W, FPS, N = 32, 48, 30, 40


def make_video(path: Path, fourcc: str, num_frames: int = N, step: int = 1) -> Path:
    """A 32x48 video at 30 fps whose frame i is filled with the value i * step."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), FPS, (W, H))
    assert writer.isOpened()
    for i in range(num_frames):
        writer.write(np.full((H, W, 3), i * step, np.uint8))
    writer.release()
    return path


def value_frames(num_frames: int, height: int, width: int) -> np.ndarray:
    """(F, H, W, 3) uint8 frames whose frame i is filled with the value i."""
    return np.broadcast_to(np.arange(num_frames, dtype=np.uint8)[:, None, None, None], (num_frames, height, width, 3)).copy()


def frame_values(frames: np.ndarray) -> list[int]:
    return [int(frame[0, 0, 0]) for frame in frames]


@pytest.fixture
def lossless_video(tmp_path: Path) -> Path:
    """FFV1 in .mkv is lossless, so frame values identify source frames exactly."""
    return make_video(tmp_path / "clip.mkv", "FFV1")


# --- decoding -----------------------------------------------------------------------------------


def test_read_video_without_resampling_returns_all_frames_rgb(lossless_video: Path) -> None:
    frames, fps = read_video_frames(lossless_video, target_fps=None, max_frames=None)
    assert fps == 30.0
    assert frames.shape == (N, H, W, 3) and frames.dtype == np.uint8
    assert frame_values(frames) == list(range(N))


def test_resample_30_to_16_fps_picks_nearest_frames(lossless_video: Path) -> None:
    frames, fps = read_video_frames(lossless_video, target_fps=16, max_frames=None)
    assert fps == 30.0
    # timestamps k/16 s for k = 0..21 (inside 40/30 s); nearest source frame round(k * 1.875)
    assert frame_values(frames) == [0, 2, 4, 6, 8, 9, 11, 13, 15, 17, 19, 21, 23, 24, 26, 28, 30, 32, 34, 36, 38, 39]


def test_resample_stops_at_max_frames(lossless_video: Path) -> None:
    frames, _ = read_video_frames(lossless_video, target_fps=16, max_frames=5)
    assert frame_values(frames) == [0, 2, 4, 6, 8]


def test_read_mp4_frame_count_and_fps(tmp_path: Path) -> None:
    frames, fps = read_video_frames(make_video(tmp_path / "clip.mp4", "mp4v"), None, None)
    assert (frames.shape, fps) == ((N, H, W, 3), 30.0)


def test_npz_with_fps_is_resampled(tmp_path: Path) -> None:
    path = tmp_path / "clip.npz"
    np.savez(path, frames=value_frames(N, 4, 4), fps=30.0)
    frames, fps = read_video_frames(path, target_fps=16, max_frames=None)
    assert fps == 30.0
    assert frame_values(frames)[:6] == [0, 2, 4, 6, 8, 9] and len(frames) == 22


def test_npz_single_array_without_fps_is_taken_as_target_fps(tmp_path: Path) -> None:
    path = tmp_path / "clip.npz"
    np.savez(path, np.zeros((7, 4, 4, 3), np.uint8))
    frames, fps = read_video_frames(path, target_fps=16, max_frames=None)
    assert (frames.shape, fps) == ((7, 4, 4, 3), 16.0)


def test_npz_wrong_dtype_is_data_error(tmp_path: Path) -> None:
    path = tmp_path / "clip.npz"
    np.savez(path, frames=np.zeros((7, 4, 4, 3), np.float32))
    with pytest.raises(DataError, match="uint8"):
        read_video_frames(path, None, None)


def test_image_loads_as_one_frame_rgb(tmp_path: Path) -> None:
    path = tmp_path / "still.png"
    bgr = np.zeros((H, W, 3), np.uint8)
    bgr[..., 2] = 200  # red in OpenCV's BGR order
    cv2.imwrite(str(path), bgr)
    frames, fps = read_video_frames(path, target_fps=16, max_frames=None)
    assert frames.shape == (1, H, W, 3) and fps == 0.0
    assert frames[0, 0, 0].tolist() == [200, 0, 0]


@pytest.mark.parametrize("name,content", [("garbage.mp4", b"not a video" * 100), ("empty.mp4", b""), ("bad.png", b"\x89PNG junk")])
def test_unreadable_file_is_data_error_naming_path(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError) as info:
        read_video_frames(path, 16, None)
    assert info.value.path == str(path) and str(path) in str(info.value)


def test_truncated_mp4_is_data_error(tmp_path: Path) -> None:
    path = make_video(tmp_path / "clip.mp4", "mp4v")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError) as info:
        read_video_frames(path, 16, None)
    assert info.value.path == str(path)


def test_missing_file_is_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found") as info:
        read_video_frames(tmp_path / "nope.mp4", None, None)
    assert info.value.category == "missing file"


def test_write_video_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "out" / "preview.mp4"
    write_video(path, np.full((9, H, W, 3), 128, np.uint8), fps=16)
    frames, fps = read_video_frames(path, None, None)
    assert (frames.shape, fps) == ((9, H, W, 3), 16.0)
    assert [p.name for p in path.parent.iterdir()] == ["preview.mp4"]  # no temp file left


def test_write_video_crops_odd_size_to_even(tmp_path: Path) -> None:
    path = tmp_path / "odd.mp4"
    write_video(path, np.zeros((3, 31, 47, 3), np.uint8), fps=16)
    frames, _ = read_video_frames(path, None, None)
    assert frames.shape == (3, 30, 46, 3)


def test_write_png_strip_picks_evenly_spaced_frames(tmp_path: Path) -> None:
    frames = value_frames(20, 4, 5)
    path = tmp_path / "strip.png"
    write_png_strip(path, frames, max_frames=4)
    strip = cv2.imread(str(path))
    assert strip.shape == (4, 20, 3)
    assert strip[0, ::5, 0].tolist() == [0, 6, 13, 19]


# --- frames -------------------------------------------------------------------------------------


def test_largest_4k1() -> None:
    assert [largest_4k1(n) for n in (1, 4, 5, 8, 9, 81, 84)] == [1, 1, 5, 5, 9, 81, 81]
    with pytest.raises(ValueError):
        largest_4k1(0)


def test_choose_frame_count_auto_and_fixed() -> None:
    assert choose_frame_count(available=100, requested=None, auto=True, max_frames=81) == 81
    assert choose_frame_count(available=40, requested=None, auto=True, max_frames=81) == 37
    assert choose_frame_count(available=40, requested=33, auto=False, max_frames=None) == 33
    assert choose_frame_count(available=20, requested=33, auto=False, max_frames=None) is None
    with pytest.raises(ValueError):
        choose_frame_count(available=40, requested=32, auto=False, max_frames=None)


def test_pick_window() -> None:
    assert pick_window(40, 33, 7) == slice(7, 40)
    assert pick_window(40, 33, None) == slice(3, 36)
    window = pick_window(40, 33, random.Random(0))
    assert window.stop - window.start == 33 and 0 <= window.start <= 7
    with pytest.raises(ValueError):
        pick_window(40, 33, 8)


def test_resize_and_crop_covers_and_center_crops() -> None:
    frames = np.zeros((2, 40, 100, 3), np.uint8)
    frames[:, :, 40:60] = 255  # a centered white band survives the center crop
    out = resize_and_crop(frames, 32, 32)
    assert out.shape == (2, 32, 32, 3)
    assert out[0, 16, 16, 0] == 255 and out[0, 16, 0, 0] == 0


def test_to_tensor_layout_and_range() -> None:
    frames = np.zeros((5, 4, 6, 3), np.uint8)
    frames[..., 0] = 255
    tensor = to_tensor(frames)
    assert tensor.shape == (3, 5, 4, 6) and tensor.dtype == torch.float32
    assert tensor[0].eq(1.0).all() and tensor[1].eq(-1.0).all()


# --- buckets ------------------------------------------------------------------------------------


def test_choose_bucket_closest_aspect_and_largest_frames() -> None:
    resolutions = [(480, 832), (832, 480), (624, 624)]
    assert choose_bucket(1080, 1920, 100, resolutions, [1, 33, 81]) == Bucket(81, 480, 832)
    assert choose_bucket(1920, 1080, 50, resolutions, [1, 33, 81]) == Bucket(33, 832, 480)
    assert choose_bucket(500, 520, 1, resolutions, [1, 33, 81]) == Bucket(1, 624, 624)
    assert choose_bucket(500, 520, 1, resolutions, [33, 81]) is None


def test_area_resolutions_are_multiples_of_16() -> None:
    resolutions = area_resolutions(480 * 832)
    assert all(h % 16 == 0 and w % 16 == 0 for h, w in resolutions)
    assert choose_bucket(720, 1280, 81, 480 * 832, [81]) == Bucket(81, 480, 848)


def test_bucket_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError):
        Bucket(32, 480, 832)
    with pytest.raises(ValueError):
        Bucket(33, 470, 832)


def test_batch_by_bucket_never_mixes_shapes_and_is_deterministic() -> None:
    a, b = Bucket(33, 480, 832), Bucket(1, 624, 624)
    items = [(i, a if i % 3 else b) for i in range(20)]
    bucket_of = dict(items)
    batches = batch_by_bucket(items, 4, random.Random(1), drop_last=False)
    assert all(len({bucket_of[i] for i in batch}) == 1 for batch in batches)
    assert sorted(i for batch in batches for i in batch) == list(range(20))
    assert batches == batch_by_bucket(items, 4, random.Random(1), drop_last=False)


def test_batch_by_bucket_drop_last() -> None:
    a, b = Bucket(33, 480, 832), Bucket(1, 624, 624)
    items = [(i, a) for i in range(6)] + [(i, b) for i in range(6, 9)]
    batches = batch_by_bucket(items, 4, random.Random(0), drop_last=True)
    assert [len(batch) for batch in batches] == [4]


# --- discovery ----------------------------------------------------------------------------------


def test_discover_folder_with_captions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("b.mp4", "a.png", "c.webm", "sub/d.mov", "notes.md", "._a.mp4"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "b.txt").write_text("  a cat  \n", encoding="utf-8")
    (tmp_path / "a.txt").write_bytes("café".encode("latin-1"))  # not UTF-8
    (tmp_path / "c.txt").write_text("", encoding="utf-8")
    (tmp_path / "sub/d.txt").write_text("ünïcode", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        samples = discover_concept(tmp_path, include_subdirectories=True)
    assert [(s.media_path.relative_to(tmp_path).as_posix(), s.caption) for s in samples] == [
        ("a.png", "café"), ("b.mp4", "a cat"), ("c.webm", ""), ("sub/d.mov", "ünïcode")
    ]
    assert samples[0].source == str(tmp_path)
    assert "latin-1" in caplog.text and "1 of 4 samples have no caption" in caplog.text


def test_a_caption_that_is_a_folder_trains_uncaptioned_and_is_counted(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    for name in ("a.mp4", "b.mp4"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "a.txt").mkdir()  # e.g. an unpacked archive named like the caption
    (tmp_path / "b.txt").write_text("a dog", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        samples = discover_concept(tmp_path, include_subdirectories=False)
    assert [(s.media_path.name, s.caption) for s in samples] == [("a.mp4", ""), ("b.mp4", "a dog")]
    assert f"caption {tmp_path / 'a.txt'} is a folder, not a text file" in caplog.text
    assert "1 of 2 samples have no caption" in caplog.text


def test_discover_folder_without_subdirectories(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.mp4").write_bytes(b"x")
    (tmp_path / "sub" / "b.mp4").write_bytes(b"x")
    assert [s.media_path.name for s in discover_concept(tmp_path, include_subdirectories=False)] == ["a.mp4"]


def test_jsonl_manifest_relative_paths(tmp_path: Path) -> None:
    manifest = tmp_path / "data" / "train.jsonl"
    manifest.parent.mkdir()
    lines = [{"path": "clips/x.npz", "prompt": "a dog"}, {"path": "/abs/y.mp4", "prompt": "a cat"}]
    manifest.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n", encoding="utf-8")
    samples = discover_concept(manifest, include_subdirectories=False)
    assert [(s.media_path, s.caption) for s in samples] == [
        (manifest.parent / "clips" / "x.npz", "a dog"), (Path("/abs/y.mp4"), "a cat")
    ]


def test_jsonl_manifest_bad_line_names_file_and_line(tmp_path: Path) -> None:
    manifest = tmp_path / "train.jsonl"
    manifest.write_text('{"path": "a.mp4", "prompt": "ok"}\n{"path": "b.mp4", "prompt": \n', encoding="utf-8")
    with pytest.raises(DataError, match="line 2") as info:
        read_jsonl_manifest(manifest)
    assert info.value.path == str(manifest)


def test_npz_from_manifest_loads(tmp_path: Path) -> None:
    np.savez(tmp_path / "x.npz", frames=np.zeros((5, 4, 4, 3), np.uint8))
    (tmp_path / "m.jsonl").write_text('{"path": "x.npz", "prompt": "p"}\n', encoding="utf-8")
    (sample,) = read_jsonl_manifest(tmp_path / "m.jsonl")
    frames, _ = read_video_frames(sample.media_path, 16, None)
    assert frames.shape == (5, 4, 4, 3)


# --- skips --------------------------------------------------------------------------------------


def test_skip_counter_summary_and_one_log_line_each(caplog: pytest.LogCaptureFixture) -> None:
    skips = SkipCounter()
    with caplog.at_level(logging.WARNING):
        skips.record_error(DataError("a.mp4", "cannot open video"))
        skips.record("b.mp4", "too few frames", "has 3 frames, needs 33")
        skips.record_error(DataError("c.mp4", "no frames could be decoded"))
    assert skips.summary() == "skipped 3 samples: 2 unreadable video, 1 too few frames"
    assert len(caplog.records) == 3


# --- cache --------------------------------------------------------------------------------------


def test_cache_round_trip_with_metadata(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path)
    key = fingerprint("latent", {"frames": 33, "size": [480, 832]}, tmp_path / "a.mp4")
    base = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    cache.put(key, {"latent": base[0], "other": base[1]}, {"caption": "a cat"})  # views of one storage
    tensors, metadata = cache.get_with_metadata(key)
    assert torch.equal(tensors["latent"], base[0]) and torch.equal(tensors["other"], base[1])
    assert metadata == {"caption": "a cat"}
    assert cache.path_for(key) == tmp_path / key[:2] / f"{key}.safetensors"


def test_cache_missing_key_is_none(tmp_path: Path) -> None:
    assert DiskCache(tmp_path).get("ab" * 32) is None


def test_cache_corrupt_file_is_none_and_deleted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = DiskCache(tmp_path)
    key = fingerprint("x")
    cache.put(key, {"t": torch.ones(3)})
    cache.path_for(key).write_bytes(b"\x00garbage" * 10)
    with caplog.at_level(logging.WARNING):
        assert cache.get(key) is None
    assert not cache.path_for(key).exists() and "corrupt" in caplog.text


def test_cache_damage_that_keeps_a_valid_header_is_caught_by_the_checksum(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    cache = DiskCache(tmp_path)
    key = fingerprint("y")
    cache.put(key, {"latent": torch.linspace(0, 1, 64)})
    path = cache.path_for(key)
    data = bytearray(path.read_bytes())
    data[-7] ^= 0x10  # one flipped bit in the tensor bytes: still a well-formed safetensors file
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert cache.get(key) is None
    assert not path.exists() and "checksum" in caplog.text


def test_cache_entries_without_a_checksum_still_load(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    cache = DiskCache(tmp_path)
    key = fingerprint("z")
    cache.path_for(key).parent.mkdir(parents=True)
    save_file({"t": torch.ones(2)}, str(cache.path_for(key)), metadata={"caption": "old"})
    tensors, metadata = cache.get_with_metadata(key)
    assert torch.equal(tensors["t"], torch.ones(2)) and metadata == {"caption": "old"}


def test_fingerprint_is_canonical() -> None:
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


def test_file_fingerprint_changes_with_content(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"\x00" * (3 << 20))
    first = file_fingerprint(path)
    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek((3 << 20) - 10)
        f.write(b"\x01")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime: only the tail differs
    assert file_fingerprint(path) != first
