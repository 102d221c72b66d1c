"""Peak GPU memory of a training config, estimated from the checkpoint's JSON configs alone (no weights are read):
what `scripts/estimate_vram.py` prints and the GUI shows beside Start.

The model (docs/performance.md, "VRAM estimate"), in GiB, over the two phases of a run:
- caching (`prepare()`): the text encoder, VAE and CLIP weights, plus the VAE's working set while it encodes
  the largest clip (a 4-frame chunk at a time: 8 feature maps of 96 channels at full resolution, fp32);
- training: the transformer weights (parameter counts of the real classes built on the meta device; fp8 base
  weights 1 byte per block Linear weight, plus 4 bytes per scale with fp8_scale TENSOR / CHANNEL; swapped blocks'
  frozen weights off the GPU but for 2; with offload_inactive_expert one expert's weights only), the trained
  parameters (the real adapter injected on the meta device), their gradients, the optimizer's state
  (`OptimizerSpec.state_bytes`), the EMA copy on the GPU, the VAE (it stays for sampling), the text encoder when
  latents are not cached, and activations: with checkpointed blocks each block's input (tokens x dim x
  2 bytes x layers, on the CPU with activation_offload) plus one block's working set (tokens x (10 dim + 2 ffn)
  x 2 bytes); kept blocks (checkpointing.kept_blocks, KEEP_ALL_BUT_FFN) their saved tensors instead of their input,
  KEEP_ATTENTION each checkpointed block's self-attention output; with policy NONE, that working set for every block. tokens = latent frames x h/p x w/p of the largest
  bucket, times the batch size (with sequence_parallel N, one rank's share: ceil(tokens / N), the whole model
  beside it); an E2V run's reference latent frames beside the video (SkyReels-V3's 4 slots, a
  VACE base's one per element) count as frames; an Animate-2 base's driving stream and reference slot count too
  (1 + 2 x the latent frames), plus each layer's cached driving keys and values (held until the backward). Not
  counted: a VACE transformer's own blocks' activations on its
  control context (not measured). With an int8 ConvRot base one block's working set is at least one int8 call's
  transients (`int8_call_bytes`; for Wan's shapes a fraction of it, as the fake-CUDA rows measure).
The peak is the larger phase. It is a model, not a measurement: it leaves out allocator fragmentation and
CUDA's own context (about 0.5 GiB), which `headroom_gib` stands for.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import torch

from modules.config.train_config import TrainConfig, frame_lengths, resolutions
from modules.modelSetup.checkpoint_policy import kept_block_count
from modules.util.enum import CheckpointPolicy, DataType, EmaMode, Fp8Scale, TrainingMethod, WanExpert
from modules.util.errors import UserError

GIB = 2 ** 30
HEADROOM_GIB = 0.5  # CUDA context and allocator slack
SWAP_RESIDENT_BLOCKS = 2  # swapped blocks on the device at the peak: the one running and the one being fetched
# One lean block's working set in its backward pass under gradient checkpointing (modelSetup/lean_block.py: the
# modulation and residual arithmetic keeps its bf16 inputs only and recomputes in token slices, the feed-forward runs
# its backward in token slices, the attention's q/k norm and rotary too), keyed by checkpointing SPLIT_ATTENTION:
# (bytes per token x model width, GiB beside it: the feed-forward's and the arithmetic's slices). Fitted to the fake-CUDA
# measurement of the real step at full size (benchmarks/memory_fullsize.py; 1.3B and 14B at 832x480x81, bf16
# autocast, the CUDNN attention: docs/performance.md). What is left scales with the width: the attentions' saved
# q/k/v/output and their projections' inputs, the norms' and residuals' bf16 inputs and outputs.
LEAN_WORKING_SET = {False: (38.3, 0.20), True: (28.0, 0.07)}
# Without gradient checkpointing every block keeps its working set until its backward, the feed-forward whole (not
# measured: diffusers' block's constants, per token x (model width, FFN width))
UNCHECKPOINTED_PER_TOKEN = (48.1, 6.73)
# fp8 storage: the dequantized copies of the running part's Linear weights in the compute dtype (autograd keeps them
# for its backward), as this many blocks' worth, by SPLIT_ATTENTION (at the peak: the feed-forward's slices,
# or one attention's projections); fitted on 14B light
FP8_DEQUANTIZED_BLOCKS = {False: 0.81, True: 0.22}
# A kept block (checkpointing.kept_blocks, KEEP_ALL_BUT_FFN): what it saves for its backward, per token x model width
# in bytes (bf16): its input and the norms' and residuals' bf16 inputs, the attentions' projections' inputs, q/k/v,
# outputs and log-sum-exp, the feed-forward's input; fitted to the fake-CUDA rows (benchmarks/memory_fullsize.py
# `1.3b_kept*`, `14b8_kept*`)
KEPT_BLOCK_PER_TOKEN = 33.5
# activation offload: the recomputed block's input back on the device at the peak (block inputs' worth)
OFFLOADED_INPUTS_ON_DEVICE = 1.0
# Wan 2.2 TI2V's timestep per token: the saved time projection (6 x width bf16 per token) and the model's head, whose
# modulation per token runs in float32 (outside the blocks: diffusers'); bytes per token x width, measured on the 5B
PER_TOKEN_TIMESTEP = 13.4


def int8_call_bytes(tokens: int, dim: int, ffn: int, ffn_chunks: int, activation_bytes: int) -> float:
    """The transients of the largest int8 ConvRot Linear call of a block (int8_convrot.int8_linear and its backward),
    beside its input: the rotated input (M x K), its int8 copy and the division before it (quantisation per token),
    one slice of rows' int32 accumulator with its float32 epilogue (three EPILOGUE_BYTES tensors at once) and the
    output (M x N); in the backward the weight dequantised (float32 int8 upcast and product, then the compute
    dtype) with dY·W and its rotation. Calls of one block run one after another, so the largest counts."""
    from modules.modelSetup.int8_convrot import EPILOGUE_BYTES

    def call(m: int, k: int, n: int) -> float:
        forward = m * k * (2 * activation_bytes + 1) + 3 * min(EPILOGUE_BYTES, 4 * m * n) + m * n * activation_bytes
        # the float32 upcast and product at once; then the weight in the compute dtype, dY·W and its rotation
        backward = max(8 * n * k, n * k * activation_bytes + 2 * m * k * activation_bytes)
        return max(forward, backward)

    ffn_rows = -(-tokens // ffn_chunks) if ffn_chunks > 1 else tokens
    return max(call(tokens, dim, dim), call(ffn_rows, dim, ffn), call(ffn_rows, ffn, dim))


def kept_block_bytes(tokens: int, dim: int, scale: float) -> float:
    """What a kept block (not checkpointed; the feed-forward's hidden layer still recomputed in its backward) holds
    from its forward to its backward, its input included: KEPT_BLOCK_PER_TOKEN bytes per token and width."""
    return tokens * KEPT_BLOCK_PER_TOKEN * dim * scale


def ffn_slices(tokens: int, ffn: int, activation_bytes: int, ffn_chunks: int) -> int:
    """Token slices of a checkpointed lean block's feed-forward backward (lean_ffn.backward_ffn's count)."""
    from modules.modelSetup.lean_block import BlockSaves

    hidden = tokens * ffn * activation_bytes
    return max(ffn_chunks, 1, -(-hidden // BlockSaves.ffn_slice_bytes))


def _bytes(dtype: DataType, on_gpu: bool = True) -> int:
    if dtype == DataType.AUTO:
        return 2 if on_gpu else 4
    return {DataType.FLOAT32: 4, DataType.BFLOAT16: 2, DataType.FLOAT16: 2}.get(dtype, 2)


@dataclasses.dataclass
class Estimate:
    phases: dict[str, dict[str, float]]  # phase -> term -> GiB
    gpu_gib: float | None
    suggestions: list[str]
    both_experts: bool = False  # a two-expert model with both experts trained (offload_inactive_expert applies)
    layers: int = 0  # transformer blocks (what blocks_to_swap counts)

    @property
    def peak_gib(self) -> float:
        return max(sum(terms.values()) for terms in self.phases.values()) + HEADROOM_GIB

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda p: sum(self.phases[p].values()))

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_gib is None else self.peak_gib <= self.gpu_gib

    def terms(self) -> dict[str, float]:
        return {**{f"{phase}.{k}": round(v, 3) for phase, terms in self.phases.items() for k, v in terms.items()},
                "headroom": HEADROOM_GIB}

    def to_json(self) -> dict:
        return {"peak_gib": round(self.peak_gib, 2), "peak_phase": self.peak_phase, "terms": self.terms(),
                "gpu_gib": self.gpu_gib, "fits": self.fits, "suggestions": self.suggestions}


def _config(folder: Path, name: str) -> dict | None:
    path = folder / name / "config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _meta_model(cls, config: dict) -> torch.nn.Module:
    with torch.device("meta"):
        return cls.from_config(config) if hasattr(cls, "from_config") else cls(config)


def transformer_counts(config: dict) -> dict[str, int]:
    """Cached by the config's JSON: the GUI re-estimates on every edit."""
    return dict(_transformer_counts(json.dumps(config, sort_keys=True)))


