"""LoRAs merged into the frozen base when it loads (`base_loras`; `--base-lora` of sample.py / evaluate.py): the
distilled speed LoRAs (Lightning, lightx2v, CausVid) users generate with, so a LoRA trains on the base they run.

Reading goes through the project's one LoRA reader (`from_state_dict`: ComfyUI ``diffusion_model.*``, musubi /
sd-scripts ``lora_unet_*``, diffusers / PEFT ``transformer.*``; LoRA, DoRA, LoHa, LoKr) in its lenient mode, and
each layer merges through its adapter type's ``merged_weight`` (ComfyUI's formula, see `modules.adapter`). Also
merged, as ComfyUI's comfy/lora.py `load_lora` does: ``<module>.diff`` (added to the weight) and ``.diff_b``
(added to the bias), which extracted distillation LoRAs carry for biases and norms. Keys none of this reads
(e.g. lightx2v's ``blocks.N.diff_m``, which ComfyUI does not load either) are one warning naming the file and
counting them.

Memory: in place, one weight at a time. Each changed weight is copied to float32, every LoRA of the stack is
applied to that copy in order (ComfyUI patches a float32 copy the same way) and it is written back into the
parameter: the base is never copied whole. The loader calls this before anything else touches the transformer
(fp8 storage, block swap and the trained adapter come later, in the model setup), so fp8 quantises the merged
weights. The records of what was merged (`WanModel.base_loras`) go into the trained LoRA's header
(``wantrainer.base_loras``), from which sample.py and evaluate.py apply the same stack by default.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from modules.config.limits import check_lora_strength
from modules.config.train_config import BaseLoRAConfig
from modules.model.WanModel import WanModel
from modules.model.WanVariant import WanVariant
from modules.modelFile.lora_checks import LoRAFiles, check_lora_matches
from modules.modelFile.lora_formats import (
    COMFY_PREFIX,
    DIFFUSERS_PREFIX,
    MUSUBI_PREFIX,
    LoRAFormatError,
    LoRAWeights,
    from_state_dict,
)
from modules.modelFile.lora_header import EXPERT_NAMES, read_stack
from modules.modelFile.lora_reading import first_line, read_lora_header, read_lora_tensors
from modules.modelFile.original_keys import original_key
from modules.util.enum import WanExpert
from modules.util.errors import UserError
from modules.util.file_hash import file_sha256
from modules.util.path_checks import check_input_file

logger = logging.getLogger(__name__)

_DIFF, _DIFF_B = ".diff", ".diff_b"  # comfy/lora.py: a full difference of a module's weight / bias
_EXPERT_INDEX = {WanExpert.HIGH: 0, WanExpert.LOW: 1}


# --------------------------------------------------------------------------------------------- entries


def parse_base_lora(text: str, option: str = "--base-lora") -> BaseLoRAConfig:
    """``FILE[:STRENGTH[:EXPERT]]`` (EXPERT: high, low or both) -> an entry; read from the right, so a Windows
    drive letter stays part of the path."""
    path, strength, expert = text, 1.0, WanExpert.BOTH
    head, sep, tail = text.rpartition(":")
    try:
        if sep and tail.upper() in WanExpert.__members__:
            expert = WanExpert[tail.upper()]
            path, _, number = head.rpartition(":")
            strength = float(number)
        elif sep:
            try:
                path, strength = head, float(tail)
            except ValueError:  # no strength: the colon is part of the path
                path = text
    except ValueError:
        strength = math.nan
    if not path or not math.isfinite(strength):
        raise UserError(f"{option} '{text}': give FILE, FILE:STRENGTH or FILE:STRENGTH:EXPERT (EXPERT high, low or "
                        "both), e.g. lightning.safetensors:1.0")
    check_lora_strength(f"{option} '{text}': the strength", strength)
    return BaseLoRAConfig(path=path, strength=strength, expert=expert)


def experts_of(entry: BaseLoRAConfig, variant: WanVariant) -> tuple[int, ...]:
    """The transformer indexes an entry is merged into."""
    if not variant.two_experts:
        return (0,)
    return (0, 1) if entry.expert == WanExpert.BOTH else (_EXPERT_INDEX[entry.expert],)


def check_base_loras(entries: Iterable[BaseLoRAConfig], variant: WanVariant,
                     label: Callable[[int], str] = lambda i: f"base_loras[{i}]") -> None:
    """Before any model loads: every file exists and holds LoRA keys (header and key names only), its expert fits
    the model, and a header of ours names this variant (and expert). `label(i)` names entry i in messages."""
    for index, entry in enumerate(entries):
        key = label(index)
        check_input_file(f"{key}.path" if not key.startswith("-") else key, entry.path, "a LoRA .safetensors file")
        if entry.expert != WanExpert.BOTH and not variant.two_experts:
            raise UserError.about(f"{key}.expert", f"{key}: expert is {entry.expert.name} but the {variant.name} model "
                                  "has one transformer: set it to BOTH")
        metadata = read_lora_header(entry.path)
        expert = _EXPERT_INDEX.get(entry.expert)
        check_lora_matches(Path(entry.path), metadata, variant, expert=expert)


# ----------------------------------------------------------------------------------------------- reading


@dataclasses.dataclass
class BaseLoRAFile:
    """One file as the merge needs it: adapter layers by diffusers module, ``diff``/``diff_b`` by file module name
    (resolved against the transformer later), and the keys nothing reads."""

    path: str
    weights: LoRAWeights
    diffs: dict[str, torch.Tensor]  # the file's "<prefix><module>.diff" / ".diff_b" keys
    skipped: list[str]


def read_base_lora(path: str) -> BaseLoRAFile:
    state, metadata = read_lora_tensors(path)
    diffs = {key: state.pop(key) for key in [k for k in state if k.endswith((_DIFF, _DIFF_B))]}
    skipped: list[str] = []
    weights = LoRAWeights()
    if state:
        try:
            weights = from_state_dict(state, metadata, skipped)
        except LoRAFormatError as e:
            if diffs:  # only diffs besides keys nothing reads
                skipped = list(state)
            else:
                raise UserError(f"base LoRA '{path}' is not a usable LoRA file: {e}") from e
    return BaseLoRAFile(path, weights, diffs, skipped)


def _diff_names(transformer: torch.nn.Module) -> dict[str, str]:
    """A ``diff``/``diff_b`` key's module part in each key space -> the transformer parameter it changes."""
    names: dict[str, str] = {}
    for name in transformer.state_dict():
        module, _, leaf = name.rpartition(".")
        table = leaf == "scale_shift_table"  # a parameter of its own (Wan: `modulation`): ComfyUI keys it whole
        if leaf not in ("weight", "bias") and not table:
            continue
        suffix = _DIFF_B if leaf == "bias" else _DIFF
        module = name if table else module
        try:
            wan = original_key(name) if table else original_key(name).rpartition(".")[0]
        except UserError:  # no original name: only diffusers keys reach it
            wan = None
        names[f"{DIFFUSERS_PREFIX}{module}{suffix}"] = name
        if wan:
            names[f"{COMFY_PREFIX}{wan}{suffix}"] = name
            names[f"{MUSUBI_PREFIX}{wan.replace('.', '_')}{suffix}"] = name
    return names


