"""scripts/evaluate.py's work: generate every prompt x seed with the trained model (and the base model), measure
each video (modules/evaluation/metrics.py) and write the report (report.py). Generation is the sampler's, so
every variant, E2V elements and both experts work as in `sample.py`."""
from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from tqdm import tqdm

from modules.evaluation import metrics
from modules.evaluation.encoders import ImageEncoder, TextEncoder
from modules.model.WanModel import WanModel
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.util.config.base_config import ConfigError
from modules.util.config.train_config import SampleConfig
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Prompt:
    prompt: str
    negative_prompt: str = ""
    image: str = ""  # first frame (I2V)
    elements: tuple[str, ...] = ()  # E2V reference images (VACE: its reference images)
    control_video: str = ""  # VACE
    control_mask: str = ""  # VACE
    last_image: str = ""  # last frame (first-last-frame)


def read_prompts(path: str | Path, elements: list[str] | None = None, control_video: str = "",
                 control_mask: str = "") -> list[Prompt]:
    """A .txt file (one prompt per line; blank lines and # comments skipped) or a JSON list of prompts or of
    {"prompt", "negative_prompt", "image", "elements", "control_video", "control_mask"} objects. `elements`
    (--elements) and the control video and mask (--control-video, --control-mask) apply to every prompt that names
    none."""
    from modules.util.config.loading import read_json
    from modules.util.text_io import decode_text

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--prompts '{path}' is not a file: give a .txt (one prompt per line) or .json list")
    if path.suffix.lower() == ".json":
        data = read_json(path, "prompts")
        if not isinstance(data, list):
            raise UserError(f"--prompts '{path}' must hold a JSON list of prompts")
        prompts = []
        for index, entry in enumerate(data):
            if isinstance(entry, str):
                entry = {"prompt": entry}
            if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str) or \
                    set(entry) - {"prompt", "negative_prompt", "image", "last_image", "elements", "control_video",
                                 "control_mask"}:
                raise UserError(f"--prompts '{path}' entry {index} must be a string or an object with \"prompt\" "
                                "(and optionally \"negative_prompt\", \"image\", \"last_image\", \"elements\", \"control_video\", "
                                "\"control_mask\")")
            prompts.append(Prompt(entry["prompt"], entry.get("negative_prompt", ""), entry.get("image", ""),
                                  tuple(entry.get("elements") or elements or ()),
                                  entry.get("control_video") or control_video, entry.get("control_mask") or control_mask,
                                  entry.get("last_image", "")))
    else:
        lines = decode_text(path.read_bytes()).splitlines()
        prompts = [Prompt(line.strip(), elements=tuple(elements or ()), control_video=control_video,
                          control_mask=control_mask) for line in lines
                   if line.strip() and not line.strip().startswith("#")]
    if not prompts:
        raise UserError(f"--prompts '{path}' holds no prompt")
    for index, prompt in enumerate(prompts):  # before any model loads, not after the first videos
        for image in filter(None, (prompt.image, prompt.last_image, *prompt.elements, prompt.control_video,
                                   prompt.control_mask)):
            if not Path(image).is_file():
                raise UserError(f"--prompts '{path}' prompt {index}: image '{image}' does not exist (paths are "
                                "relative to the current folder)")
    return prompts


@dataclasses.dataclass
class Settings:
    frames: int = 33
    height: int = 480
    width: int = 832
    steps: int = 30
    cfg_scale: float = 5.0
    scheduler: str = "default"
    shift: float = 0.0
    seeds: int = 1  # seeds 0 .. N-1
    vace_scale: float = 1.0  # VACE: weight of the control hints
    image_guidance_scale: float = 1.0  # E2V in SkyReels-V3's layout: image guidance against zero references

    def sample(self, prompt: Prompt, seed: int) -> SampleConfig:
        try:
            return SampleConfig.from_dict({
                "prompt": prompt.prompt, "negative_prompt": prompt.negative_prompt, "image": prompt.image,
                "last_image": prompt.last_image,
                "elements": list(prompt.elements), "frames": self.frames, "height": self.height, "width": self.width,
                "steps": self.steps, "cfg_scale": self.cfg_scale, "seed": seed, "scheduler": self.scheduler,
                "shift": self.shift, "control_video": prompt.control_video, "control_mask": prompt.control_mask,
                "vace_scale": self.vace_scale, "image_guidance_scale": self.image_guidance_scale}, "sample")
        except ConfigError as e:
            raise UserError(str(e).replace("config key 'sample.", "setting '--")) from None


