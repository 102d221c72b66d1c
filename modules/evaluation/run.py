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
from modules.evaluation.prompts import Prompt, Settings
from modules.model.WanModel import WanModel
from modules.modelSampler.WanModelSampler import WanModelSampler

logger = logging.getLogger(__name__)


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
    workflow: Any = None  # its files for the ComfyUI workflow beside each video (comfy_workflow.WorkflowModels)


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
            sampler = WanModelSampler(model, sampler_options(model) if sampler_options else None, run.workflow)
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
