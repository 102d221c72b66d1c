"""E2V element images made from each clip of a folder: per element of the dataset JSON, its text prompt is found and
tracked by a segmenter (segmenter.py), the best frame is cut out on white (element_images.py) and written as
`<clip><suffix>`; the background element is the plate of the scene without its elements. `<clip>.elements.json`
records where each image came from (frame, box, mask area, score). An element not found in a clip is listed and
left out, never guessed; existing images are kept unless the user asks (then they are replaced atomically)."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import cv2
import numpy as np
from tqdm import tqdm

from modules.dataLoader.errors import DataError
from modules.dataLoader.masks import is_mask_file
from modules.dataLoader.vace_modules import is_control_file
from modules.dataLoader.video_io import VIDEO_EXTENSIONS, read_video_frames
from modules.dataTools.element_images import background_plate, choose_frame, cut_out, frame_plate
from modules.dataTools.segmenter import Segmenter, track
from modules.util.atomic import atomic_write_bytes, atomic_write_text
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

PROVENANCE_SUFFIX = ".elements.json"
PLATES = ("median", "frame")


@dataclass(frozen=True)
class ElementJob:
    name: str
    prompt: str  # what the segmenter looks for; "" for the background plate
    suffix: str  # the file written: <clip><suffix>
    background: bool = False


@dataclass(frozen=True)
class ElementOptions:
    elements: tuple[ElementJob, ...]
    overwrite: bool = False
    max_frames: int = 32  # frames of a clip the segmenter looks at, spread over it
    avoid_first: int = 1  # frames at the clip's start an element is not cut from, unless only they show it
    plate: str = "median"  # "median" of the free pixels, or the least covered "frame"
    margin: float = 0.05
    min_score: float = 0.0
    fill: tuple[int, int, int] = (255, 255, 255)  # around a cut-out: white, as A2's references

    def check(self) -> None:
        if not self.elements:
            raise UserError("no element to make: give --element NAME=PROMPT for the elements of the dataset")
        if self.plate not in PLATES:
            raise UserError(f"--plate must be one of {', '.join(PLATES)}, got '{self.plate}'")
        if len(self.fill) != 3 or not all(0 <= int(c) <= 255 for c in self.fill):
            raise UserError(f"--fill must be white, black, grey or R,G,B in 0..255, got {self.fill}")
        if self.max_frames < 1 or self.avoid_first < 0:
            raise UserError("--max-frames must be >= 1 and --avoid-first >= 0")


FILLS = {"white": (255, 255, 255), "black": (0, 0, 0), "grey": (128, 128, 128), "gray": (128, 128, 128)}


def parse_fill(text: str) -> tuple[int, int, int]:
    """white | black | grey | R,G,B."""
    if text.strip().lower() in FILLS:
        return FILLS[text.strip().lower()]
    try:
        rgb = tuple(int(v) for v in text.split(","))
    except ValueError:
        rgb = ()
    if len(rgb) != 3 or not all(0 <= c <= 255 for c in rgb):
        raise UserError(f"--fill '{text}' must be white, black, grey or R,G,B with each 0..255")
    return rgb


def jobs_from_dataset(elements: Sequence, prompts: dict[str, str], background: str | None = None) -> tuple:
    """ElementJobs of a dataset's elements (ElementConfig): those given a prompt, and the background element
    (`background`, else the one whose name holds "background"); the first suffix of each is what gets written."""
    names = {e.name for e in elements}
    unknown = sorted(set(prompts) - names)
    if unknown:
        raise UserError(f"--element '{unknown[0]}' is no element of the dataset ({', '.join(sorted(names))})")
    if background is not None and background not in names:
        raise UserError(f"--background '{background}' is no element of the dataset ({', '.join(sorted(names))})")
    jobs = []
    for element in elements:
        is_background = element.name == background if background else "background" in element.name.lower()
        if element.name in prompts and prompts[element.name]:
            jobs.append(ElementJob(element.name, prompts[element.name], element.suffixes[0]))
        elif is_background:
            jobs.append(ElementJob(element.name, "", element.suffixes[0], background=True))
        else:
            logger.info("element '%s' has no prompt (--element %s=...): not made", element.name, element.name)
    return tuple(jobs)


@dataclass
class ElementReport:
    clips: int = 0
    written: int = 0
    kept: int = 0
    not_found: list = field(default_factory=list)  # (clip name, element name)
    skipped: dict = field(default_factory=dict)  # reason -> clips
    cancelled: bool = False

    def summary(self) -> str:
        parts = [f"{self.clips} clip(s)", f"{self.written} image(s) written", f"{self.kept} kept (they existed)"]
        if self.not_found:
            parts.append(f"{len(self.not_found)} not found: " + ", ".join(f"{c} {e}" for c, e in self.not_found))
        parts += [f"{n} skipped: {reason}" for reason, n in sorted(self.skipped.items())]
        return ("cancelled; " if self.cancelled else "") + "; ".join(parts)


def clips_of(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise UserError(f"'{folder}' is not a folder: give the dataset folder (data_root)")
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                  and p.suffix.lower() in VIDEO_EXTENSIONS and not is_mask_file(p) and not is_control_file(p))


def write_image(path: Path, rgb: np.ndarray) -> None:
    ok, data = cv2.imencode(path.suffix.lower() or ".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise UserError(f"cannot encode '{path}' (suffix '{path.suffix}'): use an image suffix such as .png")
    atomic_write_bytes(path, data.tobytes())


def spread(count: int, most: int) -> list[int]:
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)}) if most > 1 else [0]


def make_elements(folder: str | os.PathLike, segmenter: Segmenter | Callable[[], Segmenter], options: ElementOptions,
                  stop: Callable[[], bool] = lambda: False, progress: bool = True,
                  on_clip: Callable[[Path], None] | None = None) -> ElementReport:
    """Element images for every clip of `folder` (see the module doc). `segmenter` may be a factory, called only
    when some clip needs an element found."""
    options.check()
    report = ElementReport()
    model = None
    clips = clips_of(Path(folder))
    for clip in tqdm(clips, desc="elements", unit="clip", disable=not progress):
        if stop():
            report.cancelled = True
            break
        report.clips += 1
        targets = {job.name: clip.with_name(clip.stem + job.suffix) for job in options.elements}
        todo = [job for job in options.elements if options.overwrite or not targets[job.name].exists()]
        report.kept += len(options.elements) - len(todo)
        if not todo:
            continue
        if model is None:
            model = segmenter if hasattr(segmenter, "detect") else segmenter()
        try:
            _make_for_clip(clip, model, options, todo, targets, report)
        except DataError as e:
            logger.warning("%s; no elements made", e)
            report.skipped[e.category] = report.skipped.get(e.category, 0) + 1
            continue
        if on_clip is not None:
            on_clip(clip)
    return report


def _make_for_clip(clip: Path, segmenter: Segmenter, options: ElementOptions, todo: list[ElementJob],
                   targets: dict[str, Path], report: ElementReport) -> None:
    frames, fps = read_video_frames(clip)
    picked = spread(len(frames), options.max_frames)
    sample = frames[picked]
    provenance_path = clip.with_name(clip.stem + PROVENANCE_SUFFIX)
    record = _read_provenance(provenance_path)
    record.update({"clip": clip.name, "frames": len(frames), "fps": fps})
    entries = record.setdefault("elements", {})
    cutouts = [job for job in options.elements if not job.background]
    need_masks = cutouts if any(job.background for job in todo) else [job for job in todo if not job.background]
    tracks = {}
    for job in need_masks:
        tracked = track(segmenter.detect(sample, job.prompt), options.min_score)
        tracks[job.name] = tracked
    avoid = sum(1 for index in picked if index < options.avoid_first)  # sampled frames inside the avoided start
    for job in (j for j in todo if not j.background):
        tracked = tracks[job.name]
        masks = [d.mask if d is not None else None for d in tracked]
        scores = [d.score if d is not None else 0.0 for d in tracked]
        choice = choose_frame(sample, masks, scores, avoid)
        if choice is None:
            report.not_found.append((clip.name, job.name))
            logger.warning("%s: '%s' (%s) not found in any frame: no %s written", clip, job.prompt, job.name,
                           targets[job.name].name)
            entries[job.name] = {"prompt": job.prompt, "found": False}
            continue
        image, box = cut_out(sample[choice.frame], masks[choice.frame], options.margin, options.fill)
        write_image(targets[job.name], image)
        report.written += 1
        entries[job.name] = {"prompt": job.prompt, "found": True, "file": targets[job.name].name,
                             "frame": picked[choice.frame], "box": list(box), "mask_area": choice.area,
                             "score": round(scores[choice.frame], 4), "quality": round(choice.quality, 4)}
    for job in (j for j in todo if j.background):
        covered = np.zeros(sample.shape[:3], bool)
        for name, tracked in tracks.items():
            for i, detection in enumerate(tracked):
                if detection is not None:
                    covered[i] |= detection.mask
        plate = background_plate(sample, covered) if options.plate == "median" else frame_plate(sample, covered)
        write_image(targets[job.name], plate.image)
        report.written += 1
        entries[job.name] = {"file": targets[job.name].name, "method": plate.method,
                             "frames": len(picked) if plate.frame is None else 1,
                             "frame": None if plate.frame is None else picked[plate.frame],
                             "hole_fraction": round(plate.hole_fraction, 4),
                             "elements_removed": sorted(tracks)}
    atomic_write_text(provenance_path, json.dumps(record, indent=1))


def _read_provenance(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except ValueError:
        logger.warning("%s is not JSON: written anew", path)
        return {}
