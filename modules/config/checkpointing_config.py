"""`checkpointing`: what each transformer block keeps for its backward pass (docs/memory.md, "Checkpointing"), and the
old keys it replaced (`gradient_checkpointing`, `checkpoint_attention`, `keep_self_attention`)."""
from __future__ import annotations

import dataclasses
from typing import Any

from modules.util.base_config import BaseConfig, ConfigError, option
from modules.util.enum import CheckpointPolicy

OLD_KEYS = ("gradient_checkpointing", "checkpoint_attention", "keep_self_attention")


@dataclasses.dataclass
class CheckpointingConfig(BaseConfig):
    """Gradient checkpointing trades a second forward pass of each block for its activations; on a card with memory
    to spare, keeping more of them is faster. Every policy gives the same loss and gradients bit for bit."""

    policy: CheckpointPolicy = option(CheckpointPolicy.AUTO, "What a checkpointed block keeps for its backward: AUTO (memory_preset AUTO's choice for the card: the fastest policy and kept_blocks that fit; FULL without a plan), SPLIT_ATTENTION (only its input; each attention recomputed on its own: the least memory, about one more forward of each attention), FULL (only its input; the block recomputed in its backward), KEEP_ATTENTION (its self-attention output and log-sum-exp too, so the recompute skips that kernel: torch's SDPA kernels, NATIVE and CUDNN; tokens x width x 2 bytes a block), KEEP_ALL_BUT_FFN (no recompute: everything but the feed-forward's hidden layer, which runs again in token slices in its backward) or NONE (no checkpointing: every block keeps everything).")
    kept_blocks: int = option(0, "With policy FULL or KEEP_ATTENTION: the first N blocks are not checkpointed but keep everything but the feed-forward's hidden layer (as KEEP_ALL_BUT_FFN), the rest follow the policy (with blocks_to_swap, kept blocks cannot be swapped ones). AUTO chooses it with the policy.")

    def validate(self, path: str) -> None:
        if self.kept_blocks < 0:
            raise ConfigError(f"config key '{path}.kept_blocks' must be 0 or more blocks, got {self.kept_blocks}")
        if self.kept_blocks and self.policy not in (CheckpointPolicy.FULL, CheckpointPolicy.KEEP_ATTENTION):
            raise ConfigError(f"config key '{path}.kept_blocks' applies to policy FULL or KEEP_ATTENTION (the blocks "
                              f"that are checkpointed beside the kept ones), not {self.policy.name}: set the policy or "
                              "kept_blocks 0")

    def resolved(self) -> CheckpointPolicy:
        """The policy a run applies: AUTO that no plan resolved (memory_preset MANUAL, no GPU size) is FULL."""
        return CheckpointPolicy.FULL if self.policy == CheckpointPolicy.AUTO else self.policy

    def checkpoints(self) -> bool:
        """Whether any block is checkpointed (its input kept and the block or part of it recomputed)."""
        return self.resolved() not in (CheckpointPolicy.NONE, CheckpointPolicy.KEEP_ALL_BUT_FFN)

    def recomputes(self) -> bool:
        """Whether blocks recompute or slice anything (every policy but NONE: the lean block's feed-forward runs its
        backward in slices under all of them)."""
        return self.resolved() != CheckpointPolicy.NONE


def upgrade_old_keys(data: dict[str, Any], path: str = "") -> dict[str, Any]:
    """`data` with the old checkpointing keys folded into the `checkpointing` group: `gradient_checkpointing` false is
    policy NONE, `checkpoint_attention` SPLIT_ATTENTION, `keep_self_attention` KEEP_ATTENTION, and a plain true (the
    old default, which memory_preset AUTO could add to) AUTO. Refuses a file that sets both spellings or
    contradictory old keys, naming the key."""
    old = {key: data[key] for key in OLD_KEYS if key in data}
    if not old:
        return data
    prefix = f"{path}." if path else ""
    if "checkpointing" in data:
        key = next(iter(old))
        raise ConfigError(f"config key '{prefix}{key}' is an old spelling of '{prefix}checkpointing': keep only the "
                          "checkpointing group")
    for key, value in old.items():
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{prefix}{key}' must be true or false, got {value!r}")
    checkpointing, split, keep = (old.get("gradient_checkpointing", True), old.get("checkpoint_attention", False),
                                  old.get("keep_self_attention", False))
    if keep and split:
        raise ConfigError(f"config key '{prefix}keep_self_attention' and checkpoint_attention pull opposite ways "
                          "(keep the attention output / recompute the attention separately): set one of them false")
    if not checkpointing and (keep or split):
        key = "keep_self_attention" if keep else "checkpoint_attention"
        raise ConfigError(f"config key '{prefix}{key}' needs gradient_checkpointing: set gradient_checkpointing true "
                          f"or {key} false")
    policy = (CheckpointPolicy.NONE if not checkpointing else CheckpointPolicy.KEEP_ATTENTION if keep
              else CheckpointPolicy.SPLIT_ATTENTION if split else CheckpointPolicy.AUTO)
    data = {key: value for key, value in data.items() if key not in OLD_KEYS}
    data["checkpointing"] = {"policy": policy.value}
    return data
