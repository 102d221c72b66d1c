"""The textual-inversion embedding file, both directions (one place for the format).

`<name>.safetensors` holding one tensor under `umt5xxl`, shape (tokens, d_model), float32: what ComfyUI's Wan text
encoder reads from models/embeddings (comfy/sd1_clip.py `load_embed` with `embed_key='umt5xxl'`, width 4096 for
UMT5-XXL), used there as `embedding:<name>` in a prompt once comfyui/wantrainer_nodes gives Wan's UMT5 tokenizer the
embeddings folder (stock ComfyUI builds it without one and reads the words as text). The header records the placeholder our prompts use, the
token count and the base model. Vectors stay float32 whatever output_dtype says: 16 KB a token, and a file continued
from (`embedding_weight_path`) must start where training stopped.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from modules.model.text_embedding import EMBEDDING_KEY, WanModelEmbedding
from modules.util.atomic import atomic_path
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

PLACEHOLDER_KEY = "wantrainer.embedding.placeholder"
TOKEN_COUNT_KEY = "wantrainer.embedding.token_count"
BASE_MODEL_KEY = "wantrainer.base_model"


def embedding_path_beside(destination: str | os.PathLike) -> Path:
    """Where a LoRA+embedding run writes its embedding: `<lora stem>_embedding.safetensors` beside the LoRA."""
    destination = Path(destination)
    stem = destination.stem if destination.suffix == ".safetensors" else destination.name
    return destination.with_name(f"{stem}_embedding.safetensors")


def save_embedding(embedding: WanModelEmbedding, path: str | os.PathLike, base_model: str = "",
                   metadata: dict[str, str] | None = None) -> Path:
    """Write `embedding` atomically; returns the path."""
    header = {"format": "pt", PLACEHOLDER_KEY: embedding.placeholder, TOKEN_COUNT_KEY: str(embedding.token_count),
              BASE_MODEL_KEY: base_model, "modelspec.architecture": "wan/umt5-embedding"}
    header.update(metadata or {})
    vectors = embedding.vectors.detach().float().cpu().contiguous()
    with atomic_path(path) as tmp:
        save_file({EMBEDDING_KEY: vectors}, str(tmp), metadata={k: v for k, v in header.items() if v})
    return Path(path)


def read_embedding_vectors(path: str | os.PathLike, option: str) -> tuple[torch.Tensor, dict[str, str]]:
    """The vectors (tokens, width) and header of an embedding file, without a model: the start-up check reads
    them too. NaN or inf in them is refused: training from them skips every step, sampling gives noise."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{option}: '{path}' does not exist: give an embedding .safetensors file")
    try:
        with safe_open(str(path), "pt") as f:
            names = list(f.keys())
            header = f.metadata() or {}
            name = EMBEDDING_KEY if EMBEDDING_KEY in names else (names[0] if len(names) == 1 else None)
            if name is None:
                raise UserError(f"{option}: '{path}' holds no '{EMBEDDING_KEY}' tensor (it has {len(names)} "
                                "tensors): give a UMT5 embedding file")
            vectors = f.get_tensor(name)
    except (SafetensorError, OSError) as e:
        raise UserError(f"{option}: '{path}' is not a readable .safetensors file ({e})") from None
    vectors = vectors.reshape(-1, vectors.shape[-1]) if vectors.dim() else vectors
    bad = int((~torch.isfinite(vectors.float())).sum()) if vectors.is_floating_point() else 0
    if bad:
        raise UserError(f"{option}: '{path}' holds {bad} NaN/inf value(s) in its vectors (a run that diverged "
                        "wrote it): use an earlier file, or start the embedding anew without it")
    return vectors, header


def read_embedding(path: str | os.PathLike, width: int, option: str, placeholder: str = "") -> WanModelEmbedding:
    """An embedding file as ComfyUI reads it (the `umt5xxl` tensor, else the file's only tensor), checked against
    the text encoder's `width`. The placeholder: `placeholder` when given, else the file's own, else `<file stem>`.
    Errors are one line naming `option` (the config key or flag that named the file)."""
    path = Path(path)
    vectors, header = read_embedding_vectors(path, option)
    if vectors.dim() != 2 or vectors.shape[-1] != width or not len(vectors):
        raise UserError(f"{option}: '{path}' holds vectors of shape {tuple(vectors.shape)}, but this model's text "
                        f"encoder takes (tokens, {width}): it was made for another text encoder")
    chosen = placeholder or header.get(PLACEHOLDER_KEY) or f"<{path.stem}>"
    if not placeholder and PLACEHOLDER_KEY not in header:
        logger.info("%s: '%s' names no placeholder; prompts use %s for it", option, path, chosen)
    return WanModelEmbedding(chosen, vectors.float())
