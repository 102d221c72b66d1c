"""Which file(s) a LoRA is and whether their headers fit a model, read from the headers alone: a LoRA made for
another variant, a corrupt file or a file without LoRA keys is refused before any model loads. `check_lora_matches`
is the one place that decides whether a LoRA's metadata fits a model. Two-expert models: either expert's file is
accepted, its sibling found by name."""
from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Mapping

from modules.model.WanVariant import WanVariant
from modules.modelFile.lora_formats import VARIANT_KEY, expert_lora_paths
from modules.modelFile.lora_header import BASE_CONFIG_HASH_KEY, EXPERT_KEY, EXPERT_NAMES
from modules.modelFile.lora_reading import read_lora_header
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

_HIGH, _LOW = "_high_noise.safetensors", "_low_noise.safetensors"
_VARIANT_TAG = re.compile(r"^wan-\d+(?:\.\d+)*-(?P<name>.+)$")  # WanModelSaver.variant_tag: `wan-2.2-a14b-t2v`


@dataclasses.dataclass(frozen=True)
class LoRAFiles:
    """A LoRA checked against a model: its file per expert (0: high noise, or the only transformer) and
    each file's header metadata."""

    given: Path
    files: dict[int, Path]
    metadata: dict[int, dict[str, str]]


def expert_candidates(path: str | Path) -> tuple[Path, Path]:
    """(high-noise, low-noise) file names of a two-expert LoRA given either of them (or the base name)."""
    text = str(path)
    for suffix in (_HIGH, _LOW):
        if text.endswith(suffix):
            text = text[: -len(suffix)] + ".safetensors"
    high, low = expert_lora_paths(text)
    return Path(high), Path(low)


def expert_files(path: str | Path) -> tuple[Path | None, Path | None]:
    """(high-noise file, low-noise file) for a two-expert LoRA given either of them (or the base name)."""
    high, low = expert_candidates(path)
    return (high if high.is_file() else None), (low if low.is_file() else None)


def check_lora_matches(path: Path, metadata: Mapping[str, str], variant: WanVariant, force: bool = False,
                       force_option: str | None = None, expert: int | None = None) -> None:
    """Refuse a LoRA whose metadata says it was made for another model (`force`: warn and go on): another
    variant, another transformer architecture (a 1.3B LoRA on a 14B model), or — `expert` being the expert
    it is about to be applied to — the other expert of a two-expert model.

    `force_option` names the switch that forces it (e.g. "--force"), for the message; None when there is none.
    """
    tag = metadata.get(VARIANT_KEY, "")
    match = _VARIANT_TAG.match(tag)
    if match is None:  # ComfyUI, musubi and diffusers files carry no such key; ours without a variant say "wan"
        logger.info("LoRA '%s' does not say which Wan variant it was made for (%s): not checked against the %s model",
                    path, f"{VARIANT_KEY} is '{tag}'" if tag else f"no {VARIANT_KEY} in its header", variant.name)
        return
    problem = _mismatch(path, metadata, tag, match["name"].replace("-", "_"), variant, expert)
    if problem is None:
        return
    if force:
        logger.warning("%s; applying it anyway (%s)", problem, force_option or "forced")
        return
    hint = f", or pass {force_option} to apply it anyway" if force_option else ""
    raise UserError(f"{problem}: use a LoRA made for this model{hint}")


def _mismatch(path: Path, metadata: Mapping[str, str], tag: str, made_for: str, variant: WanVariant,
              expert: int | None) -> str | None:
    """Why the header says the file does not fit (None: it fits, as far as the header tells)."""
    if made_for != variant.name:
        return f"LoRA '{path}' was made for {tag}, not for this {variant.name} model"
    base_hash = metadata.get(BASE_CONFIG_HASH_KEY, "")
    if base_hash and variant.transformer_config_hash and base_hash != variant.transformer_config_hash:
        base = metadata.get("wantrainer.base_model", "") or "another checkpoint"
        return (f"LoRA '{path}' was made for a {variant.name} transformer of another size or architecture "
                f"(trained on '{base}')")
    written_for = metadata.get(EXPERT_KEY, "")
    if expert is not None and written_for and written_for != EXPERT_NAMES[expert]:
        return (f"LoRA '{path}' was trained for the {written_for.replace('_', '-')} expert, not the "
                f"{EXPERT_NAMES[expert].replace('_', '-')} one it would be applied to (check the file names)")
    return None


def _lora_files(path: Path, variant: WanVariant, force: bool) -> dict[int, Path]:
    """Expert index -> file; a missing single file is reported by `read_lora_header`."""
    if not variant.two_experts:
        return {0: path}
    found = {expert: file for expert, file in enumerate(expert_files(path)) if file is not None}
    if found:
        return found
    if path.is_file() and not force:  # a one-transformer LoRA given to a two-expert model: say so when its header knows
        check_lora_matches(path, read_lora_header(path), variant)
    high, low = expert_candidates(path)
    raise UserError(f"no expert LoRA found for '{path}': the two-expert {variant.name} model takes "
                    f"'{high.name}' and/or '{low.name}' (LoRAs trained on a two-expert model)")


def check_lora_file(path: str | Path, variant: WanVariant, force: bool = False,
                    force_option: str | None = None) -> LoRAFiles:
    """Find the LoRA's file(s) and check their headers against `variant`, without reading tensors."""
    path = Path(path)
    files = _lora_files(path, variant, force)
    metadata = {expert: read_lora_header(file) for expert, file in files.items()}
    for expert, file in files.items():
        check_lora_matches(file, metadata[expert], variant, force, force_option,
                           expert=expert if variant.two_experts else None)
    return LoRAFiles(path, files, metadata)
