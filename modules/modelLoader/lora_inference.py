"""Attach a LoRA file to a loaded model for sampling, through diffusers' own `load_lora_weights`.

Going through diffusers (not our reader) means `scripts/sample.py` proves the file works for users of
plain diffusers too. Adapter types diffusers cannot load for Wan (LoHa, LoKr, DoRA) are merged into the
weights by our reader as ComfyUI computes them (`merge_into_transformer`). Two-expert models: either
expert's file is accepted, its sibling found by name.

`check_lora_file` reads only the files' headers, so a LoRA made for another variant, a corrupt file or
a file without LoRA keys is refused before the model loads; `check_lora_matches` is the one place that
decides whether a LoRA's metadata fits a model.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from pathlib import Path
from typing import Iterator, Mapping

from modules.model.WanModel import WanModel
from modules.model.WanVariant import WanVariant
from modules.modelLoader.WanLoRALoader import first_line, load_lora_file, read_lora_adapter, read_lora_header
from modules.modelSaver.lora_formats import LoRAFormatError, expert_lora_paths, for_animate2
from modules.modelSaver.merge import merge_into_transformer
from modules.modelSaver.WanLoRASaver import (
    BASE_CONFIG_HASH_KEY,
    EXPERT_KEY,
    EXPERT_NAMES,
    TRANSFORMER_CONFIG_KEY,
    VARIANT_KEY,
)
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

_HIGH, _LOW = "_high_noise.safetensors", "_low_noise.safetensors"
_EXPERTS = ("high", "low")  # expert index -> adapter name / words in messages
_VARIANT_TAG = re.compile(r"^wan-\d+(?:\.\d+)*-(?P<name>.+)$")  # WanModelSaver.variant_tag: `wan-2.2-a14b-t2v`


@dataclasses.dataclass(frozen=True)
class LoRAFiles:
    """A LoRA checked against a model: its file per expert (0: high noise, or the only transformer) and
    each file's header metadata."""

    given: Path
    files: dict[int, Path]
    metadata: dict[int, dict[str, str]]


def _expert_candidates(path: str | Path) -> tuple[Path, Path]:
    text = str(path)
    for suffix in (_HIGH, _LOW):
        if text.endswith(suffix):
            text = text[: -len(suffix)] + ".safetensors"
    high, low = expert_lora_paths(text)
    return Path(high), Path(low)


def expert_files(path: str | Path) -> tuple[Path | None, Path | None]:
    """(high-noise file, low-noise file) for a two-expert LoRA given either of them (or the base name)."""
    high, low = _expert_candidates(path)
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
    high, low = _expert_candidates(path)
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


def _warn_missing_expert(lora: LoRAFiles, model: WanModel) -> None:
    if model.transformer_2 is None or len(lora.files) == 2:
        return
    missing = next(e for e in range(2) if e not in lora.files)
    logger.warning("the %s-noise expert runs without the LoRA: '%s' is missing next to '%s'",
                   _EXPERTS[missing], _expert_candidates(lora.given)[missing], lora.files[1 - missing])


def _reason(error: BaseException) -> str:
    """One line of why a load failed: torch's state-dict report starts with a header line, the useful one follows."""
    lines = [line.strip() for line in str(error).splitlines()]
    return next((line for line in lines if line.startswith("size mismatch for")), first_line(error))


@contextlib.contextmanager
def _quiet_diffusers_load_errors() -> Iterator[None]:
    """diffusers logs (to stderr) the exception it then raises; `_applying` makes that one line instead."""
    peft_logger = logging.getLogger("diffusers.loaders.peft")
    level = peft_logger.level
    peft_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        peft_logger.setLevel(level)


@contextlib.contextmanager
def _applying(file: Path, variant: WanVariant) -> Iterator[None]:
    """Turn a file that does not fit the model (other shapes, unknown modules, bad keys) into one line."""
    try:
        with _quiet_diffusers_load_errors():
            yield
    except RuntimeError as e:
        if "size mismatch" not in str(e):
            raise
        raise UserError(f"LoRA '{file}' does not fit this {variant.name} model ({_reason(e)}): it was made for "
                        "another model size; use a LoRA trained on this base model") from e
    except (ValueError, KeyError, IndexError, LoRAFormatError) as e:  # diffusers/peft/our reader on foreign keys
        raise UserError(f"LoRA '{file}' cannot be applied to this {variant.name} model ({_reason(e)}): "
                        "use a LoRA trained on this base model") from e


def attach_lora_for_inference(model: WanModel, lora: str | Path | LoRAFiles, scale: float = 1.0,
                              force: bool = False) -> None:
    """`lora`: a path, or what `check_lora_file` returned for it (checked before the model loaded)."""
    checked = lora if isinstance(lora, LoRAFiles) else check_lora_file(lora, model.variant, force)
    _warn_missing_expert(checked, model)
    if any(TRANSFORMER_CONFIG_KEY in metadata for metadata in checked.metadata.values()):
        attach_expanded_lora(model, checked, scale)
        return
    # diffusers' converter knows no VACE block keys of a ComfyUI-named file, and its Wan LoRA loader no Animate-2
    # transformer: our codec reads every format
    if model.variant.vace_layers or model.variant.name == "animate_2" or not all(
            read_lora_adapter(file).diffusers_loadable for file in checked.files.values()):
        merge_lora_files(model, checked, scale)
        return
    pipe = model.pipeline()
    if model.transformer_2 is None:
        with _applying(checked.files[0], model.variant):
            pipe.load_lora_weights(str(checked.files[0]), adapter_name="lora")
        pipe.set_adapters(["lora"], [scale])
        return
    for expert, file in checked.files.items():
        with _applying(file, model.variant):
            pipe.load_lora_weights(str(file), adapter_name=_EXPERTS[expert], load_into_transformer_2=expert == 1)
        logger.info("%s-noise expert LoRA: %s", _EXPERTS[expert], file)
    for expert in checked.files:
        model.transformers()[expert].set_adapters([_EXPERTS[expert]], [scale])


def merge_lora_files(model: WanModel, lora: LoRAFiles, scale: float = 1.0) -> None:
    """Merge each expert's file into its transformer's weights (`scale`: ComfyUI's strength)."""
    for expert, file in lora.files.items():
        with _applying(file, model.variant):
            weights, _ = load_lora_file(file)
            if model.variant.name == "animate_2":  # ComfyUI's names are Wan's, header or not
                weights = for_animate2(weights)
            merge_into_transformer(model.transformers()[expert], weights, scale)
        where = "transformer" if model.transformer_2 is None else f"{_EXPERTS[expert]}-noise expert"
        logger.info("%s merged into the %s: %s", weights.spec.title, where, file)


def attach_expanded_lora(model: WanModel, lora: LoRAFiles, scale: float = 1.0) -> None:
    """A LoRA trained on an E2V-expanded base (T2V + E2V): expand the transformer(s) the same way, then merge
    the adapter (any type, through its spec) and set the fully trained new weights (diffusers knows no such file)."""
    import json

    from modules.modelSetup.e2v_expansion import expand_model_for_e2v

    weights = {expert: load_lora_file(file) for expert, file in lora.files.items()}
    config = json.loads(next(iter(weights.values()))[1][TRANSFORMER_CONFIG_KEY])
    expand_model_for_e2v(model, config.get("image_dim") is not None, config.get("image_dim"), seed=0)
    for expert, (layers, _) in weights.items():
        with _applying(lora.files[expert], model.variant):
            merge_into_transformer(model.transformers()[expert], layers, scale)
    logger.info("E2V-expanded %s loaded from %s", next(iter(weights.values()))[0].spec.title, lora.given)
