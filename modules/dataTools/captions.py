"""Captioning a folder: a prompt per clip from a template, frames sampled per clip, a caption `.txt` per clip written
atomically as soon as its batch is answered (a kill loses at most the batch in flight), existing captions kept unless
asked. The model is any object with `caption(media, prompts)`, `sample_fps` and `max_frames` (vlm.Qwen3VLCaptioner)."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

from tqdm import tqdm

from modules.dataLoader.caption_text import strip_llm_prefix
from modules.dataLoader.discovery import discover_concept
from modules.dataLoader.e2v.discovery import discover_e2v_samples
from modules.dataLoader.errors import DataError
from modules.dataLoader.video_io import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, read_video_frames, video_header
from modules.dataTools.elements import PROVENANCE_SUFFIX
from modules.dataTools.vlm import Media
from modules.util.atomic import atomic_write_text
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

TEMPLATES = {
    "short": "Describe this video in one sentence: who or what is in it, what happens, and where.",
    "detailed": ("Describe this video in detail for a text-to-video model: the main subject and its appearance, "
                 "what it does, the other objects, the setting and background, the lighting, the camera's framing "
                 "and motion. Write one paragraph of plain sentences, no lists, no guesses about sound."),
}
STILL_TEMPLATES = {
    "short": "Describe this image in one sentence: who or what is in it, and where.",
    "detailed": ("Describe this image in detail for a text-to-image model: the main subject and its appearance, "
                 "the other objects, the setting and background, the lighting and the framing. One paragraph."),
}
#: Element-aware: appended when a clip has E2V element images, naming each (its prompt where make_elements wrote one)
ELEMENT_SENTENCE = "Name these in the description, with the same words: {elements}."



class Captioner(Protocol):
    sample_fps: float
    max_frames: int

    def caption(self, media: Sequence[Media], prompts: Sequence[str]) -> list[str]: ...


@dataclass(frozen=True)
class CaptionOptions:
    template: str = "short"  # a TEMPLATES name
    prompt: str = ""  # a prompt of one's own, instead of the template
    trigger: str = ""  # a word put before every caption ("sks", a LoRA's trigger)
    strip_prefixes: bool = True  # remove_common_llm_caption_prefixes: "The video shows a dog" -> "a dog"
    overwrite: bool = False  # replace existing captions (atomically); else they are kept
    batch_size: int = 1
    elements: tuple = ()  # ElementConfig of an E2V dataset: its samples are captioned, naming their elements

    def check(self) -> None:
        if not self.prompt and self.template not in TEMPLATES:
            raise UserError(f"--template '{self.template}' is not one of {', '.join(TEMPLATES)} (or give --prompt)")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, got {self.batch_size}")


@dataclass
class CaptionReport:
    written: int = 0
    kept: int = 0
    skipped: dict = field(default_factory=dict)  # reason -> count
    cancelled: bool = False

    def summary(self) -> str:
        parts = [f"{self.written} caption(s) written", f"{self.kept} kept (they existed)"]
        parts += [f"{count} skipped: {reason}" for reason, count in sorted(self.skipped.items())]
        return ("cancelled; " if self.cancelled else "") + ", ".join(parts)


@dataclass(frozen=True)
class Job:
    media: Path
    caption: Path
    elements: tuple[str, ...] = ()  # what to name: "subject (a person)", ...


def find_jobs(folder: str | os.PathLike, options: CaptionOptions) -> list[Job]:
    """The clips (and stills) of a folder to caption, each with its caption path; an E2V dataset's samples when
    `options.elements` is given. Element images and masks are never captioned."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"'{folder}' is not a folder: give the folder of clips to caption")
    if options.elements:
        samples, _ = discover_e2v_samples(folder, list(options.elements))
        return [Job(s.video, s.video.with_suffix(".txt"), _element_words(s.video, s.element_images))
                for s in samples]
    videos = {p.stem for p in folder.iterdir() if p.suffix.lower() in VIDEO_EXTENSIONS}

    def element_image(path: Path) -> bool:  # 001_subject.png beside 001.mp4
        return path.suffix.lower() in IMAGE_EXTENSIONS and any(path.stem.startswith(v + "_") for v in videos)

    samples = discover_concept(folder, False, warn_missing_captions=False, side_files=element_image)
    return [Job(s.media_path, s.media_path.with_suffix(".txt")) for s in samples
            if s.media_path.suffix.lower() != ".npz"]