@functools.lru_cache(maxsize=8)
def _transformer_counts(config_json: str) -> tuple:
    return tuple(_count_transformer(json.loads(config_json)).items())


def is_animate2(config: dict) -> bool:
    return config.get("_class_name") == "WanAnimate2Transformer3DModel"


def transformer_width(config: dict) -> tuple[int, int]:
    """(model width, FFN width) of a transformer config (Animate-2's names its width `dim`, as Wan's original code)."""
    dim = config["dim"] if is_animate2(config) else config["num_attention_heads"] * config["attention_head_dim"]
    return dim, config["ffn_dim"]


def _count_transformer(config: dict) -> dict[str, int]:
    """Parameters of the transformer (WanTransformer3DModel, or Animate-2's) built from its config on the meta
    device: all, the blocks' Linear weights (what fp8 storage and block swap move), one block's."""
    model = _meta_model(_transformer_class(config), config)
    linears = [m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith("blocks.")]
    linear = sum(m.weight.numel() for m in linears)
    block = sum(p.numel() for p in model.blocks[0].parameters())
    return {"total": sum(p.numel() for p in model.parameters()), "block_linear": linear, "block": block,
            "layers": len(model.blocks), "block_linear_layers": len(linears),
            "block_linear_rows": sum(m.out_features for m in linears)}


