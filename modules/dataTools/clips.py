"""Cutting raw footage into training clips: shots found by PySceneDetect (`shots.py`), cut under the length rules,
written with PyAV (`clip_writer.py`). Sources are only read. A manifest (`clips.json` in the output folder, written
atomically after every clip) records where each clip came from and lets an interrupted run continue: the shots
of a source it has seen are not detected again and its finished clips are not written again.
"""
from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import cv2
import numpy as np
from tqdm import tqdm

from modules.config.loading import read_json
from modules.dataLoader.errors import DataError
from modules.dataLoader.video_io import VIDEO_EXTENSIONS, stream_video_frames, video_header
from modules.dataTools.clip_writer import clip_writer
from modules.dataTools.shots import SplitOptions, clip_ranges, detect_cuts, shots_of
from modules.util.atomic import atomic_write_text
from modules.util.errors import UserError
from modules.util.path_checks import check_not_an_input

logger = logging.getLogger(__name__)

MANIFEST = "clips.json"
MANIFEST_VERSION = 1
DETECT_WIDTH = 256  # PySceneDetect's own downscale target: cuts are found on small frames
#: Sources a folder gives (FFmpeg's containers; GIF/WebP animations are no raw footage)
SOURCE_EXTENSIONS = VIDEO_EXTENSIONS - {".gif"}

EMPTY = "empty file"
DAMAGED_TAIL = "damaged tail: clips cut from the frames before it"
VARIABLE_RATE = "variable frame rate: resampled by its timestamps"
ROTATED = "rotation metadata: frames turned as players show them"


@dataclass
class SplitReport:
    """What a run did: counts, and one line per odd source (already logged as it happened)."""

    sources: int = 0
    written: int = 0
    kept: int = 0  # clips an earlier run finished
    skipped: Counter = field(default_factory=Counter)  # reason -> sources skipped
    notes: Counter = field(default_factory=Counter)  # reason -> sources used, with a note
    clips: list[Path] = field(default_factory=list)  # every clip of this run's sources, finished
    cancelled: bool = False

    def summary(self) -> str:
        parts = [f"{self.sources} source(s)", f"{self.written} clip(s) written", f"{self.kept} already there"]
        parts += [f"{count} skipped: {reason}" for reason, count in sorted(self.skipped.items())]
        parts += [f"{count} {reason}" for reason, count in sorted(self.notes.items())]
        return ("cancelled; " if self.cancelled else "") + ", ".join(parts)


def find_sources(inputs: Iterable[str | os.PathLike]) -> list[Path]:
    """Files named, and the videos of folders named (not their sub-folders), in order; a missing path is an error."""
    sources: list[Path] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            sources += sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")
                              and p.suffix.lower() in SOURCE_EXTENSIONS)
        elif path.is_file():
            sources.append(path)
        else:
            raise UserError(f"input '{path}' does not exist: give video files or folders of videos")
    return sources


class Manifest:
    """`clips.json`: the options, and per source (by resolved path) its size, mtime, rate, frame count, cuts and
    clips ({file, start_frame, end_frame, start_seconds, end_seconds, frames, done})."""

    def __init__(self, folder: Path, options: SplitOptions):
        self.path = folder / MANIFEST
        self.data = {"version": MANIFEST_VERSION, "options": options.as_dict(), "sources": {}}
        if self.path.exists():
            found = read_json(self.path, "clips manifest")
            if not isinstance(found, dict) or found.get("version") != MANIFEST_VERSION:
                raise UserError(f"{self.path} is not a clips manifest of this version: choose another output folder")
            if found.get("options") != options.as_dict():
                raise UserError(f"{self.path} records clips cut with other options ({found.get('options')}): use "
                                "the same options to continue, or another output folder")
            self.data = found

    def save(self) -> None:
        import json

        atomic_write_text(self.path, json.dumps(self.data, indent=1))

    def entry(self, source: Path) -> dict | None:
        entry = self.data["sources"].get(str(source.resolve()))
        stat = source.stat()
        if entry and (entry.get("size"), entry.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns):
            return entry
        return None

    def names_taken(self, source: Path) -> set[str]:
        own = str(source.resolve())
        return {clip["file"] for key, entry in self.data["sources"].items() if key != own
                for clip in entry.get("clips", [])}

    def put(self, source: Path, entry: dict) -> None:
        self.data["sources"][str(source.resolve())] = entry
        self.save()


def split_videos(inputs: Iterable[str | os.PathLike], output: str | os.PathLike, options: SplitOptions,
                 stop: Callable[[], bool] = lambda: False, progress: bool = True,
                 on_clip: Callable[[Path], None] | None = None) -> SplitReport:
    """Cut every source into clips in `output` (see the module doc); `stop()` is asked between frames and ends
    the run cleanly (the clip being written is dropped, the finished ones stay recorded)."""
    options.check()
    output = Path(output)
    sources = find_sources(inputs)
    check_not_an_input("--output", [output], [("source", source) for source in sources])
    output.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(output, options)
    report = SplitReport()
    for source in sources:
        if stop():
            report.cancelled = True
            break
        report.sources += 1
        try:
            _split_one(source, output, options, manifest, report, stop, progress, on_clip)
        except DataError as e:
            reason = e.reason.split(" (")[0]
            logger.warning("%s: %s; skipped", source, e.reason)
            report.skipped[reason] += 1
    return report


