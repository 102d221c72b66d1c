"""Cutting footage into clips (scripts/split_clips.py, modules/dataTools/clips.py): shots found by PySceneDetect at
the frames a synthetic video cuts, the length rules, a manifest to resume from, and odd inputs handled in one line."""
from __future__ import annotations

import json
import os

import av
import numpy as np
import pytest

from modules.dataLoader.video_io import read_video_frames
from modules.dataTools.clip_writer import clip_writer
from modules.dataTools.clips import MANIFEST, split_videos
from modules.dataTools.shots import SplitOptions, clip_ranges, wan_length
from modules.util.errors import UserError
from tests.script_runner import run_script
from tests.test_video_timestamps import indices, write_coded_video

COLOURS = [(200, 40, 40), (40, 180, 60), (40, 60, 210), (220, 200, 40)]


def shot_frames(lengths: list[int], size: int = 48) -> np.ndarray:
    """Shots of the given lengths, each a plain colour of COLOURS with a white square drifting right."""
    frames = []
    for shot, length in enumerate(lengths):
        for i in range(length):
            frame = np.full((size, size, 3), COLOURS[shot % len(COLOURS)], np.uint8)
            frame[20:28, 4 + i % 30:12 + i % 30] = 255
            frames.append(frame)
    return np.stack(frames)


def write_mp4(path, frames: np.ndarray, fps: float = 16.0):
    with clip_writer(path, fps) as writer:
        for frame in frames:
            writer.write(frame)
    return path


def colour_of(frame: np.ndarray) -> int:
    return int(np.argmin([np.abs(frame[2:10, 2:10].astype(int) - c).mean() for c in COLOURS]))


def test_hard_cuts_are_found_at_their_frames_and_each_shot_becomes_a_clip(tmp_path):
    source = write_mp4(tmp_path / "in" / "film.mp4", shot_frames([20, 30, 25]))
    report = split_videos([source.parent], tmp_path / "out", SplitOptions(min_seconds=0.5), progress=False)
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    entry = manifest["sources"][str(source.resolve())]
    assert entry["cuts"] == [20, 50] and entry["frames"] == 75
    assert [(c["start_frame"], c["end_frame"]) for c in entry["clips"]] == [(0, 20), (20, 50), (50, 75)]
    assert report.written == 3 and [p.name for p in report.clips] == ["film-001.mp4", "film-002.mp4", "film-003.mp4"]
    for shot, clip in enumerate(report.clips):
        frames, fps = read_video_frames(clip)
        assert fps == 16.0 and len(frames) == [20, 30, 25][shot]
        assert {colour_of(f) for f in frames} == {shot}  # no frame of another shot leaks in
    assert source.stat().st_size > 0 and sorted(p.name for p in source.parent.iterdir()) == ["film.mp4"]


def test_the_adaptive_detector_finds_the_same_cuts(tmp_path):
    source = write_mp4(tmp_path / "film.mp4", shot_frames([24, 24, 24]))
    split_videos([source], tmp_path / "out", SplitOptions(detector="adaptive", min_seconds=0.5), progress=False)
    entry = json.loads((tmp_path / "out" / MANIFEST).read_text())["sources"][str(source.resolve())]
    assert entry["cuts"] == [24, 48]


def test_length_rules_split_long_shots_drop_short_ones_and_give_wan_lengths():
    shots = [(0, 10), (10, 90), (90, 120)]
    # 16 fps: min 1 s = 16 frames, max 2 s = 32 frames
    assert clip_ranges(shots, 16.0, SplitOptions(min_seconds=1, max_seconds=2)) == [
        (10, 42), (42, 74), (74, 90), (90, 120)]
    # 4k+1: max 32 -> 29; each piece trimmed to 4k+1 (22 -> 21 kept; 30 -> 29)
    wan = clip_ranges(shots, 16.0, SplitOptions(min_seconds=1, max_seconds=2, wan_frames=True))
    assert wan == [(10, 39), (39, 68), (68, 89), (90, 119)]
    assert all((b - a) % 4 == 1 for a, b in wan)
    assert [wan_length(n) for n in (0, 1, 4, 5, 80, 81, 84)] == [0, 1, 1, 5, 77, 81, 81]


def test_an_output_rate_resamples_the_clips_and_their_cuts(tmp_path):
    source = write_mp4(tmp_path / "film.mp4", shot_frames([32, 32]), fps=32.0)
    report = split_videos([source], tmp_path / "out", SplitOptions(min_seconds=0.5, fps=16, wan_frames=True),
                          progress=False)
    entry = json.loads((tmp_path / "out" / MANIFEST).read_text())["sources"][str(source.resolve())]
    assert entry["cuts"] == [16] and entry["fps"] == 16
    lengths = [len(read_video_frames(p)[0]) for p in report.clips]
    assert lengths == [13, 13]  # 16 frames each at 16 fps, 4k+1 -> 13


def test_a_run_continues_from_the_manifest_and_never_rewrites_a_finished_clip(tmp_path):
    source = write_mp4(tmp_path / "film.mp4", shot_frames([20, 20, 20]))
    calls = []
    stop_after_first = lambda: len(calls) >= 1  # noqa: E731
    first = split_videos([source], tmp_path / "out", SplitOptions(min_seconds=0.5), progress=False,
                         stop=stop_after_first, on_clip=calls.append)
    assert first.cancelled and first.written == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.suffix == ".mp4") == ["film-001.mp4"]
    done = (tmp_path / "out" / "film-001.mp4").stat().st_mtime_ns
    second = split_videos([source], tmp_path / "out", SplitOptions(min_seconds=0.5), progress=False)
    assert (second.kept, second.written) == (1, 2)
    assert (tmp_path / "out" / "film-001.mp4").stat().st_mtime_ns == done
    with pytest.raises(UserError, match="other options"):
        split_videos([source], tmp_path / "out", SplitOptions(min_seconds=0.7), progress=False)


