"""What a diffusers Wan folder holds, read from its model_index.json alone (no torch, no diffusers): `detect_variant`
reads its components with this, and the GUI asks it which fields a base can use before anything heavy loads."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def has_component(model_dir: Path, index: dict[str, Any], name: str) -> bool:
    """model_index.json names the component (not null) and its folder is there."""
    entry = index.get(name)
    return isinstance(entry, list) and bool(entry) and entry[0] is not None and (model_dir / name).is_dir()


def has_two_experts(model_dir: str | Path) -> bool | None:
    """Whether the folder holds two transformers (Wan 2.2 A14B: transformer_2); None when its model_index.json
    cannot be read (the path checks and the loader name a broken folder)."""
    folder = Path(model_dir)
    try:
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return has_component(folder, index, "transformer_2") if isinstance(index, dict) else None


ANIMATE2_CLASS = "WanAnimate2Transformer3DModel"


def transformer_config(model_dir: str | Path) -> dict[str, Any]:
    """The folder's transformer/config.json ({} when it cannot be read: the loader names a broken folder)."""
    try:
        config = json.loads((Path(model_dir) / "transformer" / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def is_animate2_base(model_dir: str | Path) -> bool:
    """The folder's transformer config names Wan2.2-Animate-2's class (an unreadable one is the loader's to name)."""
    return transformer_config(model_dir).get("_class_name") == ANIMATE2_CLASS