# the config keys that decide the adapter's size (a memory plan estimates many configs that differ in none of them)
_ADAPTER_KEYS = ("peft_type", "lora_decompose", "lora_rank", "lora_alpha", "lora_target_modules", "lora_blocks",
                 "lora_layer_filter", "lokr_factor", "loha_use_effective_conv2d", "lora_dropout")


def adapter_parameters(transformer_config: dict, train: TrainConfig) -> int:
    """Trained parameters of one expert: the real adapter (peft) injected into a meta-device transformer."""
    key = json.dumps([transformer_config, {k: getattr(train, k, None) for k in _ADAPTER_KEYS}], sort_keys=True,
                     default=str)
    if key not in _ADAPTER_CACHE:
        _ADAPTER_CACHE[key] = _adapter_parameters(transformer_config, train)
    return _ADAPTER_CACHE[key]


_ADAPTER_CACHE: dict[str, int] = {}


def _transformer_class(config: dict) -> type:
    from diffusers import WanAnimate2Transformer3DModel, WanTransformer3DModel

    return WanAnimate2Transformer3DModel if is_animate2(config) else WanTransformer3DModel


def _adapter_parameters(transformer_config: dict, train: TrainConfig) -> int:
    from modules.adapter.registry import adapter_for
    from modules.modelSetup.lora_targets import select_lora_targets

    model = _meta_model(_transformer_class(transformer_config), transformer_config)
    targets = select_lora_targets(model, train.lora_target_modules, train.lora_blocks, train.lora_layer_filter)
    spec = adapter_for(train.peft_type, train.lora_decompose)
    with torch.device("meta"):
        model.add_adapter(spec.peft_config(train, targets), adapter_name="estimate")
    names = spec.trainable_names(model, "estimate")
    return sum(p.numel() for n, p in model.named_parameters() if n in names)


