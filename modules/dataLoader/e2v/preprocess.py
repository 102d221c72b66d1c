"""Per-element image preprocessing, exactly as docs/e2v.md §2 (and A2's `_crop_and_resize[_pad]`).

Input: uint8 H0×W0×3 RGB (numpy). Output: uint8 H×W×3. The resize is PIL's BICUBIC, which is what
A2's ``Image.resize((W, H))`` uses by default for RGB images, so the results are A2-exact (cv2's
INTER_CUBIC uses a different kernel and differs by a few levels).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from PIL import Image

WHITE = 255
BLACK = 0


def _check(image: np.ndarray, height: int, width: int) -> tuple[int, int]:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected a uint8 H×W×3 RGB array, got {getattr(image, 'dtype', type(image))} "
                         f"{getattr(image, 'shape', '')}")
    if height < 1 or width < 1:
        raise ValueError(f"target size must be positive, got {height}x{width}")
    return image.shape[0], image.shape[1]


def _bicubic(image: np.ndarray, height: int, width: int) -> np.ndarray:
    return np.asarray(Image.fromarray(image).resize((width, height), Image.Resampling.BICUBIC))


def _pad(image: np.ndarray, height: int, width: int, value: int) -> np.ndarray:
    """Pad to the target aspect with `value` (p = int((aspect·other − side)/2) on each side), then resize."""
    h0, w0 = _check(image, height, width)
    if h0 / w0 < height / width:  # too wide: pad rows top and bottom
        p = int(((height / width) * w0 - h0) / 2.0)
        padded = np.full((h0 + 2 * p, w0, 3), value, dtype=np.uint8)
        padded[p:p + h0] = image
    else:  # too tall (or equal aspect, p = 0): pad columns left and right
        p = int(((width / height) * h0 - w0) / 2.0)
        padded = np.full((h0, w0 + 2 * p, 3), value, dtype=np.uint8)
        padded[:, p:p + w0] = image
    return _bicubic(padded, height, width)


def pad_white(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """§2 `pad_white`: pad the short side with white (255) to the target aspect, then bicubic resize."""
    return _pad(image, height, width, WHITE)


def letterbox(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """§2 `letterbox`: like `pad_white` with black (0)."""
    return _pad(image, height, width, BLACK)


def center_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """§2 `center_crop`: keep the centred strip of the target aspect (width int(h0/H·W) or height
    int(w0/W·H), offset (size − strip)//2), then bicubic resize."""
    h0, w0 = _check(image, height, width)
    if h0 / w0 < height / width:  # too wide: keep a centred column strip
        cw = int(h0 / height * width)
        left = (w0 - cw) // 2
        image = image[:, left:left + cw]
    else:
        ch = int(w0 / width * height)
        top = (h0 - ch) // 2
        image = image[top:top + ch]
    return _bicubic(np.ascontiguousarray(image), height, width)


def resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """§2 `resize`: plain bicubic resize to H×W (the aspect is not kept)."""
    _check(image, height, width)
    return _bicubic(image, height, width)


METHODS: dict[str, Callable[[np.ndarray, int, int], np.ndarray]] = {
    "pad_white": pad_white, "center_crop": center_crop, "resize": resize, "letterbox": letterbox,
}


def preprocess(image: np.ndarray, method: str, height: int, width: int) -> np.ndarray:
    """Apply the named §2 method (pad_white | center_crop | resize | letterbox)."""
    if method not in METHODS:
        raise ValueError(f"unknown preprocess '{method}': use one of {', '.join(METHODS)}")
    return METHODS[method](image, height, width)


def to_unit_range(image: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """§2: uint8 -> float32 x/127.5 − 1 in [−1, 1], same shape and kind (numpy or torch)."""
    if isinstance(image, torch.Tensor):
        return image.to(torch.float32) / 127.5 - 1.0
    return image.astype(np.float32) / np.float32(127.5) - np.float32(1.0)


def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """uint8 H×W×3 -> float32 (3, H, W) in [−1, 1]: one VAE-pathway frame (§2)."""
    tensor = to_unit_range(torch.from_numpy(np.array(image, copy=True)).permute(2, 0, 1))  # PIL arrays are read-only
    assert isinstance(tensor, torch.Tensor)
    return tensor.contiguous()
