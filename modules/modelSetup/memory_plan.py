"""`memory_preset: AUTO`: the cheapest memory features that make a run fit its GPU, chosen from the estimate
(memory_estimate.py) before any model loads.

Starting from the config as set, savers are added in order of what they cost in speed until the estimate fits:
  vae_tiling              caching only: the VAE encodes in tiles (when caching is the peak phase)
  text_encoder_caching_device CPU
                          caching only: UMT5 encodes the captions on the CPU (slow, once; the cache is reused)
  vae_dtype BFLOAT16      caching only: the VAE (float32 by default) encodes in bf16 (then vae_tiling is tried again)
  activation_offload      saved block inputs in host memory: host copies each step (a few % on PCIe 4)
  ffn_chunks + checkpoint_attention
                          a block's recompute in parts: about one more forward of each part (~20 % per step)
  fp8_base_weights        frozen block weights in float8: upcast per layer (small cost, small rounding); on a
                          card where int8 ConvRot was measured faster (INT8_FASTER, by compute capability)
                          base_weight_format INT8_CONVROT instead (the same bytes, int8 matmuls)
  offload_inactive_expert two experts trained: the idle one in host memory, a transfer at each switch
  blocks_to_swap N        the fewest blocks whose frozen weights stream from host memory (slower the more)
A key the user set away from its default is theirs: no saver touches it. Savers that do not apply to the run
(fp8 and swap to full fine-tunes, expert offload to one expert) are skipped. Without a GPU size (no `gpu_memory_gib`,
no CUDA device) nothing changes. The plan's host RAM (host_memory_estimate.py: swapped blocks, the idle expert,
offloaded activations, the encoders) must fit the machine's RAM, or AUTO refuses to start and says what to change.
"""
from __future__ import annotations

import dataclasses
import enum
import logging

from modules.config.train_config import TrainConfig
from modules.modelSetup.host_memory_estimate import HostEstimate, host_estimate
from modules.modelSetup.memory_estimate import HEADROOM_GIB, Estimate, detected_gpu_gib, estimate
from modules.util.enum import BaseWeightFormat, DataType, EncoderDevice, MemoryPreset, TrainingMethod
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

_DEFAULTS = TrainConfig()

# Whether an int8 ConvRot base trains faster than an fp8 one, by CUDA compute capability, and whose measurement says
# so (docs/base_weights.md). AUTO chooses int8 only where True; an unmeasured card keeps fp8.
INT8_FASTER: dict[tuple[int, int], tuple[bool, str]] = {
    # Ampere consumer (RTX 30xx, A-series workstation cards)
    (8, 6): (True, "others': musubi-tuner PR #1008, RTX 3090, fp8_scaled 7.1 -> int8 5.3 s/step"),
    # Hopper: int8 slower than bf16 itself
    (9, 0): (False, "others': musubi-tuner PR #1008, H100, bf16 4.10 vs int8 6.22 s/it"),
}


def int8_measured_faster(capability: tuple[int, int] | None) -> bool:
    return capability is not None and INT8_FASTER.get(tuple(capability), (False, ""))[0]


def int8_note(capability: tuple[int, int] | None) -> str:
    """What is known of int8 ConvRot's speed on a card of `capability` (estimate_vram.py prints it)."""
    if capability is None:
        return "no CUDA card known: AUTO keeps fp8 (give --compute-capability to plan for a card)"
    faster, source = INT8_FASTER.get(tuple(capability), (None, ""))
    name = f"sm_{capability[0]}{capability[1]}"
    if faster is None:
        return f"{name}: int8 ConvRot not measured on such a card: AUTO keeps fp8"
    return f"{name}: int8 ConvRot measured {'faster' if faster else 'slower'} ({source}): AUTO " + (
        "chooses it where fp8 would go" if faster else "keeps fp8")


def detected_capability() -> tuple[int, int] | None:
    """The first CUDA GPU's compute capability, or None without one (ROCm reports its own numbers: not in the
    table)."""
    import torch

    if not torch.cuda.is_available() or torch.version.hip:
        return None
    return tuple(torch.cuda.get_device_capability(0))


@dataclasses.dataclass
class MemoryPlan:
    config: TrainConfig
    changes: dict[str, object]  # key -> value AUTO set
    estimate: Estimate | None
    gpu_gib: float | None
    host: HostEstimate | None = None  # the planned run's host RAM (AUTO refuses a plan over the machine's RAM)

    @property
    def refusal(self) -> str | None:
        """Why AUTO will not start this plan, in one line (None: it may start)."""
        return None if self.host is None or self.estimate is None else self.host.refusal()

    def changes_json(self) -> dict[str, object]:
        """The changes with enums by name (what --json prints)."""
        return {key: value.name if isinstance(value, enum.Enum) else value for key, value in self.changes.items()}

    def short(self) -> str:
        """The changes in a few words (the GUI's line beside Start)."""
        return "AUTO: " + (", ".join(f"{k} {_text(v)}" for k, v in self.changes.items()) or "nothing needed")

    def summary(self) -> str:
        if self.estimate is None:
            return "memory_preset AUTO: no GPU size known (set gpu_memory_gib), memory keys as set"
        fits = "fits" if self.estimate.fits else "does NOT fit"
        what = ", ".join(f"{k}={_text(v)}" for k, v in self.changes.items()) or "nothing to add"
        return (f"memory_preset AUTO for {self.gpu_gib:.1f} GiB: {what}; estimate {self.estimate.peak_gib:.1f} GiB "
                f"({self.estimate.peak_phase}), {fits}" + (f"; {self.host.line()}" if self.host else ""))


def _text(value: object) -> str:
    return value.name if isinstance(value, enum.Enum) else str(value)


