"""Reading a Wan checkpoint folder's own configs into a `WanVariant` (never from its folder name); the family
comes from the registry, so an unknown class or layout is a one-line error naming the folder."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from modules.config.loading import loads_json
from modules.model.folder_facts import ANIMATE2_CLASS
from modules.model.folder_facts import has_component as component_present
from modules.model.registry import family_of
from modules.model.vace_e2v import is_vace_class
from modules.model.WanVariant import WanVariant
from modules.util.enum import ModelType
from modules.util.errors import UserError
from modules.util.path_checks import path_kind


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"'{path}' is missing: base_model_name must be a diffusers-format Wan folder")
    try:
        data = loads_json(path.read_text(encoding="utf-8"), f"'{path}'")
    except json.JSONDecodeError as e:
        raise UserError(f"'{path}' is not valid JSON ({e}): the model folder is damaged") from None
    except UnicodeDecodeError:
        raise UserError(f"'{path}' is not UTF-8 text: the model folder is damaged") from None
    if not isinstance(data, dict):
        raise UserError(f"'{path}' holds {type(data).__name__} {json.dumps(data)[:40]}, not a JSON object: the model "
                        "folder is damaged (a diffusers folder's configs are objects)")
    return data


def detect_variant(model_dir: str | Path) -> WanVariant:
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        kind = path_kind(model_dir)
        what = "does not exist" if kind == "missing" else f"is {kind}, not a folder"
        raise UserError(f"model folder '{model_dir}' {what}: give a diffusers-format Wan folder (the one holding "
                        "model_index.json); a single .safetensors transformer goes in transformer_override")
    index = _read_json(model_dir / "model_index.json")
    transformer = _read_json(model_dir / "transformer" / "config.json")
    vae = _read_json(model_dir / "vae" / "config.json")

    def has_component(name: str) -> bool:
        return component_present(model_dir, index, name)

    two_experts = has_component("transformer_2")
    expand_timesteps = bool(index.get("expand_timesteps", False))
    # Animate-2's transformer names its channels and CLIP branch as Wan's original code does (in_dim, out_dim,
    # use_img_emb); every other Wan transformer as diffusers' (in_channels, out_channels, image_dim).
    in_channels = int(transformer["in_channels"] if "in_channels" in transformer else transformer.get("in_dim", 0))
    out_channels = int(transformer.get("out_channels") or transformer.get("out_dim") or in_channels)
    z_dim = int(vae.get("z_dim", 16))
    scale_spatial = int(vae.get("scale_factor_spatial", 8))
    scale_temporal = int(vae.get("scale_factor_temporal", 4))
    class_name = transformer.get("_class_name") or _indexed_class(index, "transformer")
    # Wan 2.2: the A14B experts, TI2V's VAE and timesteps, and the Animate family (diffusers' Wan-Animate checkpoint is
    # Wan-AI/Wan2.2-Animate-14B, ComfyUI's model class WAN22_Animate; Animate-2 is its successor, Wan2.2-Animate-2),
    # which keeps Wan 2.1's VAE and I2V layout
    is_wan_2_2 = two_experts or expand_timesteps or z_dim == 48 or class_name == ANIMATE2_CLASS
    paired = transformer.get("pos_embed_seq_len") is not None and transformer.get("image_dim") is not None
    family = family_of(model_dir, class_name, in_channels, out_channels, scale_temporal, expand_timesteps, two_experts,
                       paired)
    return WanVariant(
        name=family.name,
        model_type=ModelType.WAN_2_2 if is_wan_2_2 else ModelType.WAN_2_1,
        in_channels=in_channels,
        out_channels=out_channels,
        has_clip_branch=transformer.get("image_dim") is not None or bool(transformer.get("use_img_emb")),
        has_image_encoder=has_component("image_encoder") and has_component("image_processor"),
        two_experts=two_experts,
        boundary_ratio=float(index["boundary_ratio"]) if index.get("boundary_ratio") is not None else None,
        expand_timesteps=expand_timesteps,
        vae_z_dim=z_dim,
        vae_scale_spatial=scale_spatial,
        vae_scale_temporal=scale_temporal,
        patch_size=tuple(transformer.get("patch_size", (1, 2, 2))),
        # Wan 2.2 TI2V 5B, SkyReels-V2 and Animate-2 (its pipeline's default fps) were trained at 24 fps; Wan 2.1 and
        # Wan 2.2 A14B at 16 fps.
        fps=24 if z_dim == 48 or class_name.startswith("SkyReelsV2") or class_name == ANIMATE2_CLASS else 16,
        transformer_config_hash=transformer_config_hash(transformer),
        transformer_class=class_name,
        paired_image_tokens=paired,
        fps_embedding=bool(transformer.get("inject_sample_info", False)),
        vace_layers=tuple(int(i) for i in transformer.get("vace_layers") or ()) if is_vace_class(class_name) else (),
    )


def _indexed_class(index: dict[str, Any], component: str) -> str:
    """The class model_index.json names for a component (["diffusers", "WanTransformer3DModel"])."""
    entry = index.get(component)
    return str(entry[1]) if isinstance(entry, list) and len(entry) == 2 and entry[1] else "unknown"


def transformer_config_hash(config: dict[str, Any]) -> str:
    """A short hash of a transformer's architecture (diffusers' bookkeeping keys `_class_name`,
    `_diffusers_version`, ... left out): equal for the same network shape, whatever the folder."""
    architecture = {k: v for k, v in config.items() if not k.startswith("_")}
    return hashlib.sha256(json.dumps(architecture, sort_keys=True).encode()).hexdigest()[:16]