# ------------------------------------------------------------------------------------------------ merging

Patch = Callable[[torch.Tensor], torch.Tensor]  # float32 weight -> float32 weight (in place where it can)


def _patches(read: BaseLoRAFile, strength: float, transformer: torch.nn.Module,
             diff_names: Mapping[str, str]) -> tuple[dict[str, Patch], int]:
    """Parameter name -> the file's change to it; and how many keys of the file change nothing of this model."""
    params = dict(transformer.named_parameters())
    spec = read.weights.spec
    patches: dict[str, Patch] = {}
    unknown = len(read.skipped)
    for module, layer in read.weights.layers.items():
        name = f"{module}.weight"
        if name not in params:
            unknown += 3 if hasattr(layer, "down") else len(spec.encode(layer))  # LoRA: down, up, alpha
            continue
        shape = spec.weight_shape(layer)
        if shape != tuple(params[name].shape):
            raise UserError(f"base LoRA '{read.path}' does not fit this model: its {spec.title} layer '{module}' is "
                            f"{shape}, the model's weight {tuple(params[name].shape)}; use a LoRA made for this base")
        patches[name] = lambda w, layer=layer: spec.merged_weight(w, layer, strength)
    for key, diff in read.diffs.items():
        name = diff_names.get(key)
        if name is None:
            unknown += 1
            continue
        if tuple(diff.shape) != tuple(params[name].shape):
            raise UserError(f"base LoRA '{read.path}' does not fit this model: '{key}' is {tuple(diff.shape)}, the "
                            f"model's '{name}' {tuple(params[name].shape)}; use a LoRA made for this base")
        previous = patches.get(name)

        def add(w: torch.Tensor, diff=diff, previous=previous) -> torch.Tensor:
            w = previous(w) if previous is not None else w
            return w.add_(diff.float(), alpha=strength)

        patches[name] = add
    for name, tensor in read.weights.full_weights.items():
        if name not in params or tuple(params[name].shape) != tuple(tensor.shape):
            raise UserError(f"base LoRA '{read.path}' sets the full weight '{name}' {tuple(tensor.shape)}, which this "
                            "model does not have in that shape; use a LoRA made for this base")
        patches[name] = lambda w, tensor=tensor: tensor.float().clone()
    return patches, unknown