def _split_one(source: Path, output: Path, options: SplitOptions, manifest: Manifest, report: SplitReport,
               stop: Callable[[], bool], progress: bool, on_clip: Callable[[Path], None] | None) -> None:
    if source.stat().st_size == 0:
        raise DataError(source, EMPTY)
    entry = manifest.entry(source)
    if entry is None:
        entry = _plan(source, output, options, manifest, report, stop, progress)
        if entry is None:
            return
        manifest.put(source, entry)
    else:
        for note in entry.get("notes", []):
            report.notes[note] += 1
    todo = []
    for clip in entry["clips"]:
        path = output / clip["file"]
        if clip["done"] and path.is_file():
            report.kept += 1
            report.clips.append(path)
        elif path.exists():
            logger.warning("%s exists but the manifest did not write it: kept, and that clip not cut", path)
            report.skipped["clip name taken by another file"] += 1
        else:
            todo.append(clip)
    if todo:
        _cut(source, output, entry, todo, manifest, report, stop, progress, on_clip)


def _frames(source: Path, fps: float, facts: dict, shrink=None) -> Iterator[np.ndarray]:
    return stream_video_frames(source, fps, shrink=shrink, facts=facts)


def _shrink(frame: np.ndarray) -> np.ndarray:
    height, width = frame.shape[:2]
    if width <= DETECT_WIDTH:
        return frame
    return cv2.resize(frame, (DETECT_WIDTH, max(1, round(height * DETECT_WIDTH / width))), interpolation=cv2.INTER_AREA)


def _plan(source: Path, output: Path, options: SplitOptions, manifest: Manifest, report: SplitReport,
          stop: Callable[[], bool], progress: bool) -> dict | None:
    """Detect the shots of `source` and name its clips (None when stopped)."""
    header_rate, seconds = video_header(source)
    fps = float(options.fps or header_rate)
    if not fps:
        raise DataError(source, "its header gives no frame rate: pass --fps")
    facts: dict = {}
    notes = []
    counted = _Counted(_frames(source, fps, facts, _shrink), stop)
    bar = tqdm(counted, total=round(seconds * fps) or None, desc=f"shots {source.name}", unit="frame",
               disable=not progress, leave=False)
    try:
        cuts, count = detect_cuts(bar, fps, options)
    finally:
        bar.close()
    if counted.error is not None:
        if count == 0:
            raise counted.error
        logger.warning("%s: %s after %d frames; the clips before it are cut", source, counted.error.reason, count)
        notes.append(DAMAGED_TAIL)
    if counted.stopped:
        report.cancelled = True
        return None
    if count == 0:
        raise DataError(source, "no frames could be decoded")
    if "variable_rate" in facts:
        notes.append(VARIABLE_RATE)
    if "rotation" in facts:
        notes.append(ROTATED)
    for note in notes:
        report.notes[note] += 1
    ranges = clip_ranges(shots_of(cuts, count), fps, options)
    if not ranges:
        logger.info("%s: no shot lasts %.2f s (min_seconds): no clip", source, options.min_seconds)
    taken = manifest.names_taken(source)
    stem = source.stem
    suffix = 2
    while any(f"{stem}-{i + 1:03d}.mp4" in taken for i in range(len(ranges))):
        stem, suffix = f"{source.stem}-{suffix}", suffix + 1
    stat = source.stat()
    clips = [{"file": f"{stem}-{i + 1:03d}.mp4", "start_frame": a, "end_frame": b, "frames": b - a,
              "start_seconds": round(a / fps, 6), "end_seconds": round(b / fps, 6), "done": False}
             for i, (a, b) in enumerate(ranges)]
    return {"source": str(source), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "fps": fps, "frames": count,
            "cuts": cuts, "notes": notes, "clips": clips}


class _Counted:
    """Frames passed through until `stop()` or a decoder error (kept in `error`: the frames before a damaged tail
    still count)."""

    def __init__(self, frames: Iterator[np.ndarray], stop: Callable[[], bool]):
        self.frames, self.stop, self.stopped = frames, stop, False
        self.error: DataError | None = None

    def __iter__(self) -> Iterator[np.ndarray]:
        try:
            for frame in self.frames:
                if self.stop():
                    self.stopped = True
                    return
                yield frame
        except DataError as e:
            self.error = e


def _cut(source: Path, output: Path, entry: dict, todo: list[dict], manifest: Manifest, report: SplitReport,
         stop: Callable[[], bool], progress: bool, on_clip: Callable[[Path], None] | None) -> None:
    """Write the clips in `todo` from one pass over the source."""
    fps = entry["fps"]
    last = max(clip["end_frame"] for clip in todo)
    queue = sorted(todo, key=lambda clip: clip["start_frame"])
    bar = tqdm(total=sum(clip["frames"] for clip in todo), desc=f"clips {source.name}", unit="frame",
               disable=not progress, leave=False)
    frames = _frames(source, fps, {})
    try:
        index = 0
        while queue:
            clip = queue.pop(0)
            while index < clip["start_frame"]:
                next(frames)
                index += 1
            path = output / clip["file"]
            with clip_writer(path, fps) as writer:
                while index < clip["end_frame"]:
                    if stop():
                        report.cancelled = True
                        raise _Stopped
                    writer.write(next(frames))
                    index += 1
                    bar.update(1)
            clip["done"] = True
            manifest.put(source, entry)
            report.written += 1
            report.clips.append(path)
            if on_clip is not None:
                on_clip(path)
            if index >= last:
                break
    except _Stopped:
        pass
    except StopIteration:
        logger.warning("%s: ended at frame %d, before its planned clips: the rest not cut", source, index)
    except DataError as e:
        logger.warning("%s: %s at frame %d: the clips after it not cut", source, e.reason, index)
    finally:
        frames.close()
        bar.close()


class _Stopped(Exception):
    pass
