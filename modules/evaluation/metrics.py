"""Video quality metrics. Each is a pure function of frames or embeddings, with its definition and what it
cannot tell; docs/evaluation.md repeats them for users. Frames are uint8 (F, H, W, 3) RGB; embeddings float
(F, D) or (D,)."""
from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F


def temporal_consistency(frame_embeddings: torch.Tensor) -> float | None:
    """Mean cosine similarity of consecutive frames' image embeddings (CLIP), in [-1, 1]; 1 = every frame looks
    the same to the encoder. None for a single frame.

    Cannot tell: a frozen video scores 1 (pair it with `motion`); the encoder ignores details it was not trained
    to see, so flicker of small textures may not lower it."""
    if len(frame_embeddings) < 2:
        return None
    e = F.normalize(frame_embeddings.double(), dim=-1)
    return float((e[1:] * e[:-1]).sum(-1).mean())


def motion(frames: np.ndarray) -> float | None:
    """Mean optical-flow magnitude between consecutive frames, in pixels per frame (OpenCV's Farnebäck flow
    on grey frames, averaged over pixels and frame pairs); 0 = a frozen video. None for a single frame.

    Cannot tell: whether the motion is the right one or plausible; noise and flicker also register as motion,
    and it scales with resolution (compare videos of one size)."""
    if len(frames) < 2:
        return None
    grey = [cv2.cvtColor(np.ascontiguousarray(f), cv2.COLOR_RGB2GRAY) for f in frames]
    magnitudes = []
    for before, after in zip(grey[:-1], grey[1:]):
        flow = cv2.calcOpticalFlowFarneback(before, after, None, 0.5, 3, 15, 3, 5, 1.2, 0)
        magnitudes.append(float(np.linalg.norm(flow, axis=-1).mean()))
    return float(np.mean(magnitudes))


def text_alignment(frame_embeddings: torch.Tensor, text_embedding: torch.Tensor) -> float:
    """CLIP score: 100 · max(cos(frame, prompt), 0), averaged over frames (torchmetrics' CLIPScore per frame),
    with a CLIP model whose image and text towers share one space.

    Cannot tell: counting, spatial relations and motion described in the prompt; CLIP's scores shift between
    models, so compare numbers from one `--clip-model` only."""
    frames = F.normalize(frame_embeddings.double(), dim=-1)
    text = F.normalize(text_embedding.double().reshape(-1), dim=-1)
    return float((100 * (frames @ text)).clamp(min=0).mean())


def element_fidelity(element_embedding: torch.Tensor, frame_embeddings: torch.Tensor) -> float:
    """How well a reference element appears in the video: the highest cosine similarity between the element's
    image embedding and any frame's (A2-Bench's idea), in [-1, 1]. With CLIP it follows identity and category;
    with DINOv2 (`--dino-model`) appearance and layout more closely.

    Cannot tell: where or how large the element is, or whether it stays the same across frames (the maximum
    needs one good frame); a background element scores high on any frame that shows a similar scene."""
    element = F.normalize(element_embedding.double().reshape(-1), dim=-1)
    frames = F.normalize(frame_embeddings.double(), dim=-1)
    return float((frames @ element).max())