def _element_words(video: Path, images: dict[str, Path | None]) -> tuple[str, ...]:
    prompts = {}
    provenance = video.with_name(video.stem + PROVENANCE_SUFFIX)
    if provenance.is_file():
        try:
            prompts = {name: entry.get("prompt", "") for name, entry in
                       json.loads(provenance.read_text(encoding="utf-8")).get("elements", {}).items()}
        except (ValueError, AttributeError):
            logger.warning("%s: not a provenance file of make_elements; element prompts not used", provenance)
    return tuple(f"{name} ({prompts[name]})" if prompts.get(name) else name
                 for name, path in images.items() if path is not None)


def prompt_for(job: Job, options: CaptionOptions, still: bool) -> str:
    prompt = options.prompt or (STILL_TEMPLATES if still else TEMPLATES)[options.template]
    if job.elements:
        prompt += " " + ELEMENT_SENTENCE.format(elements=", ".join(job.elements))
    return prompt


def finish(answer: str, options: CaptionOptions) -> str:
    text = strip_llm_prefix(answer.strip()) if options.strip_prefixes else answer.strip()
    return f"{options.trigger} {text}".strip() if options.trigger else text


def load_media(path: Path, captioner: Captioner) -> Media:
    """A clip's frames at the captioner's sampling rate, or, for a clip longer than its frame budget, at the rate
    that spreads the budget over the whole clip (decoded by timestamps, never all held); a still as one frame."""
    rate = captioner.sample_fps
    if path.suffix.lower() in VIDEO_EXTENSIONS and path.suffix.lower() != ".gif":
        try:
            seconds = video_header(path)[1]
        except DataError:
            seconds = 0.0  # read_video_frames below names the problem
        if seconds * rate > captioner.max_frames:
            rate = captioner.max_frames / seconds
    frames, fps = read_video_frames(path, target_fps=rate, max_frames=captioner.max_frames)
    if len(frames) == 1 and fps == 0.0:
        return Media(frames, 0.0)
    return Media(frames, rate)


def caption_folder(folder: str | os.PathLike, captioner: Captioner | Callable[[], Captioner],
                   options: CaptionOptions, stop: Callable[[], bool] = lambda: False, progress: bool = True,
                   on_caption: Callable[[Path, str], None] | None = None) -> CaptionReport:
    """Caption every clip of `folder` that has no caption (all with `overwrite`). `captioner` may be a factory,
    called only when there is something to caption (a run with nothing to do loads no model)."""
    options.check()
    report = CaptionReport()
    jobs = []
    for job in find_jobs(folder, options):
        if job.caption.exists() and not options.overwrite:
            report.kept += 1
        else:
            jobs.append(job)
    if not jobs:
        return report
    model = captioner() if callable(captioner) and not hasattr(captioner, "caption") else captioner
    bar = tqdm(total=len(jobs), desc="captions", unit="clip", disable=not progress)
    try:
        for start in range(0, len(jobs), options.batch_size):
            if stop():
                report.cancelled = True
                break
            batch, media = [], []
            for job in jobs[start:start + options.batch_size]:
                try:
                    media.append(load_media(job.media, model))
                    batch.append(job)
                except DataError as e:
                    logger.warning("%s; not captioned", e)
                    report.skipped[e.category] = report.skipped.get(e.category, 0) + 1
                    bar.update(1)
            if not batch:
                continue
            prompts = [prompt_for(job, options, m.fps == 0 and len(m.frames) == 1) for job, m in zip(batch, media)]
            for job, answer in zip(batch, model.caption(media, prompts)):
                text = finish(answer, options)
                atomic_write_text(job.caption, text + "\n")
                report.written += 1
                if on_caption is not None:
                    on_caption(job.media, text)
            bar.update(len(batch))
    finally:
        bar.close()
    return report
