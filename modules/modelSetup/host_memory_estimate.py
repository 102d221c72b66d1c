"""Host memory (RAM) of a training config, estimated from the checkpoint's JSON configs alone: what the memory features
keep in host memory (docs/performance.md, "Host memory (RAM)"), beside the VRAM estimate.

Two phases; the estimate is the larger. Terms, in GiB, at the training phase (everything below is held from the
start of training on):
- process: the Python process with torch's CUDA libraries and context (PROCESS_GIB, an allowance, not a measurement);
- text_encoder / image_encoder: with latent caching both are freed once the cache is filled (the samples' prompts
  and images are encoded ahead: trainer/sample_inputs.py), so they count here only where they stay in host memory:
  UMT5 without latent caching when it encodes on the CPU (`text_encoder_caching_device: CPU`), CLIP with
  `sample_metrics` (it measures each sample);
- swapped_blocks: the frozen weights of the `blocks_to_swap` blocks of each trained expert, in the host arena's
  power-of-two slabs (modelSetup/pinned_arena.py: `plan_slabs`, what torch's pinned allocator holds for them);
- expert_offload: `offload_inactive_expert`: each expert's frozen weights outside the swapped blocks, in one arena
  per expert (the active expert's device copy is made from its host copy);
- offloaded_activations: `activation_offload`: each block's saved input (tokens x width x 2 bytes x layers), in
  slabs of ACTIVATION_SLAB;
- ema: `ema: CPU`, a float32 copy of the trained parameters.
At the caching phase (latent caching only): the process, UMT5 and CLIP, both in host memory while the cache is filled
(as loaded, and each moved back there while the other encoders run); the transformer's weights are still the
checkpoint's memory-mapped pages then.
Not counted: the data loader's items, the memory-mapped checkpoint's page cache (reclaimable) and the loader's
transient copy while it loads (benchmarks/host_memory.py measures the load separately).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path

from modules.config.train_config import TrainConfig
from modules.util.enum import EmaMode, EncoderDevice, TrainingMethod, WanExpert

GIB = 2 ** 30
PROCESS_GIB = 3.0  # torch with CUDA's libraries and context in host memory (CPU-only torch: 0.4 GiB measured)


@dataclasses.dataclass
class HostEstimate:
    terms: dict[str, float]  # GiB, at the training phase
    ram_gib: float | None  # the machine's RAM (None: unknown)
    caching: dict[str, float] = dataclasses.field(default_factory=dict)  # GiB, while the cache is filled

    @property
    def peak_phase(self) -> str:
        return "caching" if sum(self.caching.values()) > sum(self.terms.values()) else "training"

    @property
    def peak_terms(self) -> dict[str, float]:
        return self.caching if self.peak_phase == "caching" else self.terms

    @property
    def total_gib(self) -> float:
        return sum(self.peak_terms.values())

    @property
    def fits(self) -> bool | None:
        return None if self.ram_gib is None else self.total_gib <= self.ram_gib

    def line(self) -> str:
        """One line: the total, its largest terms and the verdict (estimate_vram.py, the GUI)."""
        largest = sorted(((v, k) for k, v in self.peak_terms.items() if v >= 0.05 and k != "process"),
                         reverse=True)[:3]
        parts = ", ".join(f"{k} {v:.1f}" for v, k in largest)
        verdict = "" if self.fits is None else (f", fits {self.ram_gib:.0f} GiB" if self.fits
                                                else f", over {self.ram_gib:.0f} GiB")
        phase = " while caching" if self.peak_phase == "caching" else ""
        return f"RAM ≈ {self.total_gib:.1f} GiB{phase}" + (f" ({parts})" if parts else "") + verdict

    def refusal(self) -> str | None:
        """What to change when the run does not fit the machine's RAM, in one line (None when it fits)."""
        if self.fits is not False:
            return None
        name, gib = max(((k, v) for k, v in self.peak_terms.items() if k != "process"), key=lambda kv: kv[1])
        change = _CHANGE.get(name, "a smaller model or more RAM")
        phase = " while caching" if self.peak_phase == "caching" else ""
        return (f"host RAM: the run needs about {self.total_gib:.1f} GiB{phase} of the machine's "
                f"{self.ram_gib:.1f} GiB; {name} holds {gib:.1f} GiB: {change}")

    def phases(self) -> dict[str, dict[str, float]]:
        return {"caching": self.caching, "training": self.terms} if self.caching else {"training": self.terms}

    def to_json(self) -> dict:
        """`ram_gib`: the larger phase (`ram_phase`); `ram_terms`: the training phase's, `ram_caching_terms` the
        caching phase's (empty without latent caching)."""
        return {"ram_gib": round(self.total_gib, 2), "ram_phase": self.peak_phase,
                "ram_terms": {k: round(v, 3) for k, v in self.terms.items()},
                "ram_caching_terms": {k: round(v, 3) for k, v in self.caching.items()},
                "machine_ram_gib": None if self.ram_gib is None else round(self.ram_gib, 1), "ram_fits": self.fits}


_CHANGE = {
    "offloaded_activations": "lower resolution or frames, or a GPU that holds the block inputs "
                             "(activation_offload false)",
    "swapped_blocks": "fewer blocks_to_swap (a larger GPU), or base_weight_format FP8 (half the bytes)",
    "expert_offload": "train_expert HIGH or LOW (one expert), or base_weight_format FP8",
    "text_encoder": "text_encoder_fp8 true, or text_encoder_dtype BFLOAT16 (with latent_caching it leaves after "
                    "caching)",
    "image_encoder": "image_encoder_dtype BFLOAT16 (with latent_caching it leaves after caching unless "
                     "sample_metrics)",
    "ema": "ema GPU or OFF",
}