def checked_patches(transformer: torch.nn.Module, stack: list[tuple[BaseLoRAFile, float]],
                    warn: bool = True) -> dict[str, list[tuple[str, Patch]]]:
    """Parameter name -> the stack's patches of it, in order; a file that does not fit the model is a `UserError`
    and its keys nothing reads one warning (`warn`: not again where the file was checked when the model loaded)."""
    diff_names = _diff_names(transformer)
    by_param: dict[str, list[tuple[str, Patch]]] = defaultdict(list)
    for read, strength in stack:
        patches, unknown = _patches(read, strength, transformer, diff_names)
        if not patches:
            raise UserError(f"base LoRA '{read.path}' changes none of this model's weights ({unknown} keys unknown to "
                            "WanTrainer): use a LoRA made for this Wan model")
        if unknown and warn:
            example = f", e.g. '{read.skipped[0]}'" if read.skipped else ""
            logger.warning("base LoRA '%s': %d key(s) left out (unknown to WanTrainer's Wan transformer%s)",
                           read.path, unknown, example)
        for name, patch in patches.items():
            by_param[name].append((read.path, patch))
    return by_param


def merge_stack(transformer: torch.nn.Module, stack: list[tuple[BaseLoRAFile, float]], warn: bool = True) -> None:
    """Merge every file of `stack` (in order, with its strength) into `transformer`'s parameters in place: per
    changed weight one float32 copy, all patches applied to it, written back in the parameter's dtype."""
    by_param = checked_patches(transformer, stack, warn)
    params = dict(transformer.named_parameters())
    with torch.no_grad():
        for name, patches in by_param.items():
            param = params[name]
            weight = param.detach().to("cpu", torch.float32, copy=True)
            for path, patch in patches:
                weight = patch(weight)
                _check_finite(weight, path, name)
            stored = weight.to(param.device, param.dtype)
            _check_finite(stored, patches[-1][0], name, param.dtype)
            param.copy_(stored)
            del weight, stored


def _check_finite(weight: torch.Tensor, path: str, name: str, dtype: torch.dtype | None = None) -> None:
    """A NaN/inf file or a strength that overflows is named here, at load, not as a NaN loss steps later."""
    if not bool(torch.isfinite(weight).all()):
        where = f" in {str(dtype).removeprefix('torch.')}" if dtype is not None else ""
        raise UserError(f"base LoRA '{path}' makes the model's '{name}' NaN or inf{where}: the file holds NaN/inf "
                        "values or its strength is too large; use an intact file or a smaller strength")