def largest_tokens(transformer: dict, vae: dict, train: TrainConfig) -> tuple[int, int, int, int]:
    """(tokens, latent frames, pixel height, pixel width) of the largest bucket: the longest window at the
    largest resolution (aspect buckets keep the area). The tokens count the reference latent frames an E2V run
    adds beside the video's (`appended_latent_frames`); the latent frames are the video's (what the VAE encodes)."""
    spatial = 16 if vae.get("z_dim", 16) == 48 else 8
    _, ph, pw = transformer.get("patch_size", [1, 2, 2])
    frames = max(frame_lengths(train.frames))
    height, width = max(resolutions(train.resolution), key=lambda r: r[0] * r[1])
    latent_frames = (frames - 1) // 4 + 1
    per_frame = (height // spatial // ph) * (width // spatial // pw)
    extra = latent_frames + 1 if is_animate2(transformer) else appended_latent_frames(transformer, train)
    return (latent_frames + extra) * per_frame, latent_frames, height, width


def appended_latent_frames(transformer: dict, train: TrainConfig) -> int:
    """Latent frames an E2V run puts beside the video's in every step (docs/e2v.md): SkyReels-V3's reference slots
    after them (always SKYREELS_V3_SLOTS, empty ones zero), or on a VACE base one leading frame per reference image
    (the most elements any dataset of the E2V JSON has). A2's references sit inside the clip's frames: none."""
    from modules.config.e2v_dataset_config import load_dataset_config
    from modules.model.layout_frames import SKYREELS_V3_SLOTS
    from modules.model.vace_e2v import is_vace_class

    if not train.dataset_config:
        return 0
    if train.e2v.reference_layout == "skyreels_v3":
        return SKYREELS_V3_SLOTS
    if is_vace_class(str(transformer.get("_class_name", ""))):
        return max((len(dataset.elements) for dataset in load_dataset_config(train.dataset_config).datasets), default=0)
    return 0


def _text_encoder_parameters(config: dict | None) -> int:
    return _cached_text_encoder(json.dumps(config, sort_keys=True)) if config else 0


@functools.lru_cache(maxsize=4)
def _cached_text_encoder(config_json: str) -> int:
    config = json.loads(config_json)
    from transformers import UMT5Config, UMT5EncoderModel

    return _count(lambda: UMT5EncoderModel(UMT5Config(**{k: v for k, v in config.items() if not k.startswith("_")})))


def _count(build) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in build().parameters())


def _vae_parameters(config: dict | None) -> int:
    if not config:
        return 0
    from modules.modelSetup.vae_memory import vae_parameters

    return vae_parameters(config)


def _clip_parameters(config: dict | None) -> int:
    if not config:
        return 0
    from transformers import CLIPVisionConfig, CLIPVisionModel

    return _count(lambda: CLIPVisionModel(CLIPVisionConfig(**{k: v for k, v in config.items()
                                                              if not k.startswith("_")})))


