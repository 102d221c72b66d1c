"""Wan components from single files (ComfyUI's split files or diffusers-named ones).

Each loader reads the file (`single_file`), renames its keys to diffusers/transformers names where they
differ, checks them against the base folder's config and builds the model with the same dtype rules as
`from_pretrained` on the folder (diffusers keeps `_keep_in_fp32_modules` in float32), so a file holding a
folder's weights gives that folder's model exactly.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

import torch
from accelerate import init_empty_weights
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers
from diffusers.models.model_loading_utils import load_model_dict_into_meta
from diffusers.models.modeling_utils import ModelMixin
from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    CLIPVisionModel,
    PretrainedConfig,
    PreTrainedModel,
    UMT5Config,
    UMT5EncoderModel,
)

from modules.modelFile.encoder_configs import (
    clip_image_processor,
    clip_vision_config,
    clip_vision_heads,
    clip_vision_sizes,
    folder_config,
    size_mismatch,
    umt5_config,
    umt5_sizes,
)
from modules.modelFile.single_file import (
    CONVROT_GROUP,
    WEIGHT_SCALE,
    SingleFile,
    check_matches,
    read_single_file,
    shapes,
)
from modules.modelFile.wan_vae_names import wan_vae_to_diffusers
from modules.modelSetup.int8_storage import Int8ConvRotLinear, set_submodule

DiffusersModel = TypeVar("DiffusersModel", bound=ModelMixin)
TransformersModel = TypeVar("TransformersModel", bound=PreTrainedModel)
Shapes = dict[str, tuple[int, ...]]
Describe = Callable[[Shapes], str]


def load_transformer_file(source: SingleFile, config_folder: Path, dtype: torch.dtype,
                          keep_int8: bool = False) -> WanTransformer3DModel:
    """A transformer in diffusers or original Wan / ComfyUI names, in any dtype incl. fp8, fp8_scaled and ComfyUI's
    int8 ConvRot (dequantised, or with `keep_int8` built as Int8ConvRotLinear layers straight from the file's
    tensors: no full-precision copy of those weights ever exists)."""
    state = read_single_file(source, "transformer", dtype, keep_int8)
    if any(".self_attn." in name for name in state):  # original Wan names: diffusers' converter renames them
        state = convert_wan_transformer_to_diffusers(state)
    int8 = {name[: -len(CONVROT_GROUP)]: int(state.pop(name)) for name in list(state) if name.endswith(CONVROT_GROUP)}
    scales = {layer: state.pop(layer + WEIGHT_SCALE) for layer in int8}
    return _diffusers_model(WanTransformer3DModel, config_folder, state, dtype, source, "transformer",
                            _describe_transformer, lambda model: _int8_layers(model, state, int8, scales, dtype))


def _int8_layers(model: WanTransformer3DModel, state: dict[str, torch.Tensor], groups: dict[str, int],
                 scales: dict[str, torch.Tensor], dtype: torch.dtype) -> None:
    """Replace each (meta) Linear the file stores in int8 by an Int8ConvRotLinear of its tensors, taken out of
    `state` (the rest loads as usual)."""
    for layer, group in groups.items():
        bias = state.pop(f"{layer}.bias", None)
        set_submodule(model, layer, Int8ConvRotLinear(state.pop(f"{layer}.weight"), scales[layer],
                                                      None if bias is None else bias.to(dtype), group, dtype))


def load_vae_file(source: SingleFile, config_folder: Path, dtype: torch.dtype) -> AutoencoderKLWan:
    """A Wan 2.1 or 2.2 VAE in original Wan / ComfyUI or diffusers names."""
    state = wan_vae_to_diffusers(read_single_file(source, "vae", dtype))
    return _diffusers_model(AutoencoderKLWan, config_folder, state, dtype, source, "VAE", _describe_vae)


def load_text_encoder_file(source: SingleFile, config_folder: Path, dtype: torch.dtype) -> UMT5EncoderModel:
    """A UMT5 encoder (ComfyUI's names are transformers'); config from `config_folder` or the shapes."""
    state = read_single_file(source, "text_encoder", dtype)
    sizes = _sizes(source, umt5_sizes, state)
    config = folder_config(UMT5Config, config_folder) or umt5_config(sizes)
    _check_sizes(source, "text encoder", sizes, config, config_folder)
    return _transformers_model(UMT5EncoderModel, config, state, dtype, source)


def load_image_encoder_file(source: SingleFile, config_root: Path | None,
                            dtype: torch.dtype) -> tuple[CLIPVisionModel, CLIPImageProcessor]:
    """A CLIP vision tower and its processor. `config_root` is a folder that may hold image_encoder/ and
    image_processor/ (the base model's, or e2v.image_encoder_model_name's); what it lacks is derived."""
    state = read_single_file(source, "image_encoder", dtype)
    state.pop("visual_projection.weight", None)  # CLIPVisionModelWithProjection's head; Wan uses hidden states
    sizes = _sizes(source, clip_vision_sizes, state)
    config_folder = config_root / "image_encoder" if config_root is not None else None
    config = folder_config(CLIPVisionConfig, config_folder) if config_folder is not None else None
    if config is None:
        heads = clip_vision_heads(sizes["hidden_size"])
        if heads is None:
            raise source.error(f"is a CLIP of width {sizes['hidden_size']}, whose head count its weights do not tell",
                               "put its config.json in base_model_name's image_encoder/ folder")
        config = clip_vision_config(sizes, heads)
    _check_sizes(source, "image encoder", sizes, config, config_folder)
    encoder = _transformers_model(CLIPVisionModel, config, state, dtype, source)
    processor_folder = config_root / "image_processor" if config_root is not None else None
    return encoder, clip_image_processor(processor_folder, config.image_size)


def _diffusers_model(cls: type[DiffusersModel], config_folder: Path, state: dict[str, torch.Tensor],
                     dtype: torch.dtype, source: SingleFile, what: str, describe: Describe,
                     prepare: Callable[[DiffusersModel], None] | None = None) -> DiffusersModel:
    """`prepare(model)` may replace (meta) modules and take their tensors out of `state` once the shapes match."""
    with init_empty_weights():  # parameters on the meta device, buffers (rope tables) real
        model = cls.from_config(cls.load_config(config_folder))
    check_matches(source, what, shapes(state), shapes(model.state_dict()), describe)
    if prepare is not None:
        prepare(model)
    # diffusers' own loader, with the dtype rules of from_pretrained
    load_model_dict_into_meta(model, state, dtype=dtype,
                              keep_in_fp32_modules=list(cls._keep_in_fp32_modules or []))
    return model.eval()


def _transformers_model(cls: type[TransformersModel], config: PretrainedConfig, state: dict[str, torch.Tensor],
                        dtype: torch.dtype, source: SingleFile) -> TransformersModel:
    """transformers' from_pretrained on our state dict: its key mapping and dtype rules, as for the folder.
    Sizes were checked against the config before, so only keys can differ here."""
    model, info = cls.from_pretrained(None, config=config, state_dict=state, dtype=dtype, output_loading_info=True)
    problems = sorted(info["missing_keys"]) + sorted(info["unexpected_keys"])
    if problems:
        raise source.error(f"does not match its config ({len(problems)} keys differ, e.g. '{problems[0]}')",
                           "give the file of the base model's encoder")
    return model.eval()


def _sizes(source: SingleFile, read: Callable[[Shapes], dict[str, int]],
           state: dict[str, torch.Tensor]) -> dict[str, int]:
    """The encoder's sizes off its shapes; a file without a tensor they need is one line."""
    try:
        return read(shapes(state))
    except KeyError as e:
        raise source.error(f"lacks the tensor '{e.args[0]}'", "give the complete file") from None


def _check_sizes(source: SingleFile, what: str, sizes: dict[str, int], config: PretrainedConfig,
                 config_folder: Path | None) -> None:
    mismatch = size_mismatch(sizes, config)
    if mismatch:
        raise source.error(f"does not match the base model's {what} ({mismatch} of {config_folder})",
                           f"give the {what} of the same Wan model as base_model_name")


def _describe_transformer(found: Shapes) -> str:
    width, channels = found.get("patch_embedding.weight", (0, 0))[:2]
    blocks = len({name.split(".")[1] for name in found if name.startswith("blocks.")})
    return f"{blocks} blocks of width {width}, {channels} input channels"


def _describe_vae(found: Shapes) -> str:
    z_dim = found.get("post_quant_conv.weight", (0,))[0]
    version = "2.2" if any(".resnets." in name for name in found if name.startswith("encoder.down_blocks.")) else "2.1"
    return f"a Wan {version} VAE (z {z_dim})"