def machine_ram_gib() -> float | None:
    """The machine's physical memory (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (AttributeError, ValueError, OSError):  # Windows has no sysconf
        return None


@functools.lru_cache(maxsize=8)
def _frozen_sizes(config_json: str, linear_bytes: int, other_bytes: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(one block's tensor bytes, the tensors outside the blocks) of a transformer built on the meta device (with one
    block: the blocks are alike)."""
    import torch
    from diffusers import WanTransformer3DModel

    with torch.device("meta"):
        model = WanTransformer3DModel.from_config({**json.loads(config_json), "num_layers": 1})
    block = model.blocks[0]
    linear = {id(m.weight) for m in block.modules() if isinstance(m, torch.nn.Linear)}
    one = tuple(p.numel() * (linear_bytes if id(p) in linear else other_bytes) for p in block.parameters())
    inside = {id(p) for b in model.blocks for p in b.parameters()}
    rest = tuple(p.numel() * other_bytes for p in model.parameters() if id(p) not in inside)
    return one, rest


def _slab_bytes(sizes: list[int]) -> int:
    from modules.modelSetup.pinned_arena import plan_slabs

    return sum(plan_slabs(sizes)[0]) if sizes else 0


def host_estimate(train: TrainConfig, ram_gib: float | None = None) -> HostEstimate:
    """The host-RAM estimate of `train` against `ram_gib` (default: the machine's RAM), from `base_model_name`'s JSON
    configs: the largest bucket's tokens as the VRAM estimate counts them."""
    from modules.modelSetup import memory_estimate as vram
    from modules.modelSetup.pinned_arena import ACTIVATION_SLAB

    folder = Path(train.base_model_name)
    configs = [c for c in (vram._config(folder, "transformer"), vram._config(folder, "transformer_2")) if c]
    if not configs:
        return HostEstimate({"process": PROCESS_GIB}, ram_gib if ram_gib is not None else machine_ram_gib())
    tokens = vram.largest_tokens(configs[0], vram._config(folder, "vae") or {}, train)[0]
    dim = vram.transformer_width(configs[0])[0]
    layers = vram.transformer_counts(configs[0])["layers"]
    text_parameters = vram._text_encoder_parameters(vram._config(folder, "text_encoder"))
    clip_parameters = vram._clip_parameters(vram._config(folder, "image_encoder"))
    frozen = train.training_method in (TrainingMethod.LORA, TrainingMethod.EMBEDDING)
    trained = len(configs) if len(configs) < 2 or train.train_expert == WanExpert.BOTH else 1
    other = vram._bytes(train.transformer_dtype)
    linear = 1 if frozen and (train.fp8_base() or train.int8_base()) else other
    terms = {"process": PROCESS_GIB, "swapped_blocks": 0.0, "expert_offload": 0.0, "offloaded_activations": 0.0}
    if frozen:
        block, rest = _frozen_sizes(json.dumps(configs[0], sort_keys=True), linear, other)
        swap = min(train.blocks_to_swap, layers - 1) if train.blocks_to_swap else 0
        terms["swapped_blocks"] = trained * _slab_bytes(list(block) * swap) / GIB
        if train.offload_inactive_expert and trained == 2:
            # the offloader keeps both experts' host copies (the active one's device copy is made from it)
            terms["expert_offload"] = 2 * _slab_bytes(list(block) * (layers - swap) + list(rest)) / GIB
    if train.activation_offload and train.checkpointing.recomputes():
        # checkpointed blocks' inputs; a kept block's saved tensors all go to the host (checkpoint_policy.py)
        from modules.modelSetup.checkpoint_policy import kept_block_count

        kept = kept_block_count(train, layers)
        saved = tokens * train.batch_size * (dim * 2 * (layers - kept) + kept * vram.kept_block_bytes(1, dim, 1.0))
        terms["offloaded_activations"] = -(-saved // ACTIVATION_SLAB) * ACTIVATION_SLAB / GIB
    text_gib = text_parameters * (vram._bytes(train.text_encoder_dtype) // (2 if train.text_encoder_fp8 else 1) or 1) \
        / GIB
    clip_gib = clip_parameters * vram._bytes(train.image_encoder_dtype) / GIB
    # with latent caching both leave after it (a trained embedding takes UMT5 to the GPU); without, UMT5 encodes
    # in every step where it lives, on the CPU with text_encoder_caching_device CPU
    on_cpu = train.text_encoder_caching_device == EncoderDevice.CPU
    terms["text_encoder"] = text_gib if not train.latent_caching and on_cpu else 0.0
    terms["image_encoder"] = clip_gib if train.latent_caching and train.sample_metrics else 0.0
    if train.ema == EmaMode.CPU:
        trainable = (sum(vram.adapter_parameters(c, train) for c in configs[:trained])
                     if train.training_method == TrainingMethod.LORA else 0) if frozen else \
            sum(vram.transformer_counts(c)["total"] for c in configs[:trained])
        terms["ema"] = trainable * 4 / GIB
    caching = {"process": PROCESS_GIB, "text_encoder": text_gib, "image_encoder": clip_gib} \
        if train.latent_caching else {}
    return HostEstimate(terms, ram_gib if ram_gib is not None else machine_ram_gib(), caching)
