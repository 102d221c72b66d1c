"""A Wan transformer as one .safetensors file in Wan's original key names: what ComfyUI's
"Load Diffusion Model" node reads (`comfy.sd.load_diffusion_model`).

The names are the inverse of diffusers' `convert_wan_transformer_to_diffusers` (single_file_utils.py):
the Linear layers use the module map of `lora_formats` (one place for it); the norms, modulation tables
and the image embedder's norms, which no LoRA targets, are mapped here. tests/test_merge_lora.py checks
that diffusers' converter turns the written names back into the exact diffusers state dict of every
variant, the E2V-expanded one included.

ComfyUI tells the model kind from the keys (comfy/model_detection.py, `detect_unet_config`):
``head.modulation`` marks Wan, ``patch_embedding.weight``'s input channels give ``in_dim`` (36: image
conditioning by channel concat), ``img_emb.proj.0.bias`` (the image embedder's first norm) makes it an
I2V model with the CLIP branch, ``img_emb.emb_pos`` (FLF2V's position embedding over the first and the last
frame's CLIP tokens, `MLPProj.emb_pos`) sets ``flf_pos_embed_token_number`` from its shape, and
``vace_patch_embedding.weight`` makes it a VACE model with one control block per ``vace_blocks.N``.
SkyReels-V2's fps embedding keeps SkyReels' own names (``fps_embedding``, ``fps_projection.0`` / ``.2``, which
diffusers' convert_skyreelsv2_to_diffusers.py reads); ComfyUI's Wan model has no such weights (only SkyReels-V2
DF 1.3B uses them).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Mapping

import torch

from modules.modelFile.lora_formats import diffusers_to_wan_name
from modules.util.atomic import atomic_path
from modules.util.errors import UserError
from modules.util.safetensors_io import TensorSpec, write_safetensors_streamed

_BLOCK = re.compile(r"^(blocks|vace_blocks)\.(\d+)\.(.+)$")  # VACE's control blocks are Wan blocks too
# diffusers module path inside a block -> Wan original name, for what `lora_formats` does not map
_BLOCK_EXTRAS = {
    "attn1.norm_q": "self_attn.norm_q",
    "attn1.norm_k": "self_attn.norm_k",
    "attn2.norm_q": "cross_attn.norm_q",
    "attn2.norm_k": "cross_attn.norm_k",
    "attn2.norm_added_k": "cross_attn.norm_k_img",
    "norm2": "norm3",  # the cross-attention norm: Wan's norm3 (its norm1/norm2 have no weights)
    "scale_shift_table": "modulation",  # a parameter, not a module
}
_GLOBAL_EXTRAS = {
    "patch_embedding": "patch_embedding",
    "vace_patch_embedding": "vace_patch_embedding",
    "condition_embedder.image_embedder.norm1": "img_emb.proj.0",
    "condition_embedder.image_embedder.norm2": "img_emb.proj.4",
    "fps_embedding": "fps_embedding",
    "fps_projection.net.0.proj": "fps_projection.0",
    "fps_projection.net.2": "fps_projection.2",
}
# weights that are parameters of their own, no module's `.weight`
_PARAMETERS = {
    "scale_shift_table": "head.modulation",
    "condition_embedder.image_embedder.pos_embed": "img_emb.emb_pos",
}


def _module_name(module: str) -> str | None:
    match = _BLOCK.match(module)
    if match and match.group(3) in _BLOCK_EXTRAS:
        return f"{match.group(1)}.{match.group(2)}.{_BLOCK_EXTRAS[match.group(3)]}"
    return diffusers_to_wan_name(module) or _GLOBAL_EXTRAS.get(module)


def original_key(key: str) -> str:
    """``blocks.0.attn1.to_q.weight`` -> ``blocks.0.self_attn.q.weight``; `UserError` for a weight Wan has no name for."""
    if key in _PARAMETERS:
        return _PARAMETERS[key]
    module, _, leaf = key.rpartition(".")
    if leaf == "scale_shift_table":  # a block's modulation: a parameter of its own, no module's weight
        module, leaf = key, ""
    name = _module_name(module)
    if name is None:
        raise UserError(f"transformer weight '{key}' has no name in Wan's original layout, so this model cannot be "
                        "written as a ComfyUI single file: write a diffusers folder instead (--format DIFFUSERS)")
    return f"{name}.{leaf}" if leaf else name


def write_original_file(path: Path, specs: Mapping[str, TensorSpec], produce: Callable[[str], torch.Tensor],
                        metadata: Mapping[str, str]) -> Path:
    """Write the tensors `specs` names (diffusers names; `produce` gives each in its spec's dtype) under their
    original names to `path`, atomically, one tensor in memory at a time."""
    names = {original_key(name): name for name in specs}
    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        write_safetensors_streamed(stream, {original: specs[name] for original, name in names.items()},
                                   lambda original: produce(names[original]), dict(metadata))
    return path
