"""memory_preset AUTO's last stage: memory the chosen plan leaves on the card is spent on speed.

Once the memory plan (memory_plan.py) fits the card, with `checkpointing.policy` AUTO the policy and the number of kept
blocks are chosen that fit 90 % of the same card (the estimate's headroom counted, and 10 % left to the allocator's
slack: `ALLOCATOR_SLACK`) and the host RAM and minimise the modelled
step time (step_time.py: the recompute each policy avoids, the host copies of swapped blocks and offloaded
activations); the savers and swapped blocks of the plan stay. Candidates: FULL and KEEP_ATTENTION, each with 0 to all
of the blocks that are not swapped kept (none under activation offload), and KEEP_ALL_BUT_FFN without either. SPLIT_ATTENTION stays where
the plan needed it and nothing faster fits. The choice and why are in `MemoryPlan.why`, which the start-up log and
estimate_vram.py print.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from modules.config.checkpointing_config import CheckpointingConfig
from modules.config.train_config import TrainConfig
from modules.modelSetup import memory_estimate as vram
from modules.modelSetup.checkpoint_policy import kept_block_count
from modules.modelSetup.host_memory_estimate import host_estimate
from modules.modelSetup.step_time import BlockFlops, StepTime, block_flops, step_time
from modules.util.enum import CheckpointPolicy, TrainingMethod

IMAGE_TOKENS = 257  # CLIP's tokens beside the text on an I2V model (its added keys and values)
# Memory spent on speed leaves this share of the card to the caching allocator's slack beside the estimate's headroom:
# speed is not worth an out-of-memory step. Measured on the H200's 1.3B step: reserved over allocated +16 % eager,
# +8 % compiled (docs/performance.md).
ALLOCATOR_SLACK = 0.10


def _model(config: TrainConfig) -> tuple[BlockFlops, int, float, int, int] | None:
    """(one block's FLOPs, layers, one block's frozen weight bytes as stored, tokens, width) of `config`'s model."""
    folder = Path(config.base_model_name)
    transformer = vram._config(folder, "transformer")
    if not transformer:
        return None
    tokens = vram.largest_tokens(transformer, vram._config(folder, "vae") or {}, config)[0]
    tokens = -(-tokens // config.sequence_parallel)
    dim, ffn = vram.transformer_width(transformer)
    counts = vram.transformer_counts(transformer)
    image = IMAGE_TOKENS if transformer.get("image_dim") or transformer.get("added_kv_proj_dim") else 0
    weight = vram._bytes(config.transformer_dtype)
    linear = 1 if config.fp8_base() or config.int8_base() else weight
    per_block = (counts["block_linear"] * linear / counts["layers"]
                 + (counts["block"] - counts["block_linear"] / counts["layers"]) * weight)
    return block_flops(tokens, dim, ffn, image), counts["layers"], per_block, tokens, dim


def modelled_time(config: TrainConfig) -> StepTime | None:
    """The modelled step time of `config` as set (None where its model folder has no transformer config)."""
    model = _model(config)
    if model is None:
        return None
    flops, layers, block_bytes, tokens, dim = model
    policy = config.checkpointing.resolved()
    kept = kept_block_count(config, layers)
    frozen = config.training_method in (TrainingMethod.LORA, TrainingMethod.EMBEDDING)
    transfer = 2 * config.blocks_to_swap * block_bytes if frozen else 0.0
    if config.activation_offload and policy != CheckpointPolicy.NONE:
        batch, scale = config.batch_size, 1.0 if vram._bytes(config.train_dtype) == 2 else 2.0
        transfer += 2 * batch * ((layers - kept) * tokens * dim * 2 * scale
                                 + kept * vram.kept_block_bytes(tokens, dim, scale))
    return step_time(flops, layers, policy, kept, transfer, config.batch_size)


def _candidates(config: TrainConfig, layers: int) -> list[CheckpointingConfig]:
    # kept blocks: not swapped ones; and none under activation offload, which would copy everything they save to the
    # host and back (the copy back waits in the backward)
    can_keep = 0 if config.activation_offload else layers - config.blocks_to_swap
    out = [CheckpointingConfig(policy, kept) for policy in (CheckpointPolicy.FULL, CheckpointPolicy.KEEP_ATTENTION)
           for kept in range(min(can_keep, layers - 1) + 1)]  # every block kept: KEEP_ALL_BUT_FFN
    if not config.blocks_to_swap and not config.activation_offload:
        out.append(CheckpointingConfig(CheckpointPolicy.KEEP_ALL_BUT_FFN))
    return out


def _fits(estimate: vram.Estimate) -> bool:
    return sum(estimate.phases["training"].values()) + vram.HEADROOM_GIB <= estimate.gpu_gib * (1 - ALLOCATOR_SLACK)


def spend_spare_memory(plan, ram_gib: float | None) -> None:
    """Set the fastest checkpointing that fits on `plan` (a MemoryPlan that fits its GPU; policy AUTO), and why."""
    base = plan.config
    model = _model(base)
    if model is None or plan.gpu_gib is None:
        return
    layers = model[1]
    current = modelled_time(base)
    best = None  # (seconds, GiB, checkpointing, config, estimate, host, time)
    for checkpointing in _candidates(base, layers):
        candidate = dataclasses.replace(base, checkpointing=checkpointing)
        if candidate.checkpointing == base.checkpointing:
            continue
        time = modelled_time(candidate)
        if best is not None and time.seconds > best[0]:
            continue  # slower than one that fits: no estimate needed
        result = vram.estimate(candidate, plan.gpu_gib)
        if not _fits(result):
            continue
        host = host_estimate(candidate, ram_gib)
        if host.fits is False:
            continue
        key = (time.seconds, result.peak_gib)
        if best is None or key < best[:2]:
            best = (*key, checkpointing, candidate, result, host, time)
    if best is None or best[0] >= current.seconds:
        plan.why = (f"checkpointing {base.checkpointing.resolved().name}: nothing that keeps more fits "
                    f"(modelled {current.seconds:.2f} s/step)")
        return
    _, _, checkpointing, candidate, result, host, time = best
    plan.config, plan.estimate, plan.host = candidate, result, host
    plan.changes["checkpointing"] = checkpointing
    kept = f" with {checkpointing.kept_blocks} of {layers} blocks kept" if checkpointing.kept_blocks else ""
    plan.why = (f"checkpointing {checkpointing.policy.name}{kept}: the fastest that fits, modelled {time.seconds:.2f} "
                f"s/step against {current.seconds:.2f} with {base.checkpointing.resolved().name} (recompute "
                f"{time.recompute_flops / 1e12:.0f} instead of {current.recompute_flops / 1e12:.0f} TFLOP, host copies "
                f"{time.transfer_s:.2f} s), {result.peak_gib:.1f} of {plan.gpu_gib:.1f} GiB (at most "
                f"{1 - ALLOCATOR_SLACK:.0%} of it: the rest is the allocator's slack)")
