"""The encoders the metrics use, loaded from local folders only: a CLIP image tower (the Wan checkpoint's own
`image_encoder`, or `--clip-model`'s), CLIP's text tower (`--clip-model`: both towers share one space) and
DINOv2 (`--dino-model`). Each gives one embedding per image (text)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from modules.util.errors import UserError
from modules.util.model_folders import require_safetensors

_BATCH = 16


def _output(value) -> torch.Tensor:
    """transformers 5 returns model outputs from get_*_features; older versions the tensor."""
    return value.pooler_output if hasattr(value, "pooler_output") else value


class ImageEncoder:
    """`embed(images)` -> (N, D) float32 on the CPU."""

    def __init__(self, name: str, model: torch.nn.Module, processor, features, device: torch.device | None):
        """`device` None: the model stays where it is (a model the trainer placed)."""
        self.name, self.model, self.processor, self.features = name, model.eval(), processor, features
        self.device = device or next(model.parameters()).device
        self.model.to(self.device)

    @torch.no_grad()
    def embed(self, images: list[np.ndarray]) -> torch.Tensor:
        out = []
        for start in range(0, len(images), _BATCH):
            inputs = self.processor(images=list(images[start:start + _BATCH]), return_tensors="pt")
            pixels = inputs["pixel_values"].to(self.device, next(self.model.parameters()).dtype)
            out.append(self.features(self.model, pixels).float().cpu())
        return torch.cat(out)


class TextEncoder:
    def __init__(self, model: torch.nn.Module, tokenizer, device: torch.device):
        self.model, self.tokenizer, self.device = model.eval().to(device), tokenizer, device

    @torch.no_grad()
    def embed(self, texts: list[str]) -> torch.Tensor:
        limit = getattr(self.model.config.text_config, "max_position_embeddings", 77)
        inputs = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=limit)
        return _output(self.model.get_text_features(**{k: v.to(self.device) for k, v in inputs.items()})).float().cpu()


def checkpoint_clip(model_dir: str | Path, device: torch.device) -> ImageEncoder | None:
    """The Wan checkpoint's own CLIP image tower (I2V folders have one), or None."""
    from transformers import CLIPImageProcessor, CLIPVisionModel

    folder = Path(model_dir)
    if not (folder / "image_encoder" / "config.json").is_file():
        return None
    require_safetensors(folder / "image_encoder", CLIPVisionModel)
    model = CLIPVisionModel.from_pretrained(folder / "image_encoder", use_safetensors=True)
    processor = CLIPImageProcessor.from_pretrained(folder / "image_processor")
    return ImageEncoder(f"checkpoint CLIP ({folder.name}/image_encoder)", model, processor,
                        lambda m, pixels: m(pixel_values=pixels).pooler_output, device)


def loaded_clip(image_encoder: torch.nn.Module | None, image_processor) -> ImageEncoder | None:
    """The CLIP image tower a loaded WanModel holds (None when it has none), used where it is."""
    if image_encoder is None or image_processor is None:
        return None
    return ImageEncoder("checkpoint CLIP", image_encoder, image_processor,
                        lambda m, pixels: m(pixel_values=pixels).pooler_output, None)


def clip_model(folder: str | Path, device: torch.device) -> tuple[ImageEncoder, TextEncoder]:
    """A local CLIP folder (CLIPModel: vision and text towers, tokenizer, image processor)."""
    from transformers import AutoTokenizer, CLIPImageProcessor, CLIPModel

    folder = _folder(folder, "--clip-model", "a CLIP folder (CLIPModel config.json, tokenizer, image processor)")
    require_safetensors(folder, CLIPModel)
    model = CLIPModel.from_pretrained(folder, use_safetensors=True)
    image = ImageEncoder(f"CLIP ({folder.name})", model, CLIPImageProcessor.from_pretrained(folder),
                         lambda m, pixels: _output(m.get_image_features(pixel_values=pixels)), device)
    return image, TextEncoder(model, AutoTokenizer.from_pretrained(folder), device)


def dino_model(folder: str | Path, device: torch.device) -> ImageEncoder:
    """A local DINOv2 folder: its CLS embedding (the pooled, layer-normed class token)."""
    from transformers import AutoImageProcessor, AutoModel

    folder = _folder(folder, "--dino-model", "a DINOv2 folder (config.json, preprocessor_config.json)")
    require_safetensors(folder, AutoModel)
    model = AutoModel.from_pretrained(folder, use_safetensors=True)
    return ImageEncoder(f"DINOv2 ({folder.name})", model, AutoImageProcessor.from_pretrained(folder),
                        lambda m, pixels: m(pixel_values=pixels).pooler_output, device)


def _folder(path: str | Path, flag: str, what: str) -> Path:
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise UserError(f"{flag} '{folder}' is not {what}: give a local folder (nothing is downloaded)")
    return folder
