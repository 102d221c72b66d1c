"""What a run stopped by NaN/inf losses says: the real cause where the model shows one (a base weight that is
NaN/inf itself, which no learning rate fixes), else what to change."""
from __future__ import annotations

import itertools

import torch

from modules.config.train_config import TrainConfig
from modules.model.WanModel import WanModel


def nonfinite_advice(model: WanModel, config: TrainConfig, sharded: bool) -> str:
    """The second half of the NaN stop's line: what to do."""
    if not sharded:  # FSDP shards: each rank holds a part; the per-rank view would mislead
        for transformer in model.transformers():
            for name, tensor in itertools.chain(transformer.named_parameters(), transformer.named_buffers()):
                if tensor.requires_grad or not tensor.is_floating_point() or tensor.device.type == "meta":
                    continue
                if not bool(torch.isfinite(tensor).all()):
                    return (f"the base model's '{name}' holds NaN/inf values, so every step is NaN whatever the "
                            "learning rate: the base (or its override or base_loras file) is damaged; replace it")
    resume = "then resume with continue_last_backup=true and resume_changed_config=true"
    guidance = config.guidance_preserving
    if guidance.enabled and guidance.scale > 1:
        return (f"lower learning_rate, or guidance_preserving.scale ({guidance.scale:g}: it multiplies the guided part "
                f"of the target; give the CFG the base was distilled at), or use FLOAT32 dtypes, {resume}")
    return f"lower learning_rate or use FLOAT32 dtypes, {resume}"
