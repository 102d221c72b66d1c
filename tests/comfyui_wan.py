"""ComfyUI's "Load Diffusion Model" for a Wan single file, re-stated from its code (Comfy-Org/ComfyUI a125cd84), not
imported (CI has no ComfyUI; tools/check_comfyui_merged.py runs the real one on the same files):

- `detect`: comfy/model_detection.py `detect_unet_config`, the ``head.modulation`` ("Wan 2.1") branch without the
  camera / S2V / HuMo / Animate keys we never write, and the first class of comfy/supported_models.py `models` whose
  `unet_config` matches (WAN22_T2V, WAN21_T2V, WAN21_I2V, WAN21_FunControl2V, WAN21_Vace, in that order).
- `model_keys`: the state-dict names of the model that class builds, comfy/ldm/wan/model.py `WanModel` /
  `VaceWanModel` (`WanSelfAttention` q k v o + norm_q norm_k, `WanI2VCrossAttention` + k_img v_img norm_k_img,
  `WanAttentionBlock` norm3 ffn.0 ffn.2 modulation (norm1/norm2 carry no weights), `Head` head + modulation,
  `MLPProj` proj.0 proj.1 proj.3 proj.4 (+ emb_pos when `flf_pos_embed_token_number`), `VaceWanAttentionBlock`
  before_proj (block 0 only) + after_proj). model_base.py `load_model_weights` loads the file with
  `load_state_dict(strict=False)` and logs "unet missing" / "unet unexpected": a file loads with nothing left out
  when its keys are exactly these.
"""
from __future__ import annotations

from typing import Mapping


def _count(keys: set[str], prefix: str) -> int:
    """comfy/utils.py `count_blocks`: how many `prefix<N>.` groups there are, from 0 up."""
    n = 0
    while any(key.startswith(f"{prefix}{n}.") for key in keys):
        n += 1
    return n


def detect(shapes: Mapping[str, tuple[int, ...]]) -> dict:
    """The unet config ComfyUI reads from a file's key -> shape map, with the supported-model class it picks."""
    keys = set(shapes)
    assert "head.modulation" in keys, "not a Wan file for ComfyUI (no head.modulation)"
    config = {"dim": shapes["head.modulation"][-1], "out_dim": shapes["head.head.weight"][0] // 4,
              "num_layers": _count(keys, "blocks."), "in_dim": shapes["patch_embedding.weight"][1]}
    if "vace_patch_embedding.weight" in keys:
        config.update(model_type="vace", vace_in_dim=shapes["vace_patch_embedding.weight"][1],
                      vace_layers=_count(keys, "vace_blocks."))
    else:
        config["model_type"] = "i2v" if "img_emb.proj.0.bias" in keys else "t2v"
    if "img_emb.emb_pos" in keys:
        config["flf_pos_embed_token_number"] = shapes["img_emb.emb_pos"][1]
    if config["model_type"] == "t2v":
        config["model"] = "WAN22_T2V" if config["out_dim"] == 48 else "WAN21_T2V"
    elif config["model_type"] == "i2v":
        config["model"] = {36: "WAN21_I2V", 48: "WAN21_FunControl2V"}.get(config["in_dim"])
    else:
        config["model"] = "WAN21_Vace"
    return config


def _linear(name: str) -> list[str]:
    return [f"{name}.weight", f"{name}.bias"]


def _block(prefix: str, image: bool) -> list[str]:
    keys = [f"{prefix}.modulation", *_linear(f"{prefix}.norm3"), *_linear(f"{prefix}.ffn.0"),
            *_linear(f"{prefix}.ffn.2")]
    for attention in ("self_attn", "cross_attn"):
        keys += [key for part in "qkvo" for key in _linear(f"{prefix}.{attention}.{part}")]
        keys += [f"{prefix}.{attention}.norm_q.weight", f"{prefix}.{attention}.norm_k.weight"]
    if image:  # WanI2VCrossAttention
        keys += [*_linear(f"{prefix}.cross_attn.k_img"), *_linear(f"{prefix}.cross_attn.v_img"),
                 f"{prefix}.cross_attn.norm_k_img.weight"]
    return keys


def model_keys(config: Mapping) -> set[str]:
    """Every state-dict name of the ComfyUI model `detect` chose (WanModel / VaceWanModel)."""
    image = config["model_type"] == "i2v"
    keys = [*_linear("patch_embedding"), *_linear("text_embedding.0"), *_linear("text_embedding.2"),
            *_linear("time_embedding.0"), *_linear("time_embedding.2"), *_linear("time_projection.1"),
            *_linear("head.head"), "head.modulation"]
    for i in range(config["num_layers"]):
        keys += _block(f"blocks.{i}", image)
    if image:
        keys += [key for i in (0, 1, 3, 4) for key in _linear(f"img_emb.proj.{i}")]
        if config.get("flf_pos_embed_token_number") is not None:
            keys.append("img_emb.emb_pos")
    if config["model_type"] == "vace":
        keys += _linear("vace_patch_embedding")
        for i in range(config["vace_layers"]):
            keys += _block(f"vace_blocks.{i}", False) + _linear(f"vace_blocks.{i}.after_proj")
            keys += _linear(f"vace_blocks.{i}.before_proj") if i == 0 else []
    return set(keys)
