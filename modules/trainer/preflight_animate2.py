"""Start-up's check of a Wan2.2-Animate-2 base, before any model loads (no torch): its concepts' triplets and the
copying trap (`dataLoader/animate2_triplets.py`), then a one-line refusal: the two-pass step is in
(`model/animate2.py`, `BaseWanSetup.predict_at`), but no data loader feeds it the driving stream yet."""
from __future__ import annotations

import json
from pathlib import Path

from modules.dataLoader.concept_selection import concepts_of_type
from modules.util.config.train_config import TrainConfig
from modules.util.enum import ConceptType
from modules.util.errors import UserError

ANIMATE2_CLASS = "WanAnimate2Transformer3DModel"


def is_animate2_base(model_dir: str) -> bool:
    """The folder's transformer config names Animate-2's class (an unreadable one is the loader's to name)."""
    try:
        config = json.loads((Path(model_dir) / "transformer" / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("_class_name") == ANIMATE2_CLASS


def check_animate2(config: TrainConfig) -> None:
    if not is_animate2_base(config.base_model_name):
        return
    from modules.dataLoader.animate2_triplets import check_triplets  # here: it decodes video (av, cv2)
    from modules.dataLoader.discovery import discover_concept

    for index, concept in enumerate(concepts_of_type(config, ConceptType.STANDARD)):
        samples = discover_concept(concept.path, concept.include_subdirectories, warn_missing_captions=False)
        check_triplets(samples, f"concepts[{index}] '{concept.path}'")
    raise UserError(f"base_model_name '{config.base_model_name}' is Wan2.2-Animate-2 ({ANIMATE2_CLASS}): its folder "
                    "loads and its data checks out, but WanTrainer cannot train it yet (the two-pass step is in, but "
                    "no data loader feeds it the driving stream yet, nor do the trainer's samples): use another Wan "
                    "base")