def estimate(train: TrainConfig, gpu_gib: float | None = None) -> Estimate:
    """The estimate of `train`'s peak GPU memory, from `base_model_name`'s JSON configs."""
    folder = Path(train.base_model_name)
    transformers = [c for c in (_config(folder, "transformer"), _config(folder, "transformer_2")) if c]
    if not transformers:
        raise UserError(f"config key 'base_model_name': '{folder}' has no transformer/config.json to estimate from")
    vae, text, clip = _config(folder, "vae") or {}, _config(folder, "text_encoder"), _config(folder, "image_encoder")
    counts = [transformer_counts(c) for c in transformers]
    trained = list(range(len(transformers)))
    if len(transformers) == 2 and train.train_expert != WanExpert.BOTH:
        trained = [0 if train.train_expert == WanExpert.HIGH else 1]
    weight_bytes = _bytes(train.transformer_dtype)
    # frozen base weights (LoRA, embedding): fp8 storage and block swap apply
    lora = train.training_method in (TrainingMethod.LORA, TrainingMethod.EMBEDDING)

    # offload_inactive_expert: one expert's frozen weights on the GPU at a time (the experts are alike: the first)
    offload = lora and train.offload_inactive_expert and trained == [0, 1]
    weights = 0.0
    for index, count in enumerate(counts):
        if offload and index == 1:
            continue
        fp8, int8 = lora and train.fp8_base(), lora and train.int8_base()
        linear_bytes = 1 if fp8 or int8 else weight_bytes
        weights += count["block_linear"] * linear_bytes + (count["total"] - count["block_linear"]) * weight_bytes
        fp8_scale = train.fp8_scale_mode()
        if fp8 and fp8_scale != Fp8Scale.NONE:  # float32 scales: one per weight, or one per output channel
            weights += 4 * count["block_linear_layers" if fp8_scale == Fp8Scale.TENSOR else "block_linear_rows"]
        if int8:  # int8 ConvRot: N·K bytes and a float32 scale per output row
            weights += 4 * count["block_linear_rows"]
        if lora and train.blocks_to_swap and index in trained:  # swapped blocks' frozen weights live on the CPU
            per_block = (count["block_linear"] * linear_bytes / count["layers"]
                         + (count["block"] - count["block_linear"] / count["layers"]) * weight_bytes)
            weights -= max(0, train.blocks_to_swap - SWAP_RESIDENT_BLOCKS) * per_block

    if lora:
        trainable = sum(adapter_parameters(transformers[i], train) for i in trained
                        if train.training_method == TrainingMethod.LORA)
        if train.trains_embedding():  # the embedding's vectors (a few KB)
            trainable += train.embedding.token_count * (text or {}).get("d_model", 0)
        trainable_bytes = 4  # adapters and embeddings train in fp32
    else:
        trainable = sum(counts[i]["total"] for i in trained)
        trainable_bytes = weight_bytes
    from modules.optimizer.registry import spec_of

    tokens, latent_frames, height, width = largest_tokens(transformers[0], vae, train)
    tokens = -(-tokens // train.sequence_parallel)  # per rank: sequence_parallel's larger share of an uneven cut
    dim, ffn = transformer_width(transformers[0])
    layers = counts[0]["layers"]
    batch = train.batch_size
    activation_bytes = 2 if _bytes(train.train_dtype) == 2 else 4
    scale = activation_bytes / 2  # the constants were measured under bf16 autocast
    # Animate-2: both passes' block inputs are kept, one block of the longer (generated) stream works at a time
    driving_tokens = tokens * latent_frames // (2 * latent_frames + 1) if is_animate2(transformers[0]) else 0
    block_tokens = (tokens - driving_tokens) * batch
    policy = train.checkpointing.resolved()
    split = policy == CheckpointPolicy.SPLIT_ATTENTION
    kept = kept_block_count(train, layers)  # blocks not checkpointed: all they save but the FFN's hidden layer
    checkpointed = layers - kept
    per_dim, beside = LEAN_WORKING_SET[split]
    working_set = block_tokens * per_dim * dim * scale + beside * GIB
    saved_inputs = tokens * dim * activation_bytes * checkpointed * batch
    per_token_timesteps = (vae or {}).get("z_dim") == 48  # TI2V: the 16x VAE, a timestep per token
    if lora and train.int8_base():  # a block's working set, or one int8 call's transients where they are larger
        slices = ffn_slices(block_tokens, ffn, activation_bytes, train.ffn_chunks) if train.checkpointing.recomputes() \
            else train.ffn_chunks
        working_set = max(working_set, int8_call_bytes(tokens, dim, ffn, slices, activation_bytes) * batch)
    if policy != CheckpointPolicy.NONE:
        activations = {"activations.block_inputs": 0.0 if train.activation_offload else saved_inputs,
                       "activations.one_block": working_set}
        if train.activation_offload and checkpointed:
            activations["activations.offloaded_input_on_device"] = (OFFLOADED_INPUTS_ON_DEVICE * saved_inputs
                                                                    / checkpointed)
        block_linear = counts[0]["block_linear"] / layers * activation_bytes
        if lora and train.fp8_base():
            activations["activations.fp8_dequantized"] = FP8_DEQUANTIZED_BLOCKS[split] * block_linear * batch
        if per_token_timesteps:
            activations["activations.per_token_timesteps"] = tokens * PER_TOKEN_TIMESTEP * dim * scale * batch
        if policy == CheckpointPolicy.KEEP_ATTENTION and checkpointed:  # each checkpointed block's self-attention
            # output and float32 log-sum-exp (128-wide heads); at the peak (the last block's backward) that block's
            # kept output stands in for its recomputed one
            activations["activations.kept_self_attention"] = (
                tokens * (dim * activation_bytes + dim // 128 * 4) * (checkpointed - 1) * batch)
        if kept:  # every kept block's saved tensors but the last's (its backward's working set stands for it), in
            # host memory with activation offload; fp8 / int8 bases: autograd keeps each kept block's upcast weights
            activations["activations.kept_blocks"] = 0.0 if train.activation_offload else (
                (kept - (checkpointed == 0)) * kept_block_bytes(block_tokens, dim, scale))
            if lora and (train.fp8_base() or train.int8_base()):
                activations["activations.kept_blocks_weights"] = (kept - (checkpointed == 0)) * block_linear
    else:  # not measured: every block's working set is kept until its backward
        per_dim, per_ffn = UNCHECKPOINTED_PER_TOKEN
        activations = {"activations.all_blocks": block_tokens * (per_dim * dim + per_ffn * ffn) * scale * layers}
    if driving_tokens:  # not measured: every layer's driving K and V, kept for the generation pass's backward
        activations["activations.driving_kv_cache"] = 2 * driving_tokens * dim * activation_bytes * layers * batch

    text_bytes = _bytes(train.text_encoder_dtype)
    text_weights = _text_encoder_parameters(text) * text_bytes
    vae_weights = _vae_parameters(vae) * _bytes(train.vae_dtype)
    clip_weights = _clip_parameters(clip) * _bytes(train.image_encoder_dtype)
    training = {
        "transformer_weights": weights,
        "trained_parameters": trainable * trainable_bytes if lora else 0.0,  # full fine-tunes: inside the weights
        "gradients": trainable * trainable_bytes,
        "optimizer_state": trainable * spec_of(train.optimizer).state_bytes,
        "ema": trainable * 4 if train.ema == EmaMode.GPU else 0.0,
        "vae_weights": vae_weights,
        # a trained embedding keeps UMT5 on the GPU: captions holding its placeholder are encoded in each step
        "text_encoder_weights": 0.0 if train.latent_caching and not train.trains_embedding() else text_weights,
        **activations,
    }
    caching = caching_terms(train, text_weights, vae, vae_weights, clip_weights, latent_frames, height, width,
                            max(frame_lengths(train.frames)))
    phases = {"training": {k: v / GIB for k, v in training.items()},
              "caching": {k: v / GIB for k, v in caching.items()}}
    result = Estimate(phases, gpu_gib, [], both_experts=trained == [0, 1], layers=layers)
    result.suggestions = suggestions(train, result)
    return result


UMT5_ENCODE_BYTES = 0.12 * GIB  # UMT5-XXL's activations on a 512-token caption in bf16 (fake-CUDA measured)


def caching_terms(train: TrainConfig, text_weights: float, vae: dict, vae_weights: float, clip_weights: float,
                  latent_frames: int, height: int, width: int, frames: int) -> dict[str, float]:
    """The caching phase's peak terms (bytes). With latent caching the encoders take the device one at a time
    (dataLoader/encoder_placement.py): the phase is its largest encoder's (UMT5 with its activations unless it
    encodes on the CPU, UMT5 in fp8 at half; the VAE with its encode, vae_memory.vae_encode_bytes; CLIP). Without
    latent caching every encoder stays on the device beside the encode."""
    from modules.modelSetup.vae_memory import vae_encode_bytes
    from modules.util.enum import EncoderDevice

    dtype = torch.float32 if _bytes(train.vae_dtype) == 4 else torch.bfloat16
    vae_encode = vae_encode_bytes(vae, frames, height, width, dtype, tiled=train.vae_tiling) - vae_weights
    if train.text_encoder_fp8:
        text_weights = text_weights / 2
    text = 0.0 if train.text_encoder_caching_device == EncoderDevice.CPU else text_weights + UMT5_ENCODE_BYTES
    if not train.latent_caching:
        return {"text_encoder_weights": text, "vae_weights": vae_weights, "clip_weights": clip_weights,
                "vae_encode": vae_encode}
    phases = {"text_encoder": {"text_encoder_weights": text},
              "vae": {"vae_weights": vae_weights, "vae_encode": vae_encode},
              "clip": {"clip_weights": clip_weights}}
    largest = max(phases.values(), key=lambda terms: sum(terms.values()))
    return {"text_encoder_weights": 0.0, "vae_weights": 0.0, "clip_weights": 0.0, "vae_encode": 0.0, **largest}


def suggestions(train: TrainConfig, current: Estimate) -> list[str]:
    """What would make the run fit, cheapest in speed first, each with the GiB it saves (empty when it fits)."""
    if current.fits is not False:
        return []
    training, caching = current.phases["training"], current.phases["caching"]
    out = []
    if current.peak_phase == "caching":  # the encoders' phase is the peak: what shrinks it first
        if not train.vae_tiling and caching["vae_encode"]:
            out.append(f"vae_tiling: true (the VAE encodes in tiles: a fraction of its "
                       f"{caching['vae_encode']:.1f} GiB working set; slower caching, once)")
        if caching["text_encoder_weights"]:
            out.append(f"text_encoder_caching_device: CPU (UMT5's {caching['text_encoder_weights']:.1f} GiB stay off "
                       "the GPU; captions encode slowly, once) or text_encoder_fp8: true (about half)")
    # frozen base weights (LoRA, embedding): fp8 storage and block swap apply
    lora = train.training_method in (TrainingMethod.LORA, TrainingMethod.EMBEDDING)
    if train.checkpointing.resolved() == CheckpointPolicy.NONE:
        out.append(f"checkpointing.policy: FULL (keeps one block's activations of the "
                   f"{training['activations.all_blocks']:.1f} GiB, and each block's input; about 30% slower)")
    if train.ema == EmaMode.GPU:
        out.append(f"ema: CPU (saves {training['ema']:.1f} GiB; no speed cost)")
    if lora and not train.fp8_base() and not train.int8_base():
        out.append("base_weight_format: FP8 (halves the block weights of bf16; small speed cost) or "
                   "INT8_CONVROT (the same bytes; int8 matmuls, measured faster on RTX 30xx, slower on Hopper)")
    if train.checkpointing.checkpoints() and not train.activation_offload:
        out.append(f"activation_offload: true (saves {training.get('activations.block_inputs', 0):.1f} GiB; "
                   "host copies each step)")
    if lora and not train.blocks_to_swap:
        out.append("blocks_to_swap: N (moves N blocks' frozen weights to the CPU; slower the larger N)")
    if lora and current.both_experts and not train.offload_inactive_expert:
        out.append("offload_inactive_expert: true (the idle expert's frozen weights wait in CPU memory; one "
                   "transfer each time the routed expert changes)")
    if not train.latent_caching:
        out.append(f"latent_caching: true (frees {training['text_encoder_weights']:.1f} GiB of text encoder)")
    out.append("lower resolution or frames (activations grow with tokens)")
    return out


def detected_gpu_gib() -> float | None:
    """The total memory of the first CUDA/ROCm GPU, or None without one."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / GIB
