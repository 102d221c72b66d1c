"""Fields only some bases use: the expert keys (two-expert Wan 2.2 A14B) and the VACE keys. Whether the chosen base
is such a one is read from its folder's JSON with the torch-free code the start-up checks use (no weights, no
diffusers), so the form can hide what does not apply while the user types the folder."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from modules.model.folder_facts import has_two_experts
from modules.model.vace_e2v import is_vace_folder
from modules.trainer.preflight import TWO_EXPERT_KEYS

VACE_KEYS = ("vace_train_blocks", "vace_context_scale")


@dataclasses.dataclass(frozen=True)
class BaseFacts:
    two_experts: bool | None = None  # None: not known (no readable folder): every field is shown
    vace: bool | None = None
    t2v_layout: bool | None = None  # the transformer takes no condition channels (E2V a2 expands it, export_i2v)
    image_encoder: bool | None = None  # the folder ships a CLIP image encoder


def read_base_facts(folder: str, variant: Any = None) -> BaseFacts:
    """What the base is; `variant` (its detected WanVariant, when the GUI has read one) adds the layout facts."""
    folder = folder.strip()
    if not folder or not (Path(folder) / "model_index.json").is_file():
        return BaseFacts()
    if variant is None:
        return BaseFacts(has_two_experts(folder), is_vace_folder(folder))
    return BaseFacts(has_two_experts(folder), is_vace_folder(folder), t2v_layout=not variant.channel_concat_condition
                     and not variant.expand_timesteps, image_encoder=variant.has_image_encoder)


def base_stamp(folder: str) -> tuple[Any, ...]:
    """What the facts depend on: the folder and its configs' modification times (a cache key)."""
    folder = folder.strip()
    files = (Path(folder) / "model_index.json", Path(folder) / "transformer" / "config.json")
    return (folder, *(f.stat().st_mtime_ns if folder and f.is_file() else None for f in files))


def not_for_base(key: str, facts: BaseFacts) -> str:
    """Why `key` does not apply to the base ("" when it does, or when the base is not known)."""
    if key in TWO_EXPERT_KEYS and facts.two_experts is False:
        return "applies to two-expert bases (Wan 2.2 A14B); this base has one transformer"
    if key in VACE_KEYS and facts.vace is False:
        return "applies to VACE bases; this base is not one"
    if key == "e2v.export_i2v" and facts.t2v_layout is False:
        return "applies to E2V on a T2V base (written as an I2V model); this base is not a T2V one"
    if key == "e2v.image_encoder_model_name" and facts.image_encoder:
        return "applies to bases without an image encoder; this base has one"
    return ""
