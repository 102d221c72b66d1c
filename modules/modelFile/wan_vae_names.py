"""Wan VAE key names: Wan's original ones (ComfyUI's vae/wan_2.1_vae and wan2.2_vae files) -> diffusers'
`AutoencoderKLWan`.

diffusers' own `convert_wan_vae_to_diffusers` covers only the Wan 2.1 VAE with exactly two residual blocks per
stage (it lists the decoder's indices), and not the Wan 2.2 VAE (z 48) at all. This converter derives the
layout from the file, so it also reads other depths and the Wan 2.2 VAE; on the Wan 2.1 layout it gives
diffusers' names exactly (tests/test_single_file_models.py checks it against diffusers' converter).

Original layout (both VAEs): `encoder`/`decoder` each have `conv1`, `middle.{0,1,2}` (resnet, attention,
resnet) and `head.{0,2}` (norm, conv); the VAE has `conv1`/`conv2` (quant / post-quant convs). Resnets hold
`residual.{0,2,3,6}` (norm, conv, norm, conv) and an optional `shortcut` conv.
- Wan 2.1: `encoder.downsamples.N` is one flat list (resnets and resamples), as diffusers' `down_blocks.N`;
  `decoder.upsamples.N` is flat too: per stage R+1 resnets then one resample, diffusers'
  `up_blocks.S.resnets.J` / `up_blocks.S.upsamplers.0`.
- Wan 2.2: `encoder.downsamples.S.downsamples.J` (R resnets, then the resample) ->
  `down_blocks.S.resnets.J` / `down_blocks.S.downsampler`; the decoder likewise with R+1 resnets ->
  `up_blocks.S.resnets.J` / `up_blocks.S.upsampler`. (The parameter-free average shortcuts have no keys.)
"""
from __future__ import annotations

import dataclasses
import re

import torch

from modules.modelFile.single_file import count_indices

_RESNET_PARTS = {"residual.0": "norm1", "residual.2": "conv1", "residual.3": "norm2", "residual.6": "conv2",
                 "shortcut": "conv_shortcut"}
_MIDDLE = {"0": "mid_block.resnets.0", "1": "mid_block.attentions.0", "2": "mid_block.resnets.1"}
_ENDS = {"conv1": "conv_in", "head.0": "norm_out", "head.2": "conv_out"}
_VAE_CONVS = {"conv1": "quant_conv", "conv2": "post_quant_conv"}


@dataclasses.dataclass(frozen=True)
class _Layout:
    residual: bool  # Wan 2.2: stages nest their blocks
    encoder_resnets: int  # resnets per encoder stage (R)
    decoder_resnets: int  # resnets per decoder stage (R + 1)

    @classmethod
    def of(cls, names: set[str]) -> _Layout:
        residual = any(name.startswith("decoder.upsamples.0.upsamples.") for name in names)
        if residual:
            return cls(True, count_indices(names, "encoder.downsamples.0.downsamples.{}.residual.0.gamma"),
                       count_indices(names, "decoder.upsamples.0.upsamples.{}.residual.0.gamma"))
        return cls(False, count_indices(names, "encoder.downsamples.{}.residual.0.gamma"),
                   count_indices(names, "decoder.upsamples.{}.residual.0.gamma"))


def is_original_vae(names: list[str]) -> bool:
    return any(name.startswith("decoder.middle.") for name in names)


def wan_vae_to_diffusers(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Original Wan VAE names -> diffusers' (a file already in diffusers names is returned unchanged)."""
    if not is_original_vae(list(state)):
        return state
    layout = _Layout.of(set(state))
    return {_rename(name, layout): tensor for name, tensor in state.items()}


def _rename(name: str, layout: _Layout) -> str:
    module, leaf = name.rsplit(".", 1)
    part, _, inner = module.partition(".")
    if part == "encoder":
        return f"encoder.{_rename_encoder(inner, layout)}.{leaf}"
    if part == "decoder":
        return f"decoder.{_rename_decoder(inner, layout)}.{leaf}"
    return f"{_VAE_CONVS.get(module, module)}.{leaf}"


def _rename_common(inner: str) -> str | None:
    """Names encoder and decoder share: conv1, middle, head."""
    if inner in _ENDS:
        return _ENDS[inner]
    match = re.fullmatch(r"middle\.(\d)\.(.+)", inner)
    if match:
        return f"{_MIDDLE[match.group(1)]}.{_resnet_part(match.group(2))}"
    return None


def _rename_encoder(inner: str, layout: _Layout) -> str:
    common = _rename_common(inner)
    if common is not None:
        return common
    if layout.residual:
        match = re.fullmatch(r"downsamples\.(\d+)\.downsamples\.(\d+)\.(.+)", inner)
        if match is None:
            return inner  # unknown: the key check names it
        stage, block, rest = match.groups()
        if int(block) < layout.encoder_resnets:
            return f"down_blocks.{stage}.resnets.{block}.{_resnet_part(rest)}"
        return f"down_blocks.{stage}.downsampler.{rest}"
    match = re.fullmatch(r"downsamples\.(\d+)\.(.+)", inner)
    return f"down_blocks.{match.group(1)}.{_resnet_part(match.group(2))}" if match else inner


def _rename_decoder(inner: str, layout: _Layout) -> str:
    common = _rename_common(inner)
    if common is not None:
        return common
    pattern = r"upsamples\.(\d+)\.upsamples\.(\d+)\.(.+)" if layout.residual else r"upsamples\.(\d+)\.(.+)"
    match = re.fullmatch(pattern, inner)
    if match is None:
        return inner  # unknown: the key check names it
    if layout.residual:
        stage, block, rest = int(match.group(1)), int(match.group(2)), match.group(3)
        upsampler = "upsampler"
    else:  # one flat list; each stage is its resnets, then a resample
        (stage, block), rest = divmod(int(match.group(1)), layout.decoder_resnets + 1), match.group(2)
        upsampler = "upsamplers.0"
    if block < layout.decoder_resnets:
        return f"up_blocks.{stage}.resnets.{block}.{_resnet_part(rest)}"
    return f"up_blocks.{stage}.{upsampler}.{rest}"


def _resnet_part(rest: str) -> str:
    """`residual.2` -> `conv1` etc.; resample and attention parts keep their names."""
    for original, diffusers in _RESNET_PARTS.items():
        if rest == original or rest.startswith(original + "."):
            return diffusers + rest[len(original):]
    return rest