@dataclasses.dataclass
class Encoders:
    clip_image: ImageEncoder | None = None  # temporal consistency, element fidelity (the checkpoint's if it has one)
    clip_pair: tuple[ImageEncoder, TextEncoder] | None = None  # text alignment (--clip-model: one shared space)
    dino: ImageEncoder | None = None  # element fidelity (--dino-model)

    def notes(self) -> list[str]:
        notes = []
        if self.clip_image is None:
            notes.append("temporal consistency and CLIP element fidelity skipped: the checkpoint has no image_encoder "
                         "and no --clip-model was given")
        if self.clip_pair is None:
            notes.append("text alignment skipped: give --clip-model (a local CLIP folder with both towers)")
        if self.dino is None:
            notes.append("DINOv2 element fidelity skipped: give --dino-model")
        return notes

    def names(self) -> dict[str, str]:
        names = {"clip_image": self.clip_image.name if self.clip_image else None,
                 "clip_text": self.clip_pair[0].name if self.clip_pair else None,
                 "dino": self.dino.name if self.dino else None}
        return {k: v for k, v in names.items() if v}


def measure(frames: np.ndarray, prompt: Prompt, encoders: Encoders, element_images: list[np.ndarray]) -> dict:
    """Every metric of one video that its encoders allow (a skipped one is absent)."""
    values: dict[str, Any] = {"motion": metrics.motion(frames)}
    if encoders.clip_image is not None:
        embeddings = encoders.clip_image.embed(list(frames))
        values["temporal_consistency"] = metrics.temporal_consistency(embeddings)
        for index, image in enumerate(element_images):
            values[f"element_{index}_clip"] = metrics.element_fidelity(encoders.clip_image.embed([image])[0],
                                                                       embeddings)
    if encoders.clip_pair is not None:
        image_tower, text_tower = encoders.clip_pair
        # without a checkpoint encoder the image tower is this one: its frame embeddings are already made
        frame_embeddings = embeddings if image_tower is encoders.clip_image else image_tower.embed(list(frames))
        values["text_alignment"] = metrics.text_alignment(frame_embeddings, text_tower.embed([prompt.prompt])[0])
    if encoders.dino is not None and element_images:
        frame_embeddings = encoders.dino.embed(list(frames))
        for index, image in enumerate(element_images):
            values[f"element_{index}_dino"] = metrics.element_fidelity(encoders.dino.embed([image])[0],
                                                                       frame_embeddings)
    return {k: v for k, v in values.items() if v is not None}


@dataclasses.dataclass
class Run:
    name: str  # "base" or "trained"
    model: Callable[[], WanModel]  # loads (or prepares) the model of this run


def evaluate(runs: list[Run], prompts: list[Prompt], settings: Settings, encoders: Encoders, output: Path,
             sampler_options: Callable[[WanModel], Any] | None = None) -> dict:
    """Generate and measure every prompt x seed of every run; write the videos and return the results (the
    report is written by report.py)."""
    from modules.dataLoader.video_io import read_image

    elements = {path: read_image(path) for prompt in prompts for path in prompt.elements}
    videos = []
    bar = tqdm(total=len(runs) * len(prompts) * settings.seeds, desc="evaluating", unit="video")
    try:
        for run in runs:
            model = run.model()
            sampler = WanModelSampler(model, sampler_options(model) if sampler_options else None)
            for number, prompt in enumerate(prompts):
                for seed in range(settings.seeds):
                    name = f"{number:03d}-{_slug(prompt.prompt)}-seed{seed}"
                    path, frames = sampler.sample_frames_to_file(settings.sample(prompt, seed),
                                                                 output / "videos" / run.name / f"{name}.mp4",
                                                                 show_progress=False)
                    values = measure(frames, prompt, encoders, [elements[p] for p in prompt.elements])
                    videos.append({"model": run.name, "prompt_index": number, "prompt": prompt.prompt, "seed": seed,
                                   "elements": list(prompt.elements),
                                   "video": path.relative_to(output).as_posix(),
                                   "strip": path.with_suffix(".png").relative_to(output).as_posix(),
                                   "metrics": values})
                    bar.update(1)
            del model, sampler
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    finally:
        bar.close()
    return {"settings": dataclasses.asdict(settings), "notes": encoders.notes(),
            "encoders": encoders.names(),
            "videos": videos, "means": means(videos)}


def means(videos: list[dict]) -> dict[str, dict[str, float]]:
    """Per model, the mean of each metric over its videos."""
    out: dict[str, dict[str, list[float]]] = {}
    for video in videos:
        for key, value in video["metrics"].items():
            out.setdefault(video["model"], {}).setdefault(key, []).append(value)
    return {model: {key: float(np.mean(values)) for key, values in table.items()} for model, table in out.items()}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "prompt"


def write_metrics(results: dict, output: Path) -> Path:
    from modules.util.atomic import atomic_write_text

    path = output / "metrics.json"
    atomic_write_text(path, json.dumps(results, indent=2) + "\n")
    return path