def merge_base_loras(model: WanModel, entries: Iterable[BaseLoRAConfig]) -> list[dict[str, Any]]:
    """Merge the entries into the model's transformer(s) in place (in order; each file read once) and record them
    in `model.base_loras`; `sample_only` ones are only checked against the weights and kept for the samples."""
    entries = list(entries)
    if not entries:
        return []
    transformers = model.transformers()
    stacks: dict[int, list[tuple[BaseLoRAFile, float]]] = defaultdict(list)
    for entry in entries:
        read = read_base_lora(entry.path)
        experts = experts_of(entry, model.variant)
        if entry.sample_only:  # checked against the weights now, merged for the samples only (training_only_loras.py)
            for expert in experts:
                checked_patches(transformers[expert], [(read, entry.strength)])
                model.sample_only_loras.append((expert, read, entry.strength))
            continue
        if entry.training_only and read.weights.full_weights:
            raise UserError(f"base_loras: '{entry.path}' replaces whole weights, which cannot be taken out again for "
                            "samples and saves: it cannot be training_only")
        for expert in experts:
            stacks[expert].append((read, entry.strength))
            if entry.training_only:
                model.training_only_loras.append((expert, read, entry.strength))
        model.base_loras.append({"name": Path(entry.path).name, "path": str(entry.path),
                                 "sha256": file_sha256(entry.path), "strength": entry.strength,
                                 "expert": entry.expert.name, "experts": list(experts),
                                 "training_only": entry.training_only})
    for expert, stack in stacks.items():
        try:
            merge_stack(transformers[expert], stack)
        except LoRAFormatError as e:
            raise UserError(f"base LoRAs cannot be merged: {first_line(e)}") from e
        where = "" if len(transformers) == 1 else f" of the {EXPERT_NAMES[expert].replace('_', '-')} expert"
        logger.info("base LoRAs merged into the weights%s: %s", where,
                    ", ".join(f"{Path(read.path).name} ({strength:g})" for read, strength in stack))
    return model.base_loras


# ------------------------------------------------------------------------------------------------- headers


def _find(record: Mapping[str, Any], beside: Path) -> Path | None:
    """The recorded file at its recorded path, else by name beside the trained LoRA."""
    for candidate in (Path(str(record.get("path", ""))), beside / str(record["name"])):
        if str(candidate) not in ("", ".") and candidate.is_file():
            return candidate
    return None


def header_stack(lora: LoRAFiles, variant: WanVariant) -> list[BaseLoRAConfig]:
    """The base LoRAs a trained LoRA's header(s) record, as entries to merge before it, so a sample matches what the
    run sampled. A file that cannot be found, or whose sha256 differs, is a warning: the sample will differ."""
    entries: list[BaseLoRAConfig] = []
    seen: dict[tuple[str, float], BaseLoRAConfig] = {}
    for expert, metadata in lora.metadata.items():
        for record in read_stack(metadata):
            found = _find(record, lora.files[expert].parent)
            if found is None:
                logger.warning("LoRA '%s' was trained on the base merged with '%s' (strength %s), which is neither at "
                               "'%s' nor beside the LoRA: sampling without it (pass --base-lora FILE to give it)",
                               lora.files[expert], record["name"], record["strength"], record.get("path", ""))
                continue
            if record.get("sha256") and file_sha256(found) != record["sha256"]:
                logger.warning("base LoRA '%s' is not the file '%s' was trained with (another sha256): samples may "
                               "differ", found, lora.files[expert])
            key = (str(found), float(record["strength"]))
            expert_choice = WanExpert.BOTH if not variant.two_experts else \
                (WanExpert.HIGH if expert == 0 else WanExpert.LOW)
            if key in seen and seen[key].expert != expert_choice:  # the same file in both experts' headers
                seen[key].expert = WanExpert.BOTH
                continue
            seen[key] = BaseLoRAConfig(path=str(found), strength=float(record["strength"]), expert=expert_choice)
            entries.append(seen[key])
    for entry in entries:
        logger.info("base LoRA from the LoRA's header: %s (strength %g, %s)", entry.path, entry.strength,
                    entry.expert.name)
    return entries


def sampling_stack(given: Iterable[str], lora: LoRAFiles | None, variant: WanVariant,
                   use_header: bool = True) -> list[BaseLoRAConfig]:
    """The base LoRAs scripts/sample.py and evaluate.py merge: `--base-lora` values when given, else the stack the
    trained LoRA's header records (`use_header`); checked like the config's, before any model loads."""
    entries = [parse_base_lora(text) for text in given]
    if not entries and lora is not None and use_header:
        entries = header_stack(lora, variant)
    check_base_loras(entries, variant, label=lambda i: "--base-lora")
    return entries
