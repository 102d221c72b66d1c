"""Module names of a Wan transformer's LoRA targets in the three key spaces LoRA files use: diffusers module paths
(``blocks.0.attn1.to_q``), Wan's original names (``blocks.0.self_attn.q``, ComfyUI's ``diffusion_model.`` keys)
and musubi-tuner's (``blocks_0_self_attn_q`` after ``lora_unet_``). One place for the map (`lora_formats`,
`original_keys` and the base-LoRA merge read it)."""
from __future__ import annotations

import re

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
}
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
_BLOCK_NAMES_REV = {v: k for k, v in _BLOCK_NAMES.items()}
_GLOBAL_NAMES_REV = {v: k for k, v in _GLOBAL_NAMES.items()}
_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.(.+)$")
_MUSUBI_BLOCK_RE = re.compile(r"^blocks_(\d+)_(.+)$")
_MUSUBI_BLOCK_NAMES = {v.replace(".", "_"): v for v in _BLOCK_NAMES.values()}
_MUSUBI_GLOBAL_NAMES = {v.replace(".", "_"): v for v in _GLOBAL_NAMES.values()}

def diffusers_to_wan_name(module: str) -> str | None:
    """``blocks.3.attn1.to_q`` -> ``blocks.3.self_attn.q``; None when Wan has no original name for it."""
    m = _BLOCK_RE.match(module)
    if m:
        inner = _BLOCK_NAMES.get(m.group(2))
        return f"blocks.{m.group(1)}.{inner}" if inner else None
    return _GLOBAL_NAMES.get(module)


def wan_to_diffusers_name(name: str) -> str | None:
    """``blocks.3.self_attn.q`` -> ``blocks.3.attn1.to_q``; None when unknown."""
    m = _BLOCK_RE.match(name)
    if m:
        inner = _BLOCK_NAMES_REV.get(m.group(2))
        return f"blocks.{m.group(1)}.{inner}" if inner else None
    return _GLOBAL_NAMES_REV.get(name)


def musubi_to_wan_name(name: str) -> str | None:
    """``blocks_0_self_attn_q`` (musubi-tuner, without ``lora_unet_``) -> ``blocks.0.self_attn.q``."""
    m = _MUSUBI_BLOCK_RE.match(name)
    if m:
        inner = _MUSUBI_BLOCK_NAMES.get(m.group(2))
        return f"blocks.{m.group(1)}.{inner}" if inner else None
    return _MUSUBI_GLOBAL_NAMES.get(name)
