"""Enums shared by configs, the GUI and the trainer. Config files store the member *name*."""
from enum import Enum


class ModelType(Enum):
    AUTO = "AUTO"  # a config's: the checkpoint's own (a variant is never AUTO)
    WAN_2_1 = "WAN_2_1"
    WAN_2_2 = "WAN_2_2"


class TrainingMethod(Enum):
    LORA = "LORA"
    FINE_TUNE = "FINE_TUNE"
    EMBEDDING = "EMBEDDING"  # textual inversion: only new UMT5 input vectors train


class ModelFormat(Enum):
    DIFFUSERS_LORA = "DIFFUSERS_LORA"  # safetensors, diffusers/PEFT key names: diffusers only (ComfyUI ignores them)
    COMFY_LORA = "COMFY_LORA"  # safetensors, "diffusion_model." + Wan's original names, explicit alpha: loads everywhere
    DIFFUSERS = "DIFFUSERS"  # full model as a diffusers folder

    def is_lora(self) -> bool:
        return self in (ModelFormat.DIFFUSERS_LORA, ModelFormat.COMFY_LORA)


class ConceptType(Enum):
    STANDARD = "STANDARD"  # trained on
    VALIDATION = "VALIDATION"  # never trained on: its loss is measured every validate_after units


class FrameSampleStrategy(Enum):
    """Which windows of a clip train (modules/dataLoader/windows.py)."""

    HEAD = "HEAD"
    SLIDE = "SLIDE"
    UNIFORM = "UNIFORM"
    RANDOM = "RANDOM"
    KEYFRAME = "KEYFRAME"
    FULL = "FULL"


class BalancingStrategy(Enum):
    """How `concepts[].balancing` is read (OneTrainer's names)."""

    REPEATS = "REPEATS"  # each sample `balancing` times per epoch; a fraction is drawn anew each epoch
    SAMPLES = "SAMPLES"  # `balancing` samples of the concept per epoch, every sample before any comes again


class PromptSource(Enum):
    """Where a concept's captions come from."""

    SAMPLE = "SAMPLE"  # each sample's same-name .txt (a manifest: its "prompt")
    CONCEPT = "CONCEPT"  # one text file (prompt_path) for every sample of the concept
    FIELD = "FIELD"  # a manifest's field named prompt_field


class BaseWeightFormat(Enum):
    """How the frozen transformer's block Linears are stored and computed (docs/base_weights.md)."""

    BF16 = "BF16"  # as loaded, in transformer_dtype
    FP8 = "FP8"  # float8 e4m3, upcast per layer (fp8_scale NONE or CHANNEL): modules/modelSetup/fp8_storage.py
    FP8_SCALED = "FP8_SCALED"  # float8 with one scale per weight: ComfyUI's fp8_scaled (fp8_scale TENSOR)
    INT8_CONVROT = "INT8_CONVROT"  # ComfyUI's int8 ConvRot, int8 GEMM (modules/modelSetup/int8_convrot.py)


class Fp8Scale(Enum):
    """How base_weight_format FP8 maps each frozen weight into float8 e4m3 (modules/modelSetup/fp8_storage.py)."""

    NONE = "NONE"  # a plain cast, no scale
    TENSOR = "TENSOR"  # one float32 scale per weight (amax / 448): ComfyUI's fp8_scaled format
    CHANNEL = "CHANNEL"  # one float32 scale per output channel: the smallest error


class CheckpointPolicy(Enum):
    """What a transformer block keeps for its backward pass (modules/modelSetup/checkpoint_policy.py), from the least
    memory to the most."""

    AUTO = "AUTO"  # memory_preset AUTO's choice for the card (FULL without a plan: MANUAL, no GPU)
    SPLIT_ATTENTION = "SPLIT_ATTENTION"  # checkpointed, each attention recomputed on its own before its backward
    FULL = "FULL"  # checkpointed: only the block's input is kept, the block recomputed in its backward
    KEEP_ATTENTION = "KEEP_ATTENTION"  # checkpointed, but the self-attention's output and log-sum-exp are kept
    KEEP_ALL_BUT_FFN = "KEEP_ALL_BUT_FFN"  # not recomputed: everything kept but the feed-forward's hidden layer
    NONE = "NONE"  # no checkpointing at all: every block keeps everything (diffusers' feed-forward included)


class CompileMode(Enum):
    """`compile`: torch.compile of the transformer blocks (modules/modelSetup/compile.py)."""

    AUTO = "AUTO"  # on a CUDA GPU with triton (where the compile tests pass), else off; the choice is logged
    ON = "ON"
    OFF = "OFF"


