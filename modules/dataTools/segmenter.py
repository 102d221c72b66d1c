"""Text-prompted segmentation for the element and mask tools: SAM 3 (transformers' `Sam3Model`) finds every
instance of a prompt ("person", "red bag") in each frame; `track` follows one instance through a clip.

Any object with `detect(frames, prompt) -> list[list[Detection]]` serves (the tests give one that returns a
synthetic scene's true masks). SAM 3's image processor needs torchvision, which has no CPU build on the indexes
WanTrainer installs from, so its two steps are restated here as transformers writes them: the input (bilinear resize
with antialiasing to the processor's size, rescale, normalise; the tokenizer padded to 32 tokens) and
`post_process_instance_segmentation` (score = sigmoid(logit)·sigmoid(presence), masks resized bilinearly and
thresholded, boxes scaled from [0, 1]).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from modules.util.errors import UserError


@dataclass(frozen=True)
class Detection:
    mask: np.ndarray  # bool (H, W)
    score: float
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels


class Segmenter(Protocol):
    def detect(self, frames: np.ndarray, prompt: str) -> list[list[Detection]]: ...


def mask_box(mask: np.ndarray) -> tuple[float, float, float, float]:
    ys, xs = np.nonzero(mask)
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 0.0


def track(per_frame: Sequence[Sequence[Detection]], min_score: float = 0.0) -> list[Detection | None]:
    """One instance through the clip: it starts at the frame holding the best-scoring detection, then goes
    forward and backward frame by frame, each time taking the detection that overlaps the last one kept most
    (score breaking ties); a frame without one overlapping is a frame where the instance is not seen (None)."""
    chosen: list[Detection | None] = [None] * len(per_frame)
    candidates = [(d.score, i, j) for i, found in enumerate(per_frame) for j, d in enumerate(found)
                  if d.score >= min_score and d.mask.any()]
    if not candidates:
        return chosen
    _, start, j = max(candidates)
    chosen[start] = per_frame[start][j]
    for order in (range(start + 1, len(per_frame)), range(start - 1, -1, -1)):
        last = chosen[start]
        for i in order:
            options = [(iou(d.mask, last.mask), d.score, k) for k, d in enumerate(per_frame[i])
                       if d.score >= min_score and d.mask.any()]
            best = max(options, default=None)
            if best is not None and best[0] > 0:
                chosen[i] = last = per_frame[i][best[2]]
    return chosen


class Sam3Segmenter:
    """SAM 3 from a local folder (safetensors, as facebook/sam3 on the hub holds it)."""

    def __init__(self, folder: str | Path, device: str = "auto", dtype: str = "auto", threshold: float = 0.4,
                 mask_threshold: float = 0.5, batch_size: int = 4):
        import torch
        from transformers import AutoConfig, AutoTokenizer, Sam3Model

        from modules.util.model_folders import require_safetensors

        self.folder = Path(folder)
        config = AutoConfig.from_pretrained(self.folder)
        if config.model_type != "sam3":
            raise UserError(f"'{self.folder}' holds a '{config.model_type}' model; segmentation takes a SAM 3 folder "
                            "(facebook/sam3)")
        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                   ("cpu" if device == "auto" else device))
        self.dtype = (torch.bfloat16 if self.device.type == "cuda" else torch.float32) if dtype == "auto" \
            else getattr(torch, dtype)
        require_safetensors(self.folder, Sam3Model)
        self.model = Sam3Model.from_pretrained(self.folder, dtype=self.dtype, use_safetensors=True).to(self.device)
        self.model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        processor = {}
        if (self.folder / "preprocessor_config.json").is_file():
            processor = json.loads((self.folder / "preprocessor_config.json").read_text(encoding="utf-8"))
        size = processor.get("size", {"height": 1008, "width": 1008})
        self.size = (int(size["height"]), int(size["width"]))
        self.mean = processor.get("image_mean", [0.5, 0.5, 0.5])
        self.std = processor.get("image_std", [0.5, 0.5, 0.5])
        self.threshold, self.mask_threshold, self.batch_size = threshold, mask_threshold, batch_size

    def pixel_values(self, frames: np.ndarray):
        import torch

        pixels = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
        pixels = torch.nn.functional.interpolate(pixels, size=self.size, mode="bilinear", antialias=True,
                                                 align_corners=False).round_().clamp_(0, 255)
        mean = torch.tensor(self.mean).view(1, 3, 1, 1)
        std = torch.tensor(self.std).view(1, 3, 1, 1)
        return ((pixels / 255.0 - mean) / std).to(self.device, self.dtype)

    def detect(self, frames: np.ndarray, prompt: str) -> list[list[Detection]]:
        import torch

        text = self.tokenizer([prompt], padding="max_length", max_length=32, truncation=True, return_tensors="pt")
        height, width = frames.shape[1:3]
        found: list[list[Detection]] = []
        with torch.inference_mode():
            for start in range(0, len(frames), self.batch_size):
                batch = frames[start:start + self.batch_size]
                count = len(batch)
                out = self.model(pixel_values=self.pixel_values(batch),
                                 input_ids=text["input_ids"].expand(count, -1).to(self.device),
                                 attention_mask=text["attention_mask"].expand(count, -1).to(self.device))
                scores = out.pred_logits.float().sigmoid()
                if out.presence_logits is not None:
                    scores = scores * out.presence_logits.float().sigmoid()
                masks = torch.nn.functional.interpolate(out.pred_masks.float().sigmoid(), size=(height, width),
                                                        mode="bilinear", align_corners=False)
                boxes = out.pred_boxes.float() * torch.tensor([width, height, width, height], device=scores.device)
                for b in range(count):
                    keep = (scores[b] > self.threshold).nonzero().flatten().tolist()
                    found.append([Detection((masks[b, q] > self.mask_threshold).cpu().numpy(), float(scores[b, q]),
                                            tuple(float(v) for v in boxes[b, q])) for q in keep])
        return found


def sam3_segmenter_factory(model: str, download: bool, device: str, threshold: float):
    """A callable that loads SAM 3 when the tool first needs it. A local `model` folder is checked now (before any
    media is read); a hub name is fetched only with `download` (the user asked)."""
    from modules.dataTools.model_source import resolve_model

    if not download:
        resolve_model(model, False, "segmentation (SAM 3)")

    def segmenter() -> Sam3Segmenter:
        return Sam3Segmenter(resolve_model(model, download, "segmentation (SAM 3)"), device, threshold=threshold)

    return segmenter
