"""E2V on 16-channel bases (Wan 2.1 T2V 1.3B/14B, Wan 2.2 T2V A14B), docs/e2v.md §8.

The patch embedding grows from 16 to 36 input channels ([x_t, 4 mask channels, 16 condition
channels]); the new input channels start at zero, so the expanded model computes exactly what the base
did until training moves them. For the CLIP pathway the image cross-attention of the I2V models is
added (image_embedder, add_k_proj, add_v_proj, norm_added_k) with add_v_proj zero-initialised, so the
new branch also starts as a no-op. All new and expanded weights train fully (also under LoRA).
"""
from __future__ import annotations

import dataclasses
import logging

import torch
from diffusers import WanTransformer3DModel

from modules.config.e2v_dataset_config import load_dataset_config
from modules.model.reference_slots import check_reference_base
from modules.model.vace_e2v import check_e2v_on_vace
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

def expanded_config(config: dict, mask_channels: int, image_dim: int | None) -> dict:
    """The transformer config after expansion (what a saved model's config.json says)."""
    new = dict(config)
    new["in_channels"] = 2 * config["out_channels"] + mask_channels
    if image_dim is not None and config.get("image_dim") is None:
        new["image_dim"] = image_dim
        new["added_kv_proj_dim"] = config["num_attention_heads"] * config["attention_head_dim"]
    return new


@torch.no_grad()
def expand_transformer(transformer: WanTransformer3DModel, mask_channels: int, image_dim: int | None,
                       seed: int = 0) -> tuple[WanTransformer3DModel, list[str]]:
    """A new transformer holding the old weights (shared, not copied) plus the E2V inputs.

    Returns it and the names of the parameters that must train fully (expanded and new ones).
    """
    old_config = {k: v for k, v in transformer.config.items() if not k.startswith("_")}
    config = expanded_config(old_config, mask_channels, image_dim)
    if config == old_config:
        return transformer, []
    dtype = transformer.patch_embedding.weight.dtype
    device = transformer.patch_embedding.weight.device
    with torch.device("meta"):  # the base's own class: a SkyReels-V2 base keeps its fps embedding
        expanded = type(transformer).from_config(config)
    state = transformer.state_dict()
    old_patch = state.pop("patch_embedding.weight")
    expanded.load_state_dict(state, strict=False, assign=True)
    for name, buffer in transformer.named_buffers():  # non-persistent buffers (rotary tables) are not in the state
        owner, _, leaf = name.rpartition(".")
        module = expanded.get_submodule(owner) if owner else expanded
        persistent = leaf not in getattr(module, "_non_persistent_buffers_set", set())
        module.register_buffer(leaf, buffer, persistent=persistent)

    generator = torch.Generator().manual_seed(seed)
    full_train = ["patch_embedding.weight"]
    patch = torch.zeros(old_patch.shape[0], config["in_channels"], *old_patch.shape[2:], dtype=dtype, device=device)
    patch[:, : old_patch.shape[1]] = old_patch  # new input channels start at zero: same output as the base
    expanded.patch_embedding.weight = torch.nn.Parameter(patch)
    for name, module in expanded.named_modules():
        params = [(n, p) for n, p in module.named_parameters(recurse=False) if p.is_meta]
        if not params:
            continue
        module.to_empty(device=device, recurse=False)
        for param_name, param in module.named_parameters(recurse=False):
            full_name = f"{name}.{param_name}" if name else param_name
            full_train.append(full_name)
            if ".add_v_proj" in f".{name}":
                param.zero_()  # the new image branch adds nothing until it learns to
            elif param_name == "weight" and param.ndim == 2:
                param.copy_(torch.empty_like(param, device="cpu").normal_(0, 0.02, generator=generator))
            elif param_name == "weight":
                param.fill_(1.0)  # norms
            else:
                param.zero_()  # biases, position embeddings
    logger.info("expanded the transformer for E2V: %d -> %d input channels%s", old_patch.shape[1],
                config["in_channels"], ", image cross-attention added" if image_dim is not None and
                transformer.config.get("image_dim") is None else "")
    return expanded, full_train


def expand_model_for_e2v(model, use_clip: bool, image_dim: int | None, seed: int) -> dict[int, list[str]]:
    """Expand every transformer of `model` in place; updates its variant. Expert index -> full-train names."""
    names: dict[int, list[str]] = {}
    for expert, attribute in enumerate(("transformer", "transformer_2")):
        transformer = getattr(model, attribute)
        if transformer is None:
            continue
        expanded, full = expand_transformer(transformer, model.variant.vae_scale_temporal,
                                            image_dim if use_clip else None, seed + expert)
        setattr(model, attribute, expanded)
        names[expert] = full
    model.variant = dataclasses.replace(model.variant, in_channels=model.transformer.config.in_channels,
                                        has_clip_branch=model.transformer.config.image_dim is not None)
    return names


def prepare_e2v_model(model, config) -> dict[int, list[str]]:
    """The model-setup step of E2V that every entry point with a training config runs (trainer,
    preview_e2v.py): a base without an image-conditioned input layout is expanded (§8), seeded by
    `config.seed`. Returns the fully trained names per expert ({} for I2V, TI2V and VACE bases, which take E2V as
    they are; VACE's settings are checked). The sampler and merge_lora.py expand from a LoRA file's header instead (seed 0): the file holds
    every weight a trained expert expanded or added, and an untrained expert's new inputs are a no-op whatever
    their seed (tests/test_registry.py)."""
    if config.e2v.reference_layout == "skyreels_v3":  # §9: a T2V-layout base takes appended references as it is
        check_reference_base(model.variant, f"base_model_name '{config.base_model_name}'")
        return {}
    variant, e2v = model.variant, config.e2v
    if variant.vace_layers:  # the elements are VACE's own reference frames: nothing to expand
        datasets = load_dataset_config(config.dataset_config).datasets if config.dataset_config else []
        check_e2v_on_vace(config, datasets)
        return {}
    if variant.channel_concat_condition or variant.expand_timesteps:
        return {}
    wants_clip = e2v.e2v_type in ("dual", "clip") or (e2v.e2v_type == "auto" and model.image_encoder is not None)
    if wants_clip and model.image_encoder is None:
        raise UserError(f"config key 'e2v.e2v_type' is '{e2v.e2v_type}' but the {variant.name} base has "
                        "no image encoder: set e2v.image_encoder_model_name to a folder with image_encoder/ "
                        "(e.g. an I2V checkpoint) or use e2v_type 'vae'")
    image_dim = model.image_encoder.config.hidden_size if wants_clip else None
    return expand_model_for_e2v(model, bool(wants_clip), image_dim, config.seed)