class MemoryPreset(Enum):
    """Whether the memory features are chosen for the GPU (modules/modelSetup/memory_plan.py)."""

    AUTO = "AUTO"  # the cheapest combination that fits the GPU's memory (keys set away from their default are kept)
    MANUAL = "MANUAL"  # exactly the keys as set


class AttentionBackend(Enum):
    """diffusers' attention dispatcher backends a run may use (modules/modelSetup/attention.py)."""

    AUTO = "AUTO"  # the fastest one installed for the device (logged)
    NATIVE = "NATIVE"  # torch's scaled_dot_product_attention (picks its own kernel)
    FLASH = "FLASH"  # flash-attn 2 (package flash_attn, CUDA)
    CUDNN = "CUDNN"  # torch SDPA forced to the cuDNN kernel (CUDA)
    FLEX = "FLEX"  # torch flex_attention (its backward needs a GPU)
    SAGE = "SAGE"  # SageAttention (package sageattention, CUDA): no backward pass, sampling only


class TimeUnit(Enum):
    STEP = "STEP"
    EPOCH = "EPOCH"
    MINUTE = "MINUTE"
    NEVER = "NEVER"


class DataType(Enum):
    AUTO = "AUTO"  # bfloat16 on a GPU, float32 on the CPU
    FLOAT32 = "FLOAT32"
    BFLOAT16 = "BFLOAT16"
    FLOAT16 = "FLOAT16"



class LearningRateScheduler(Enum):
    CONSTANT = "CONSTANT"
    LINEAR = "LINEAR"
    COSINE = "COSINE"
    COSINE_WITH_RESTARTS = "COSINE_WITH_RESTARTS"  # `learning_rate_cycles` cosine decays, each back to the peak
    REX = "REX"  # (1 - p) / (1 - p/2): stays high longer than linear, then falls (Chen et al., "REX")


class TimestepDistribution(Enum):
    UNIFORM = "UNIFORM"
    LOGIT_NORMAL = "LOGIT_NORMAL"  # sigmoid(N(logit_mean, logit_std))
    SIGMOID = "SIGMOID"  # sigmoid(sigmoid_scale * N(0, 1)), as in OneTrainer / SimpleTuner
    COSMAP = "COSMAP"  # SD3's: 1 − 1 / (tan(πu/2) + 1), u ~ U(0, 1)
    HEAVY_TAIL = "HEAVY_TAIL"  # SD3's mode sampling with heavy tails (diffusers' "mode"), scale `mode_scale`


class EmaMode(Enum):
    OFF = "OFF"
    GPU = "GPU"  # the average on the train device
    CPU = "CPU"  # in (pinned) host memory: no GPU memory, the copy overlaps the next step


class LossType(Enum):
    MSE = "MSE"
    HUBER = "HUBER"  # 2·huber: x² below huber_c, 2c|x| − c² above (MSE's scale for small errors)
    PSEUDO_HUBER = "PSEUDO_HUBER"  # 2c(√(x² + c²) − c): smooth, ≈ x² for small errors, linear for large ones


class HuberSchedule(Enum):
    CONSTANT = "CONSTANT"
    EXPONENTIAL = "EXPONENTIAL"  # c(σ) = huber_c^σ: 1 (MSE-like) for clean inputs, huber_c at pure noise


class LossWeightFn(Enum):
    """Per-sample weight of the loss by its σ, as diffusers' compute_loss_weighting_for_sd3 computes it."""

    CONSTANT = "CONSTANT"
    SIGMA_SQRT = "SIGMA_SQRT"  # σ^-2
    COSMAP = "COSMAP"  # 2 / (π (1 − 2σ + 2σ²))


class WanExpert(Enum):
    """Which expert of a two-expert model (Wan 2.2 A14B) to train."""

    BOTH = "BOTH"
    HIGH = "HIGH"  # transformer, sigma >= boundary
    LOW = "LOW"  # transformer_2, sigma < boundary


class VaceBlocks(Enum):
    """Which blocks of a VACE transformer train (DiffSynth and VideoX-Fun train the VACE blocks)."""

    VACE = "VACE"  # the control blocks (vace_blocks.*, and vace_patch_embedding when fine-tuning)
    BASE = "BASE"  # the base Wan blocks and the rest of the transformer
    BOTH = "BOTH"


class DataParallel(Enum):
    """How several GPUs (torchrun) share the training."""

    DDP = "DDP"  # every GPU holds the whole model; gradients are averaged
    FSDP = "FSDP"  # FINE_TUNE: weights, gradients and optimizer state sharded across the GPUs (FSDP2)


class EncoderDevice(Enum):
    """Where an encoder runs while the cache is filled (text_encoder_caching_device)."""

    GPU = "GPU"  # the train device
    CPU = "CPU"  # host memory: slow, but no device memory
