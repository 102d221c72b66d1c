"""Makes `embedding:<name>` work for Wan's UMT5 text encoder in stock ComfyUI.

ComfyUI's Wan tokenizer (comfy/text_encoders/wan.py) is built without the embeddings folder: `WanT5Tokenizer`
hands `embedding_directory` to `UMT5XXlTokenizer`, which drops it when it builds its `SDTokenizer`
(comfy/sd1_clip.py). With `embedding_directory` None, `SDTokenizer.tokenize_with_weights` treats
`embedding:<name>` as plain words, silently. Every other part of ComfyUI's embedding path works for UMT5:
`load_embed` reads WanTrainer's file (one `umt5xxl` tensor, (tokens, 4096)) and `SDClipModel.process_tokens`
splices the vectors into the encoder's input.

The node gives the CLIP's UMT5 tokenizer ComfyUI's own embeddings folder(s) (`models/embeddings`, plus any
`extra_model_paths.yaml` adds), on a clone of the CLIP: the CLIP that came in, and every other node using it,
stay as they were. Nothing here imports ComfyUI at module level, so the logic can be tested without it.
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

UMT5_EMBEDDING_KEY = "umt5xxl"  # SDTokenizer.embedding_key of ComfyUI's UMT5-XXL tokenizer (Wan 2.1 / 2.2)


def umt5_tokenizers(tokenizer: Any) -> list[tuple[Any, str]]:
    """(holder, attribute) of each UMT5 `SDTokenizer` inside a CLIP's tokenizer: an `SD1Tokenizer` holds its
    `SDTokenizer` under the attribute its `clip` names (`umt5xxl` for Wan); multi-encoder tokenizers hold several."""
    found = []
    for name, value in vars(tokenizer).items():
        if getattr(value, "embedding_key", None) == UMT5_EMBEDDING_KEY and hasattr(value, "embedding_directory"):
            found.append((tokenizer, name))
    return found


def with_embedding_directory(clip: Any, directories: Sequence[str]) -> Any:
    """A clone of `clip` whose UMT5 tokenizer reads embeddings from `directories`. The tokenizer objects are
    copied, not changed: `CLIP.clone()` shares its tokenizer with the original."""
    clone = clip.clone()
    tokenizer = copy.copy(clone.tokenizer)
    targets = umt5_tokenizers(tokenizer)
    if not targets:
        raise ValueError("this CLIP has no UMT5 tokenizer (Wan 2.1 / 2.2 text encoder): load umt5_xxl with a "
                         "CLIPLoader of type 'wan'")
    for holder, name in targets:
        inner = copy.copy(getattr(holder, name))
        inner.embedding_directory = list(directories)
        setattr(holder, name, inner)
    clone.tokenizer = tokenizer
    return clone


class WanTrainerUMT5Embeddings:
    """ComfyUI node: CLIP in, the same CLIP out with `embedding:<name>` enabled for its UMT5 tokenizer."""

    CATEGORY = "conditioning/WanTrainer"
    RETURN_TYPES = ("CLIP",)
    FUNCTION = "apply"
    DESCRIPTION = ("Lets prompts use WanTrainer embeddings (models/embeddings/<name>.safetensors) as "
                   "'embedding:<name>' with a Wan UMT5 text encoder; stock ComfyUI ignores them for Wan.")

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {"required": {"clip": ("CLIP", {"tooltip": "A Wan text encoder (CLIPLoader, type wan)."})}}

    def apply(self, clip: Any) -> tuple[Any]:
        import folder_paths  # ComfyUI's own: models/embeddings and extra_model_paths.yaml

        return (with_embedding_directory(clip, folder_paths.get_folder_paths("embeddings")),)