def _free(config: TrainConfig, *keys: str) -> bool:
    """Whether every key is still at its default (AUTO may set it)."""
    return all(getattr(config, key) == getattr(_DEFAULTS, key) for key in keys)


def _frozen_base(config: TrainConfig) -> bool:
    return config.training_method in (TrainingMethod.LORA, TrainingMethod.EMBEDDING)


def _base_saver(config: TrainConfig, capability: tuple[int, int] | None) -> dict:
    """The frozen base's saver: fp8, or int8 ConvRot on a card where it was measured faster (never with base_loras,
    which cannot merge into int8, or compile, not yet run with int8 on a GPU)."""
    if not _frozen_base(config) or not _free(config, "base_weight_format"):
        return {}
    if int8_measured_faster(capability) and _free(config, "fp8_base_weights") and not config.base_loras \
            and not config.compile:
        return {"base_weight_format": BaseWeightFormat.INT8_CONVROT}
    return {"fp8_base_weights": True}


def _savers(config: TrainConfig, both_experts: bool, capability: tuple[int, int] | None = None
            ) -> list[tuple[str, dict]]:
    """(the phase it shrinks, the changes), in order of cost; only where its keys are free and it means something for
    the run."""
    frozen = _frozen_base(config)
    savers = [("caching", {"vae_tiling": True}),
              ("caching", {"text_encoder_caching_device": EncoderDevice.CPU}),  # exact, slow once: the cache is reused
              ("caching", {"vae_dtype": DataType.BFLOAT16}),  # latents rounded to bf16 (they train in bf16 anyway)
              ("training", {"activation_offload": True} if config.gradient_checkpointing else {}),
              # keep_self_attention set by the user is kept: the FFN is split alone then (the two pull opposite ways)
              ("training", ({"ffn_chunks": 8} if config.keep_self_attention else
                            {"ffn_chunks": 8, "checkpoint_attention": True}) if config.gradient_checkpointing else {}),
              # a base_weight_format set away from BF16 (FP8_SCALED, INT8_CONVROT) is kept as set
              ("training", _base_saver(config, capability)),
              ("training", {"offload_inactive_expert": True} if frozen and both_experts else {})]
    return [(phase, changes) for phase, changes in savers if changes and _free(config, *changes)]


def _over(result: Estimate, phase: str) -> bool:
    """Whether `phase` alone does not fit (the estimate's headroom counted)."""
    return sum(result.phases[phase].values()) + HEADROOM_GIB > result.gpu_gib


def plan_memory(config: TrainConfig, gpu_gib: float | None = None, ram_gib: float | None = None,
                capability: tuple[int, int] | None = None) -> MemoryPlan:
    """The config AUTO runs with for a GPU of `gpu_gib` (default: `gpu_memory_gib`, else the detected GPU) of compute
    `capability` (default: the detected GPU's) on a machine of `ram_gib` (default: its RAM), with that run's host
    estimate."""
    if config.memory_preset != MemoryPreset.AUTO:
        return MemoryPlan(config, {}, None, None)
    gpu = gpu_gib if gpu_gib is not None else (config.gpu_memory_gib or detected_gpu_gib())
    if not gpu:
        return MemoryPlan(config, {}, None, None)
    current, result, changes = config, estimate(config, gpu), {}
    savers = _savers(config, result.both_experts, capability or detected_capability())
    # caching's savers once more: VAE tiling saves nothing while UMT5 is the phase's peak, and may once it left
    for phase, saver in savers + [(phase, saver) for phase, saver in savers if phase == "caching"]:
        if not _over(result, phase) or saver.keys() <= changes.keys():
            continue
        candidate = dataclasses.replace(current, **saver)
        candidate_result = estimate(candidate, gpu)
        if candidate_result.peak_gib < result.peak_gib or sum(candidate_result.phases[phase].values()) < sum(
                result.phases[phase].values()):  # a saver that saves nothing here is left off
            current, result = candidate, candidate_result
            changes.update(saver)
    if _over(result, "training") and _frozen_base(config) and _free(config, "blocks_to_swap") \
            and current.gradient_checkpointing:
        layers = result.layers
        for count in range(1, layers):
            candidate = dataclasses.replace(current, blocks_to_swap=count)
            candidate_result = estimate(candidate, gpu)
            if not _over(candidate_result, "training") or count == layers - 1:
                current, result = candidate, candidate_result
                changes["blocks_to_swap"] = count
                break
    return MemoryPlan(current, changes, result, gpu, host_estimate(current, ram_gib))


def planned_estimate(config: TrainConfig, gpu_gib: float | None, ram_gib: float | None = None,
                     capability: tuple[int, int] | None = None) -> tuple[Estimate, MemoryPlan]:
    """The estimate of the run as it will start (after AUTO's plan for `gpu_gib` of compute `capability`), and the
    plan (its host RAM estimate always there): what estimate_vram.py and the GUI show before Start."""
    plan = plan_memory(config, gpu_gib, ram_gib, capability)
    if plan.host is None:
        plan.host = host_estimate(plan.config, ram_gib)
    return (plan.estimate if plan.estimate is not None else estimate(plan.config, gpu_gib)), plan


def apply_memory_plan(config: TrainConfig) -> TrainConfig:
    """Start-up: `config` with AUTO's changes (planned at an E2V dataset's resolution and frames), the choice and
    its estimate logged."""
    from modules.config.e2v_dataset_config import with_dataset_shapes

    plan = plan_memory(with_dataset_shapes(config))
    if plan.estimate is None:
        return config
    if plan.refusal:
        raise UserError(f"memory_preset AUTO: {plan.refusal}")
    log = logger.info if plan.estimate.fits else logger.warning
    log("%s", plan.summary())
    return dataclasses.replace(config, **plan.changes)
