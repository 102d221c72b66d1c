"""Module names of a Wan transformer's LoRA targets in the three key spaces LoRA files use: diffusers module paths
(``blocks.0.attn1.to_q``), Wan's original names (``blocks.0.self_attn.q``, ComfyUI's ``diffusion_model.`` keys)
and musubi-tuner's (``blocks_0_self_attn_q`` after ``lora_unet_``). One place for the map (`lora_formats`,
`original_keys` and the base-LoRA merge read it)."""
from __future__ import annotations

import re
from collections.abc import Mapping

# diffusers module path inside a block -> Wan original name inside a block
_BLOCK_NAMES = {
    "attn1.to_q": "self_attn.q",
    "attn1.to_k": "self_attn.k",
    "attn1.to_v": "self_attn.v",
    "attn1.to_out.0": "self_attn.o",
    "attn2.to_q": "cross_attn.q",
    "attn2.to_k": "cross_attn.k",
    "attn2.to_v": "cross_attn.v",
    "attn2.to_out.0": "cross_attn.o",
    "attn2.add_k_proj": "cross_attn.k_img",
    "attn2.add_v_proj": "cross_attn.v_img",
    "ffn.net.0.proj": "ffn.0",
    "ffn.net.2": "ffn.2",
    # Wan2.2-Animate-2 read from the official checkpoint's layout, which wraps each block in an in-context module
    # (`blocks.N.block.self_attn.q`, e.g. DiffSynth-Studio's LoRAs): the inverse of diffusers'
    # convert_wan_animate_2_transformer_to_diffusers. No Wan 2.1 / 2.2 name collides with these.
    **{f"{attn}.{ours}": f"block.{attn}.{theirs}" for attn in ("self_attn", "cross_attn")
       for ours, theirs in (("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "o"))},
    "cross_attn.add_k_proj": "block.cross_attn.k_img",
    "cross_attn.add_v_proj": "block.cross_attn.v_img",
    "ffn.0": "block.ffn.0",
    "ffn.2": "block.ffn.2",
}
# Wan2.2-Animate-2's diffusers names inside a block -> ComfyUI's, which its WanAnimate2Model keeps from Wan 2.1 I2V
# (comfy/ldm/wan/model_animate2.py subclasses WanAttentionBlock and WanSelfAttention): what our files write. They
# collide with Wan's own original names, so reading maps them to Animate-2's only when a file's header names that
# variant (`animate2_name`).
_ANIMATE2_NAMES = {
    **{f"{attn}.{ours}": f"{attn}.{theirs}" for attn in ("self_attn", "cross_attn")
       for ours, theirs in (("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "o"))},
    "cross_attn.add_k_proj": "cross_attn.k_img",
    "cross_attn.add_v_proj": "cross_attn.v_img",
    "ffn.0": "ffn.0",
    "ffn.2": "ffn.2",
}
_ANIMATE2_NAMES_REV = {v: k for k, v in _ANIMATE2_NAMES.items()}
# diffusers module path -> Wan original name, outside the blocks
_GLOBAL_NAMES = {
    "condition_embedder.time_proj": "time_projection.1",
    "proj_out": "head.head",
    "condition_embedder.text_embedder.linear_1": "text_embedding.0",
    "condition_embedder.text_embedder.linear_2": "text_embedding.2",
    "condition_embedder.time_embedder.linear_1": "time_embedding.0",
    "condition_embedder.time_embedder.linear_2": "time_embedding.2",
    "condition_embedder.image_embedder.ff.net.0.proj": "img_emb.proj.1",
    "condition_embedder.image_embedder.ff.net.2": "img_emb.proj.3",
}
# VACE control blocks (ComfyUI's VaceWanAttentionBlock): a Wan block and the control branch's projections
_VACE_BLOCK_NAMES = {**_BLOCK_NAMES, "proj_in": "before_proj", "proj_out": "after_proj"}
_GLOBAL_NAMES_REV = {v: k for k, v in _GLOBAL_NAMES.items()}
BLOCK_CONTAINERS = ("blocks.", "vace_blocks.")  # module paths of the transformer's (base and VACE) blocks
_BLOCK_RE = re.compile(r"^(blocks|vace_blocks)\.(\d+)\.(.+)$")
_MUSUBI_BLOCK_RE = re.compile(r"^(blocks|vace_blocks)_(\d+)_(.+)$")
_MUSUBI_GLOBAL_NAMES = {v.replace(".", "_"): v for v in _GLOBAL_NAMES.values()}


def diffusers_to_wan_name(module: str) -> str | None:
    """``blocks.3.attn1.to_q`` -> ``blocks.3.self_attn.q``; None when Wan has no original name for it. Animate-2's
    ``blocks.3.self_attn.to_q`` -> ``blocks.3.self_attn.q`` (ComfyUI's name)."""
    return _renamed(_BLOCK_RE, module, lambda names: {**names, **_ANIMATE2_NAMES}, _GLOBAL_NAMES)


def animate2_name(module: str) -> str:
    """A module read as Wan's (``blocks.3.attn1.to_q``) -> Animate-2's (``blocks.3.self_attn.to_q``); names that are
    Animate-2's already, or outside the blocks, stay."""
    if (m := _BLOCK_RE.match(module)) is None or m.group(1) != "blocks":
        return module
    wan = _BLOCK_NAMES.get(m.group(3))
    ours = _ANIMATE2_NAMES_REV.get(wan) if wan else None
    return f"blocks.{m.group(2)}.{ours}" if ours else module


def wan_to_diffusers_name(name: str) -> str | None:
    """``blocks.3.self_attn.q`` -> ``blocks.3.attn1.to_q``; None when unknown."""
    return _renamed(_BLOCK_RE, name, lambda names: {v: k for k, v in names.items()}, _GLOBAL_NAMES_REV)


def musubi_to_wan_name(name: str) -> str | None:
    """``blocks_0_self_attn_q`` (musubi-tuner, without ``lora_unet_``) -> ``blocks.0.self_attn.q``."""
    return _renamed(_MUSUBI_BLOCK_RE, name, lambda names: {v.replace(".", "_"): v for v in names.values()},
                    _MUSUBI_GLOBAL_NAMES)


def _renamed(pattern: re.Pattern, name: str, inner_map, global_names: Mapping[str, str]) -> str | None:
    """A block module's name by `inner_map` of its container's names (base or VACE blocks), else a global one."""
    if (m := pattern.match(name)) is None:
        return global_names.get(name)
    inner = inner_map(_VACE_BLOCK_NAMES if m.group(1) == "vace_blocks" else _BLOCK_NAMES).get(m.group(3))
    return f"{m.group(1)}.{m.group(2)}.{inner}" if inner else None
