"""`memory_preset: AUTO`: the cheapest memory features that make a run fit its GPU, chosen from the estimate
(memory_estimate.py) before any model loads.

Starting from the config as set, the caching phase's savers are added in order until that phase fits; then, of every
combination of the training savers (each with the fewest swapped blocks the GPU needs), the cheapest plan whose
training phase fits the GPU and whose host RAM (host_memory_estimate.py) fits the machine: fewer swapped blocks first,
then the cheaper savers (each costs more than every one above it together). The savers, in order of their speed
cost:
  vae_tiling              caching only: the VAE encodes in tiles (when caching is the peak phase)
  text_encoder_caching_device CPU
                          caching only: UMT5 encodes the captions on the CPU (slow, once; the cache is reused)
  vae_dtype BFLOAT16      caching only: the VAE (float32 by default) encodes in bf16 (then vae_tiling is tried again)
  activation_offload      saved block inputs in host memory: host copies each step (a few % on PCIe 4)
  checkpointing SPLIT_ATTENTION
                          each attention of a block recomputed on its own in the backward: about one more forward of
                          each attention (the feed-forward runs its backward in token slices anyway, at no cost,
                          under gradient checkpointing: lean_ffn.py)
  base_weight_format FP8  frozen block weights in float8: upcast per layer (small cost, small rounding); on a
                          card where int8 ConvRot was measured faster (INT8_FASTER, by compute capability)
                          INT8_CONVROT instead (the same bytes, int8 matmuls)
  offload_inactive_expert two experts trained: the idle one in host memory, a transfer at each switch
  blocks_to_swap N        the fewest blocks whose frozen weights stream from host memory (slower the more)
A key the user set away from its default is theirs: no saver touches it. Savers that do not apply to the run
(fp8 and swap to full fine-tunes, expert offload to one expert) are skipped. Without a GPU size (no `gpu_memory_gib`,
no CUDA device) nothing changes. Host RAM is what activation offload, idle-expert offload and swapped blocks spend
(with the encoders and the process): AUTO trades them against chunking and fp8 to fit both. Where no plan fits the GPU,
the lightest on the GPU that the host holds starts with a warning; where no plan fits the host RAM, AUTO refuses to
start and names the plan that needs the least RAM, its largest term and the RAM that would run it. Last, with
`checkpointing.policy` AUTO, the memory the plan leaves is spent on speed (spare_memory.py).
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import math

from modules.config.checkpointing_config import CheckpointingConfig
from modules.config.train_config import TrainConfig
from modules.modelSetup.host_memory_estimate import HostEstimate, host_estimate
from modules.modelSetup.memory_estimate import HEADROOM_GIB, Estimate, detected_gpu_gib, estimate
from modules.modelSetup.spare_memory import spend_spare_memory
from modules.util.enum import BaseWeightFormat, CheckpointPolicy, CompileMode, DataType, EncoderDevice, MemoryPreset, TrainingMethod
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

_DEFAULTS = TrainConfig()
SPLIT = CheckpointingConfig(CheckpointPolicy.SPLIT_ATTENTION)  # AUTO's memory saver among the policies

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
    no_plan: str | None = None  # why no plan fits the host RAM, naming what would (set by plan_memory)
    why: str = ""  # why AUTO chose the checkpointing policy it did (spare_memory.py)

    @property
    def refusal(self) -> str | None:
        """Why AUTO will not start this plan, in one line (None: it may start)."""
        if self.no_plan is not None:
            return self.no_plan
        return None if self.host is None or self.estimate is None else self.host.refusal()

    def changes_json(self) -> dict[str, object]:
        """The changes with enums by name (what --json prints)."""
        return {key: value.name if isinstance(value, enum.Enum) else value.to_dict()
                if isinstance(value, CheckpointingConfig) else value for key, value in self.changes.items()}

    def short(self) -> str:
        """The changes in a few words (the GUI's line beside Start)."""
        return "AUTO: " + (", ".join(f"{k} {_text(v)}" for k, v in self.changes.items()) or "nothing needed")

    def summary(self) -> str:
        if self.estimate is None:
            return "memory_preset AUTO: no GPU size known (set gpu_memory_gib), memory keys as set"
        fits = "fits" if self.estimate.fits else "does NOT fit"
        what = ", ".join(f"{k}={_text(v)}" for k, v in self.changes.items()) or "nothing to add"
        return (f"memory_preset AUTO for {self.gpu_gib:.1f} GiB: {what}; estimate {self.estimate.peak_gib:.1f} GiB "
                f"({self.estimate.peak_phase}), {fits}" + (f"; {self.host.line()}" if self.host else "")
                + (f"; {self.why}" if self.why else ""))


def _text(value: object) -> str:
    if isinstance(value, CheckpointingConfig):
        kept = value.kept_blocks
        return value.policy.name + (f" with {kept} kept block{'s' if kept > 1 else ''}" if kept else "")
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
    if int8_measured_faster(capability) and not config.base_loras and config.compile != CompileMode.ON:
        return {"base_weight_format": BaseWeightFormat.INT8_CONVROT}
    return {"base_weight_format": BaseWeightFormat.FP8}


def _savers(config: TrainConfig, both_experts: bool, capability: tuple[int, int] | None = None
            ) -> list[tuple[str, dict]]:
    """(the phase it shrinks, the changes), in order of cost; only where its keys are free and it means something for
    the run."""
    frozen = _frozen_base(config)
    savers = [("caching", {"vae_tiling": True}),
              ("caching", {"text_encoder_caching_device": EncoderDevice.CPU}),  # exact, slow once: the cache is reused
              ("caching", {"vae_dtype": DataType.BFLOAT16}),  # latents rounded to bf16 (they train in bf16 anyway)
              ("training", {"activation_offload": True} if config.checkpointing.checkpoints() else {}),
              # the feed-forward is sliced by the lean block under checkpointing (ffn_chunks would add nothing); a
              # policy the user set is kept (the checkpointing key is then not free)
              ("training", {"checkpointing": SPLIT}),
              # a base_weight_format set away from BF16 (FP8, FP8_SCALED, INT8_CONVROT) is kept as set
              ("training", _base_saver(config, capability)),
              ("training", {"offload_inactive_expert": True} if frozen and both_experts else {})]
    return [(phase, changes) for phase, changes in savers if changes and _free(config, *changes)]


def _over(result: Estimate, phase: str) -> bool:
    """Whether `phase` alone does not fit (the estimate's headroom counted)."""
    return sum(result.phases[phase].values()) + HEADROOM_GIB > result.gpu_gib


def _training_gib(result: Estimate) -> float:
    return sum(result.phases["training"].values()) + HEADROOM_GIB


@dataclasses.dataclass
class _Candidate:
    """One training plan: savers (`mask`: bit i set = the i-th cheapest saver on) and swapped blocks."""

    config: TrainConfig
    changes: dict[str, object]
    estimate: Estimate
    host: HostEstimate
    swapped: int
    mask: int

    @property
    def device_fits(self) -> bool:
        return not _over(self.estimate, "training")

    @property
    def fits(self) -> bool:
        return self.device_fits and self.host.fits is not False

    @property
    def cost(self) -> tuple[int, int]:
        """Cheaper first: fewer swapped blocks (the costliest saver, per block), then the savers' mask (each saver
        costs more than every cheaper one together: the order above)."""
        return self.swapped, self.mask


def _fewest_swapped(config: TrainConfig, gpu: float, layers: int) -> tuple[TrainConfig, Estimate, int]:
    """`config` with the fewest `blocks_to_swap` whose training phase fits `gpu` (all but one when none does)."""
    low, high = 1, layers - 1
    while low < high:  # the estimate falls as blocks are swapped: the first count that fits
        middle = (low + high) // 2
        if _over(estimate(dataclasses.replace(config, blocks_to_swap=middle), gpu), "training"):
            low = middle + 1
        else:
            high = middle
    swapped = dataclasses.replace(config, blocks_to_swap=low)
    return swapped, estimate(swapped, gpu), low


def _training_candidates(config: TrainConfig, gpu: float, ram_gib: float | None, savers: list[dict],
                         can_swap: bool) -> list[_Candidate]:
    """Every combination of the training savers, each with no swapped blocks or (where swapping applies and the
    device needs it) the fewest that fit, with its estimate and host RAM."""
    candidates = []
    for mask in range(2 ** len(savers)):
        changes: dict[str, object] = {}
        for bit, saver in enumerate(savers):
            if mask >> bit & 1:
                changes.update(saver)
        planned = dataclasses.replace(config, **changes)
        result, swapped = estimate(planned, gpu), 0
        if _over(result, "training") and can_swap and result.layers > 1:
            planned, result, swapped = _fewest_swapped(planned, gpu, result.layers)
            changes["blocks_to_swap"] = swapped
        candidates.append(_Candidate(planned, changes, result, host_estimate(planned, ram_gib), swapped, mask))
    return candidates


def _refusal(plan: _Candidate, gpu: float) -> str:
    """Why AUTO cannot start `plan`, the GPU's plan needing the least RAM: what it needs, its largest term, what to
    change and the RAM that would run it."""
    what = ", ".join(f"{k}={_text(v)}" for k, v in plan.changes.items()) or "no saver"
    return (f"{plan.host.refusal()} (of the plans that fit a {gpu:.1f} GiB GPU this one needs the least RAM: {what}; "
            f"a machine with {math.ceil(plan.host.total_gib)} GiB of RAM would run it)")


def plan_memory(config: TrainConfig, gpu_gib: float | None = None, ram_gib: float | None = None,
                capability: tuple[int, int] | None = None) -> MemoryPlan:
    """The config AUTO runs with for a GPU of `gpu_gib` (default: `gpu_memory_gib`, else the detected GPU) of compute
    `capability` (default: the detected GPU's) on a machine of `ram_gib` (default: its RAM), with that run's host
    estimate: the caching phase's savers as it needs them, then the cheapest training plan that fits the GPU and the
    host RAM together (activation offload, idle-expert offload and swapped blocks move device memory to the host;
    chunking and fp8 cost speed instead)."""
    if config.memory_preset != MemoryPreset.AUTO:
        return MemoryPlan(config, {}, None, None)
    gpu = gpu_gib if gpu_gib is not None else (config.gpu_memory_gib or detected_gpu_gib())
    if not gpu:
        return MemoryPlan(config, {}, None, None)
    current, result, changes = config, estimate(config, gpu), {}
    savers = _savers(config, result.both_experts, capability or detected_capability())
    caching = [saver for phase, saver in savers if phase == "caching"]
    # caching's savers once more: VAE tiling saves nothing while UMT5 is the phase's peak, and may once it left
    for saver in caching + caching:
        if not _over(result, "caching") or saver.keys() <= changes.keys():
            continue
        candidate = dataclasses.replace(current, **saver)
        candidate_result = estimate(candidate, gpu)
        if sum(candidate_result.phases["caching"].values()) < sum(result.phases["caching"].values()):
            current, result = candidate, candidate_result  # a saver that saves nothing here is left off
            changes.update(saver)
    training = [saver for phase, saver in savers if phase == "training"]
    can_swap = _frozen_base(config) and _free(config, "blocks_to_swap") and current.checkpointing.checkpoints()
    candidates = _training_candidates(current, gpu, ram_gib, training, can_swap)  # None: the machine's RAM
    fitting = [c for c in candidates if c.fits]
    on_gpu = [c for c in candidates if c.device_fits]
    refusal = None
    if fitting:
        chosen = min(fitting, key=lambda c: c.cost)
    elif on_gpu:  # plans fit the GPU, the RAM holds none of them: refused, naming the one needing the least RAM
        chosen = min(on_gpu, key=lambda c: (c.host.total_gib, c.cost))
        refusal = _refusal(chosen, gpu)
    else:  # none fits the GPU: the lightest on it starts, warned (the estimate has its margin), if the RAM holds it
        chosen = min(candidates, key=lambda c: (_training_gib(c.estimate), c.cost))
    plan = MemoryPlan(chosen.config, {**changes, **chosen.changes}, chosen.estimate, gpu, chosen.host, refusal)
    if refusal is None and chosen.device_fits and _free(config, "checkpointing"):
        spend_spare_memory(plan, ram_gib)
    return plan


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