def test_a_clip_name_held_by_another_file_is_kept(tmp_path):
    source = write_mp4(tmp_path / "film.mp4", shot_frames([20, 20]))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "film-002.mp4").write_bytes(b"mine")
    report = split_videos([source], tmp_path / "out", SplitOptions(min_seconds=0.5), progress=False)
    assert (tmp_path / "out" / "film-002.mp4").read_bytes() == b"mine"
    assert report.written == 1 and report.skipped == {"clip name taken by another file": 1}


def test_the_output_may_not_hold_the_sources(tmp_path):
    source = write_mp4(tmp_path / "film.mp4", shot_frames([20]))
    with pytest.raises(UserError, match="--output"):
        split_videos([source], tmp_path, SplitOptions(min_seconds=0.5), progress=False)


def write_audio_only(path):
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=16000)
        samples = np.zeros((1, 16000), np.float32)
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
        frame.rate = 16000
        container.mux(stream.encode(frame))
        container.mux(stream.encode())


def write_truncated_mkv(path, frames: np.ndarray) -> None:
    """A Matroska file (streamable: no index at its end) cut off after two thirds of its bytes."""
    with av.open(str(path), "w", format="matroska") as container:
        stream = container.add_stream("libx264", rate=16)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        for i, frame in enumerate(frames):
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            video_frame.pts = i
            container.mux(stream.encode(video_frame))
        container.mux(stream.encode())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])


def test_odd_inputs_are_skipped_or_noted_in_one_line_each(tmp_path, caplog):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "empty.mp4").write_bytes(b"")
    write_audio_only(folder / "voice.mp4")
    (folder / "junk.mp4").write_bytes(os.urandom(2048))
    write_truncated_mkv(folder / "cut.mkv", shot_frames([20, 20, 20]))
    # variable rate: frames shown 1/16 s, then 1/8 s (ticks of 1/240 s); rotated: a display matrix of 90 degrees
    write_coded_video(folder / "vfr.mp4", [15 * i for i in range(24)] + [360 + 30 * i for i in range(12)])
    write_coded_video(folder / "rotated.mp4", [15 * i for i in range(24)], rotation=90)
    caplog.set_level("INFO")
    report = split_videos([folder], tmp_path / "out", SplitOptions(min_seconds=0.5, fps=16), progress=False)
    assert report.sources == 6
    assert report.skipped == {"empty file": 1, "holds no video stream": 1, "cannot open video": 1}
    assert report.notes == {"variable frame rate: resampled by its timestamps": 1,
                            "rotation metadata: frames turned as players show them": 1}
    assert sorted(p.name for p in report.clips) == ["cut-001.mp4", "rotated-001.mp4", "vfr-001.mp4"]
    assert len(read_video_frames(tmp_path / "out" / "cut-001.mp4")[0]) == 20  # the first shot, whole
    vfr = read_video_frames(tmp_path / "out" / "vfr-001.mp4")[0]
    # 1.5 s at 16 fps, then frames of 1/8 s each shown twice (the last one's end is the muxer's guess)
    assert indices(vfr[:46]) == list(range(24)) + [24 + (k + 1) // 2 for k in range(22)]  # ties: the later frame
    rotated = read_video_frames(tmp_path / "out" / "rotated-001.mp4")[0]
    assert rotated[:, -8:, :4].mean() > 200  # the mark of the top left turned to the bottom left (90° ccw)
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 3 and all("\n" not in line for line in lines)
    assert [sum(name in line for line in lines) for name in ("empty.mp4", "voice.mp4", "junk.mp4")] == [1, 1, 1]


def test_a_decoder_error_mid_stream_keeps_the_clips_before_it(tmp_path, monkeypatch):
    import modules.dataTools.clips as clips
    from modules.dataLoader.errors import DataError

    source = write_mp4(tmp_path / "film.mp4", shot_frames([20, 20, 20]))
    real = clips.stream_video_frames

    def failing_after_45(path, *args, **kwargs):
        for index, frame in enumerate(real(path, *args, **kwargs)):
            if index == 45:
                raise DataError(path, "decoder error (Invalid data found when processing input)")
            yield frame

    monkeypatch.setattr(clips, "stream_video_frames", failing_after_45)
    report = split_videos([source], tmp_path / "out", SplitOptions(min_seconds=0.5), progress=False)
    assert report.notes == {"damaged tail: clips cut from the frames before it": 1}
    assert [len(read_video_frames(p)[0]) for p in report.clips] == [20, 20]  # the third shot's 5 frames: too short


def test_the_script_splits_and_says_what_it_did(tmp_path):
    source = write_mp4(tmp_path / "film.mp4", shot_frames([20, 30]))
    result = run_script("split_clips.py", str(source), "--output", str(tmp_path / "out"), "--min-seconds", "0.5",
                        "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "2 clip(s) written" in result.stdout
    bad = run_script("split_clips.py", str(tmp_path / "nope.mp4"), "--output", str(tmp_path / "o2"))
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0 and "nope.mp4" in bad.stderr
