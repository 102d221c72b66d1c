"""Start-up's check of a Wan2.2-Animate-2 base, before any model loads: the keys it cannot use. Its data (each clip's
triplet, the copying trap) is the data verdict's (`dataLoader/verdict.py`); the data loader is
`dataLoader/WanAnimate2DataLoader.py`."""
from __future__ import annotations

from modules.config.train_config import TrainConfig
from modules.model.folder_facts import is_animate2_base
from modules.util.enum import CheckpointPolicy
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
    if config.checkpointing.policy == CheckpointPolicy.KEEP_ATTENTION:
        raise UserError("config key 'checkpointing.policy' KEEP_ATTENTION does not apply to a Wan2.2-Animate-2 base "
                        "(its attention runs flex's kernel, which the policy cannot keep): set it to FULL or AUTO")
