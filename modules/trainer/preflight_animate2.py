"""Start-up's check of a Wan2.2-Animate-2 base, before any model loads: the keys it cannot use and, per concept, its
triplets and the copying trap (`dataLoader/animate2_triplets.py`). The data loader is
`dataLoader/WanAnimate2DataLoader.py`."""
from __future__ import annotations

from modules.config.train_config import TrainConfig
from modules.dataLoader.concept_selection import concepts_of_type
from modules.model.folder_facts import is_animate2_base
from modules.util.enum import ConceptType
from modules.util.errors import UserError


def check_animate2(config: TrainConfig) -> None:
    if not is_animate2_base(config.base_model_name):
        return
    if config.dataset_config:
        raise UserError(f"config key 'dataset_config' is set, but base_model_name '{config.base_model_name}' is "
                        "Wan2.2-Animate-2, which trains on concepts of clips with '<name>_driving.mp4' and "
                        "'<name>_reference.png' beside them: clear dataset_config and list the clips in 'concepts'")
    if config.last_frame_condition:
        raise UserError("config key 'last_frame_condition' does not apply to a Wan2.2-Animate-2 base (its "
                        "condition channels hold the reference image): set it false")
    if config.keep_self_attention:
        raise UserError("config key 'keep_self_attention' does not apply to a Wan2.2-Animate-2 base (its blocks run "
                        "their own checkpoint and two-pass attention): set it false")
    from modules.dataLoader.animate2_triplets import check_triplets  # here: it decodes video (av, cv2)
    from modules.dataLoader.discovery import discover_concept

    for concept_type in (ConceptType.STANDARD, ConceptType.VALIDATION):
        for concept in concepts_of_type(config, concept_type):
            samples = discover_concept(concept.path, concept.include_subdirectories, warn_missing_captions=False)
            check_triplets(samples, f"concept '{concept.path}'")
