#!/usr/bin/env python
"""GPU LoRA step: s/step, peak VRAM and MFU of our training step on a random full-size Wan transformer.

The transformer is built with `WanTransformer3DModel.from_config` from the real Wan 2.1 / 2.2 TI2V configs
written below and filled with random weights (nothing is downloaded). The step is the project's own: a
`WanLoRASetup` (peft LoRA on the default targets, fp8 storage via `enable_fp8_storage`) prepared by
`prepare_device` (BlockSwapper, gradient checkpointing), `predict(StepInputs, StepRandom)` (autocast,
`activation_offload`), backward, gradient clipping and AdamW (`create_optimizer`), on synthetic latents
and a random 512 x 4096 text context (plus 257 x 1280 CLIP tokens and 20 condition channels for I2V; the
5B TI2V trains text-to-video on 48-channel latents of its 16x VAE with per-token timesteps).

    python benchmarks/gpu_step.py --model 1.3b --size 832x480 --frames 81 --checkpointing
    python benchmarks/gpu_step.py --model 14b --layers 8 --size 512x512 --frames 81 --checkpointing
    python benchmarks/gpu_step.py --model 14b --size 832x480 --frames 81 --checkpointing \\
        --blocks-to-swap 30 --fp8 --activation-offload
    python benchmarks/gpu_step.py --model 1.3b --checkpointing --compile --attention-backend FLASH
    python benchmarks/gpu_step.py --model 14b --layers 8 --checkpointing --fp8 --fp8-scale CHANNEL
    python benchmarks/gpu_step.py --model 14b --layers 8 --checkpointing --base-weight-format INT8_CONVROT
    python benchmarks/gpu_step.py --model 14b --layers 8 --checkpointing --experts 2 --offload-inactive-expert
    python benchmarks/gpu_step.py --model 5b --size 1280x704 --frames 121 --checkpointing   # Wan 2.2 TI2V
    python benchmarks/gpu_step.py --device cpu --smoke      # 2 narrow layers, proves the script runs

Prints one JSON object (see `main`). Model FLOPs are counted analytically (`step_flops`); MFU follows the
usual convention (model FLOPs = 3 x forward, recomputation not credited). One extra, untimed step runs
under torch's FlopCounterMode: `counted_flops_per_step` is what the kernels really execute (LoRA's
cheaper backward, checkpointing's recomputation) and HFU = counted FLOPs / s / peak.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from benchmarks.step_estimate import per_token_timesteps, vram_estimate, write_model_configs  # noqa: E402, F401 - re-exported

# --- the real transformer configs (Wan-AI/Wan2.1-*-Diffusers transformer/config.json) -----------------
_WAN21_COMMON = dict(patch_size=[1, 2, 2], attention_head_dim=128, in_channels=16, out_channels=16, text_dim=4096,
                     freq_dim=256, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
                     image_dim=None, added_kv_proj_dim=None, rope_max_seq_len=1024, pos_embed_seq_len=None)
MODELS = {
    # Wan2.1-T2V-1.3B: 30 blocks, 12 heads x 128 = 1536 wide
    "1.3b": dict(_WAN21_COMMON, num_layers=30, num_attention_heads=12, ffn_dim=8960),
    # Wan2.1-T2V-14B: 40 blocks, 40 heads x 128 = 5120 wide
    "14b": dict(_WAN21_COMMON, num_layers=40, num_attention_heads=40, ffn_dim=13824),
    # Wan2.1-I2V-14B-480P: as 14B plus the CLIP branch and 36 input channels (16 noisy + 4 mask + 16 condition)
    "14b_i2v": dict(_WAN21_COMMON, num_layers=40, num_attention_heads=40, ffn_dim=13824, in_channels=36,
                    image_dim=1280, added_kv_proj_dim=5120),
    # Wan2.2-TI2V-5B (Wan-AI/Wan2.2-TI2V-5B-Diffusers): 30 blocks, 24 heads x 128 = 3072 wide, 48 latent
    # channels in and out (the Wan 2.2 VAE: z48, 16x spatial), per-token timesteps (expand_timesteps)
    "5b": dict(_WAN21_COMMON, num_layers=30, num_attention_heads=24, ffn_dim=14336, in_channels=48, out_channels=48),
}
# --smoke: the same layout, 2 blocks and narrow (2 heads x 32 = 64 wide); text/CLIP widths stay real.
SMOKE = dict(num_layers=2, num_attention_heads=2, attention_head_dim=32, ffn_dim=128)

TEXT_TOKENS = 512  # UMT5 context length (the transformer splits image from text tokens at length - 512)
IMAGE_TOKENS = 257  # CLIP ViT-H/14 at 224 px: 16 x 16 patches + the class token
VAE_TEMPORAL = 4


def vae_spatial(config: dict) -> int:
    return 16 if per_token_timesteps(config) else 8


def transformer_config(model: str, layers: int | None = None, smoke: bool = False) -> dict:
    config = dict(MODELS[model])
    if smoke:
        config.update(SMOKE)
        if config["added_kv_proj_dim"] is not None:
            config["added_kv_proj_dim"] = SMOKE["num_attention_heads"] * SMOKE["attention_head_dim"]
    if layers is not None:
        if not 1 <= layers <= config["num_layers"]:
            raise SystemExit(f"--layers must be between 1 and {config['num_layers']}, got {layers}")
        config["num_layers"] = layers  # "block stack": the first N blocks, embedders and head unchanged
    return config


def latent_shape(config: dict, width: int, height: int, frames: int) -> tuple[int, int, int]:
    """(T, h, w) of the model's VAE latent of a `frames` x height x width clip."""
    spatial = vae_spatial(config)
    return (frames - 1) // VAE_TEMPORAL + 1, height // spatial, width // spatial


def video_tokens(config: dict, shape: tuple[int, int, int]) -> int:
    t, h, w = shape
    pt, ph, pw = config["patch_size"]
    return (t // pt) * (h // ph) * (w // pw)


def build_transformer(config: dict, device, dtype, seed: int = 0):
    """A random `WanTransformer3DModel` in `dtype` on `device`, with the dtypes `from_pretrained` gives.

    Built on the meta device and materialised in place, so a 14B model never exists in float32 and its
    random init runs on the GPU. Frozen (`requires_grad=False`) and in eval mode, as the loader leaves it.
    """
    import torch
    from diffusers import WanTransformer3DModel
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    with torch.device("meta"):
        transformer = WanTransformer3DModel.from_config(config)
    keep = set(transformer._keep_in_fp32_modules or ())
    for name, param in transformer.named_parameters():  # as diffusers' from_pretrained: `keep` stays float32
        param.data = param.data.to(torch.float32 if keep & set(name.split(".")) else dtype)
    transformer.to_empty(device=device)
    generator = torch.Generator(device).manual_seed(seed)
    width = config["num_attention_heads"] * config["attention_head_dim"]
    with torch.no_grad():
        for name, param in transformer.named_parameters():
            if name.endswith("scale_shift_table"):
                param.normal_(0.0, width ** -0.5, generator=generator)  # as diffusers' __init__
            elif param.ndim >= 2:
                param.normal_(0.0, param[0].numel() ** -0.5, generator=generator)  # unit-variance outputs
            elif name.endswith("bias"):
                param.zero_()
            else:
                param.fill_(1.0)  # norm scales
    # to_empty left the (non-persistent) RoPE tables uninitialised: build them as __init__ does
    transformer.rope = WanRotaryPosEmbed(config["attention_head_dim"], config["patch_size"],
                                         config["rope_max_seq_len"]).to(device)
    transformer.requires_grad_(False)
    transformer.eval()
    return transformer


# --- FLOPs ------------------------------------------------------------------------------------------
def block_linears(config: dict, tokens: int) -> dict[str, tuple[int, int, int]]:
    """Every Linear of one WanTransformerBlock: suffix -> (in features, out features, tokens it sees)."""
    d = config["num_attention_heads"] * config["attention_head_dim"]  # model width D
    f = config["ffn_dim"]
    linears = {
        # self-attention: q, k, v, out on the L video tokens
        "attn1.to_q": (d, d, tokens), "attn1.to_k": (d, d, tokens), "attn1.to_v": (d, d, tokens),
        "attn1.to_out.0": (d, d, tokens),
        # cross-attention: q and out on the video tokens, k and v on the 512 text tokens (already D wide)
        "attn2.to_q": (d, d, tokens), "attn2.to_out.0": (d, d, tokens),
        "attn2.to_k": (d, d, TEXT_TOKENS), "attn2.to_v": (d, d, TEXT_TOKENS),
        # feed-forward: D -> F (tanh-GELU) -> D
        "ffn.net.0.proj": (d, f, tokens), "ffn.net.2": (f, d, tokens),
    }
    if config["added_kv_proj_dim"] is not None:  # I2V: k and v of the 257 CLIP tokens
        linears["attn2.add_k_proj"] = (config["added_kv_proj_dim"], d, IMAGE_TOKENS)
        linears["attn2.add_v_proj"] = (config["added_kv_proj_dim"], d, IMAGE_TOKENS)
    return linears


def step_flops(config: dict, tokens: int, batch: int, lora_rank: int, lora_targets: list[str],
               checkpointing: bool) -> dict[str, float]:
    """Analytic FLOPs of one training step (multiply and add counted separately).

    Per sample, with L video tokens, Lt = 512 text tokens, Li = 257 CLIP tokens (I2V only), width
    D = heads x head_dim, FFN width F, rank r:

      linear layers   2 x in x out x tokens for every Linear (a multiply and an add per weight per token).
                      Per block: 2 x (4 D^2 L [self q,k,v,o] + 2 D^2 L [cross q,o] + 2 D^2 Lt [cross k,v]
                      + 2 D F L [FFN] + 2 D^2 Li [I2V add_k, add_v]).
      attention       Q K^T is (L x hd)(hd x Lk) per head = 2 L Lk hd; A V the same; summed over the heads
                      (heads x hd = D): 4 L Lk D. Per block: 4 L^2 D (self) + 4 L Lt D (text) + 4 L Li D (image).
      LoRA            2 x r x (in + out) x tokens for each adapted Linear (the down and up projections).
      outside blocks  patch embedding (a stride-p conv = Linear of C_in x 4 -> D per token), proj_out (D -> C_out x 4),
                      text embedder (4096 -> D -> D on Lt), CLIP embedder (1280 -> 1280 -> D on Li), time MLPs
                      (256 -> D -> D -> 6 D: on 1 token, on all L with TI2V's per-token timesteps).

    Not counted: norms, RoPE, softmax, GELU, modulation and other elementwise work (< 1 %).

      forward         = batch x (layers x block + outside)
      model FLOPs     = 3 x forward (backward ~ 2 x forward: gradients w.r.t. inputs and weights; the usual
                        MFU convention, although LoRA skips the frozen weights' gradients, so the GPU really
                        does ~ 2 x forward for the linear layers)
      recompute       = batch x layers x block when gradient checkpointing re-runs every block's forward
      MFU             = model FLOPs / s / peak  (the goal's metric; HFU, from FlopCounterMode, is reported beside it)
    """
    d = config["num_attention_heads"] * config["attention_head_dim"]
    layers = config["num_layers"]
    image = IMAGE_TOKENS if config["image_dim"] is not None else 0
    linears = block_linears(config, tokens)
    block_linear = sum(2 * i * o * n for i, o, n in linears.values())
    block_attention = 4 * tokens * tokens * d + 4 * tokens * TEXT_TOKENS * d + 4 * tokens * image * d
    block_lora = sum(2 * lora_rank * (i + o) * n for suffix, (i, o, n) in linears.items() if suffix in lora_targets)
    patch = math.prod(config["patch_size"])
    outside = 2 * (config["in_channels"] * patch * d * tokens  # patch embedding
                   + d * config["out_channels"] * patch * tokens  # proj_out
                   + (config["text_dim"] * d + d * d) * TEXT_TOKENS  # text embedder
                   + (config["freq_dim"] * d + d * d + d * 6 * d)  # time embedder + time_proj
                   * (tokens if per_token_timesteps(config) else 1))
    if config["image_dim"] is not None:
        outside += 2 * (config["image_dim"] ** 2 + config["image_dim"] * d) * IMAGE_TOKENS
    block = block_linear + block_attention + block_lora
    forward = batch * (layers * block + outside)
    return {
        "forward": forward,
        "forward_attention_share": round(batch * layers * block_attention / forward, 4),
        "model_per_step": 3 * forward,
        "recompute_per_step": batch * layers * block if checkpointing else 0,
    }


def check_flop_table(transformer, config: dict) -> None:
    """The FLOP table's Linears are exactly those of block 0 (guards the formula against diffusers changes)."""
    import torch

    table = block_linears(config, 1)
    actual = {name: (m.in_features, m.out_features) for name, m in transformer.blocks[0].named_modules()
              if isinstance(m, torch.nn.Linear) and "lora_" not in name and not name.endswith("base_layer")}
    expected = {name: (i, o) for name, (i, o, _) in table.items()}
    if actual != expected:
        raise AssertionError(f"FLOP table does not match the block's Linear layers: {actual} != {expected}")


# --- the step (the project's own code) ----------------------------------------------------------------
def train_config(*, rank: int, checkpointing: bool, blocks_to_swap: int, fp8: bool, activation_offload: bool,
                 dtype_name: str, fp8_scale: str = "NONE", compile: bool = False, attention_backend: str = "AUTO",
                 offload_inactive_expert: bool = False, device: str = "auto", ffn_chunks: int = 0,
                 checkpoint_attention: bool = False, guidance_scale: float = 0.0, base_weight_format: str = "BF16",
                 keep_self_attention: bool = False, checkpoint_policy: str = "", kept_blocks: int = 0):
    """The run's TrainConfig. `checkpoint_policy` (a CheckpointPolicy name) and `kept_blocks` set the checkpointing
    group; without a policy, `checkpointing`, `checkpoint_attention` and `keep_self_attention` spell it the old way."""
    from modules.config.train_config import TrainConfig

    if checkpoint_policy:
        policy = {"checkpointing": {"policy": checkpoint_policy, "kept_blocks": kept_blocks}}
    else:
        policy = {"gradient_checkpointing": checkpointing, "checkpoint_attention": checkpoint_attention,
                  "keep_self_attention": keep_self_attention}
    if fp8 and base_weight_format not in ("BF16", "FP8"):
        raise SystemExit(f"--fp8 is --base-weight-format FP8, not {base_weight_format}: give one of them")
    return TrainConfig.from_dict({
        "lora_rank": rank, "lora_alpha": rank, **policy,
        "blocks_to_swap": blocks_to_swap, "activation_offload": activation_offload,
        "train_dtype": dtype_name, "transformer_dtype": dtype_name, "tensorboard": False, "sample_at_end": False,
        "fp8_scale": fp8_scale, "compile": compile, "attention_backend": attention_backend, "train_device": device,
        # two experts: half the steps on each (a fixed share, so runs with and without offload route alike)
        "offload_inactive_expert": offload_inactive_expert, "expert_step_share": 0.5, "ffn_chunks": ffn_chunks,
        "guidance_preserving": {"scale": guidance_scale}, "base_weight_format": "FP8" if fp8 else base_weight_format,
    })


def wan_model(transformer, config: dict, device, dtype, transformer_2=None):
    """A WanModel holding only the transformer(s) (the step needs no encoder: its inputs are synthetic). With
    `transformer_2`, a Wan 2.2 A14B-like two-expert model (boundary 0.875)."""
    from modules.model.WanModel import WanModel
    from modules.model.WanVariant import WanVariant
    from modules.util.enum import ModelType

    i2v = config["image_dim"] is not None
    two = transformer_2 is not None
    ti2v = per_token_timesteps(config)
    name = "ti2v" if ti2v else ("a14b_" if two else "") + ("i2v" if i2v else "t2v")
    variant = WanVariant(
        name=name, model_type=ModelType.WAN_2_2 if two or ti2v else ModelType.WAN_2_1,
        in_channels=config["in_channels"], out_channels=config["out_channels"], has_clip_branch=i2v,
        has_image_encoder=False, two_experts=two, boundary_ratio=0.875 if two else None, expand_timesteps=ti2v,
        vae_z_dim=config["out_channels"], vae_scale_spatial=vae_spatial(config), vae_scale_temporal=VAE_TEMPORAL,
        patch_size=tuple(config["patch_size"]), fps=24 if ti2v else 16)
    return WanModel(variant=variant, model_dir=Path("random"), tokenizer=None, text_encoder=None, vae=None,
                    transformer=transformer, scheduler=None, train_device=device, train_dtype=dtype,
                    transformer_2=transformer_2)


def prepare(transformer, config: dict, train, device, dtype, transformer_2=None):
    """WanLoRASetup as GenericTrainer.start() runs it: setup_trainable, prepare_device, optimizer."""
    from modules.modelSetup.optimization import create_optimizer
    from modules.modelSetup.WanLoRASetup import WanLoRASetup

    setup = WanLoRASetup(wan_model(transformer, config, device, dtype, transformer_2), train)
    params = setup.setup_trainable()  # fp8 storage (if on), then the LoRA adapters
    setup.prepare_device()  # block swap or .to(device), gradient checkpointing, train()
    return setup, params, create_optimizer(params, train)


def make_inputs(config: dict, shape: tuple[int, int, int], batch: int, device, seed: int = 0):
    """Synthetic StepInputs: latents (B, C, T, h, w), text (B, 512, 4096); I2V: condition and CLIP tokens.
    TI2V trains text-to-video (no clean first frame), as a T2V dataset does."""
    import torch

    from modules.model.conditioning import ConditionPayload
    from modules.model.step_inputs import StepInputs

    g = torch.Generator().manual_seed(seed)
    t, h, w = shape
    channels = config["out_channels"]
    x0 = torch.randn((batch, channels, t, h, w), generator=g)
    text = torch.randn((batch, TEXT_TOKENS, config["text_dim"]), generator=g)
    condition = clip = None
    extra = config["in_channels"] - channels
    if extra:  # [4 mask channels, 16 condition-latent channels]
        condition = torch.cat([torch.ones((batch, extra - channels, t, h, w)),
                               torch.randn((batch, channels, t, h, w), generator=g)], dim=1)
    if config["image_dim"] is not None:
        clip = torch.randn((batch, IMAGE_TOKENS, config["image_dim"]), generator=g)
    move = (lambda x: None if x is None else x.to(device))
    return StepInputs(x0=move(x0), prompt_embeds=move(text),
                      payload=ConditionPayload(condition=move(condition), clip_embeds=move(clip)))


def train_step(setup, params, optimizer, inputs, step: int, max_grad_norm: float = 1.0, seed: int = 0) -> float:
    """One optimizer step as GenericTrainer does it (no accumulation): predict, backward, clip, AdamW."""
    import torch

    from modules.model.step_inputs import StepRandom

    random = StepRandom.for_micro_step(seed, step, inputs.x0.shape[0])
    output = setup.predict(inputs, random)
    output.loss.backward()
    if max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(output.loss.detach())  # waits for the device


def counted_step_flops(setup, params, optimizer, inputs, step: int, max_grad_norm: float, seed: int) -> int:
    """Matmul/conv/attention FLOPs of one real step as torch's FlopCounterMode sees the kernels run.

    Unlike the 3 x forward convention this is what the step executes: LoRA's backward skips the frozen
    weights' gradients, checkpointing adds its recomputation. On the CPU the fused SDPA kernel is not
    counted, so the math backend is forced there; on CUDA the flash / efficient / cuDNN kernels are counted
    (not a third-party --attention-backend).
    """
    import contextlib

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    math_sdpa = contextlib.nullcontext()
    if inputs.x0.device.type == "cpu":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        math_sdpa = sdpa_kernel(SDPBackend.MATH)
    # compiled blocks (compile ON, or AUTO on CUDA) run eagerly here: the counter sees aten ops, not inductor's kernels
    eager = torch.compiler.set_stance("force_eager")  # nothing to change where nothing is compiled
    counter = FlopCounterMode(display=False)
    # the total needs no split by module: torch's ModuleTracker hooks every module's inputs for their gradients, which
    # the lean block's sliced recompute refuses (a view made under no_grad; autograd.grad over a slice's leaf)
    counter.mod_tracker = _NoModuleTracker()
    with math_sdpa, eager, counter:
        train_step(setup, params, optimizer, inputs, step, max_grad_norm, seed)
    return counter.get_total_flops()


class _NoModuleTracker(contextlib.nullcontext):
    """FlopCounterMode's module tracker, counting everything under "Global" only."""

    parents = {"Global"}


def profile_step(setup, params, optimizer, inputs, step: int, train, args, cuda: bool) -> list[dict]:
    """One more step under torch.profiler: its Chrome trace to `args.profile` (block swap's copy stream beside
    the compute stream shows whether the transfers are hidden) and the 15 ops with the most device time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        train_step(setup, params, optimizer, inputs, step, train.max_grad_norm, args.seed)
        if cuda:
            torch.cuda.synchronize()
    prof.export_chrome_trace(args.profile)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    rows = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0), reverse=True)[:15]
    return [{"op": e.key, "calls": e.count, "self_ms": round(getattr(e, key, 0) / 1000, 3)} for e in rows]


def host_peak_rss_gib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 2)  # Linux: KiB


def gib(n: float) -> float:
    return round(n / 2 ** 30, 3)


def parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be WIDTHxHEIGHT, e.g. 832x480, got {text!r}") from None
    if width % 16 or height % 16 or width < 16 or height < 16:
        raise argparse.ArgumentTypeError(f"width and height must be multiples of 16, got {text!r}")
    return width, height


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="1.3b")
    parser.add_argument("--size", type=parse_size, default=None, help="WIDTHxHEIGHT in pixels (default 832x480; "
                        "--smoke: 64x64)")
    parser.add_argument("--frames", type=int, default=None, help="video frames, 4k+1 (default 81; --smoke: 9)")
    parser.add_argument("--layers", type=int, help="only the first N transformer blocks (the '14B block stack')")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing (per block)")
    parser.add_argument("--blocks-to-swap", type=int, default=0, help="BlockSwapper: last N blocks' weights on the CPU")
    parser.add_argument("--fp8", action="store_true", help="fp8 (e4m3) storage of the frozen weights")
    parser.add_argument("--activation-offload", action="store_true", help="saved activations in pinned CPU memory")
    parser.add_argument("--attention-backend", help="the config's attention_backend (AUTO, NATIVE, FLASH, CUDNN, FLEX: "
                        "through diffusers' dispatcher, AUTO picks one) or a raw diffusers backend name (e.g. _flash_3), "
                        "set after the setup; default AUTO")
    parser.add_argument("--compile", action="store_true", help="compile: torch.compile each block (the warm-up "
                        "steps include compiling: see warmup_times)")
    parser.add_argument("--fp8-scale", choices=["NONE", "TENSOR", "CHANNEL"], default="NONE",
                        help="with --fp8: plain e4m3 cast, one scale per weight (ComfyUI fp8_scaled) or per channel")
    parser.add_argument("--base-weight-format", choices=["BF16", "FP8", "FP8_SCALED", "INT8_CONVROT"], default="BF16",
                        help="base_weight_format of the frozen block Linears (--fp8 is short for FP8)")
    parser.add_argument("--ffn-chunks", type=int, default=0, help="ffn_chunks (a block's FFN recomputed in parts)")
    parser.add_argument("--checkpoint-attention", action="store_true", help="checkpoint_attention (its own part)")
    parser.add_argument("--keep-self-attention", action="store_true",
                        help="keep_self_attention (with --checkpointing: the recompute skips self-attention)")
    parser.add_argument("--checkpoint-policy", choices=["FULL", "SPLIT_ATTENTION", "KEEP_ATTENTION",
                                                        "KEEP_ALL_BUT_FFN", "NONE"], default="",
                        help="checkpointing.policy (instead of --checkpointing / --checkpoint-attention / "
                             "--keep-self-attention)")
    parser.add_argument("--kept-blocks", type=int, default=0, help="checkpointing.kept_blocks (FULL, KEEP_ATTENTION)")
    parser.add_argument("--experts", type=int, choices=[1, 2], default=1, help="2: two experts of this config "
                        "(Wan 2.2 A14B-like, train_expert BOTH, half the steps on each)")
    parser.add_argument("--offload-inactive-expert", action="store_true", help="with --experts 2: the idle "
                        "expert's frozen weights in pinned CPU memory")
    parser.add_argument("--profile", help="after the timed steps, profile one more step (torch.profiler, CPU and "
                        "CUDA) and write its Chrome trace here (.json); the JSON gets the top ops by device time")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 10; --smoke: 2)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3; --smoke: 1)")
    parser.add_argument("--dtype", choices=["BFLOAT16", "FLOAT32"], default="BFLOAT16",
                        help="base weights and autocast (LoRA weights train in float32 either way)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="device peak for MFU (default 989 = H100 SXM bf16 dense on CUDA; none on the CPU)")
    parser.add_argument("--device", default=None, help="cuda (default when available), cuda:1, cpu")
    parser.add_argument("--build-on", choices=["device", "cpu"], default="device",
                        help="where the random weights are made: on the train device (fast) or, as the trainer "
                             "loads a checkpoint, on the CPU and then moved by prepare_device (setup_peak_vram_gib "
                             "is then what a real run's setup needs)")
    parser.add_argument("--smoke", action="store_true", help="2 narrow blocks, tiny clip, 2 steps: proves the script runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()

    import logging

    import torch

    logging.basicConfig(level=logging.WARNING)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    width, height = args.size or ((64, 64) if args.smoke else (832, 480))
    frames = args.frames or (9 if args.smoke else 81)
    steps = args.steps if args.steps is not None else (2 if args.smoke else 10)
    warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    if frames < 1 or (frames - 1) % 4:
        parser.error(f"--frames must be 4k+1, got {frames}")
    if steps < 1 or warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    peak_tflops = args.peak_tflops if args.peak_tflops is not None else (989.0 if cuda else None)
    dtype = {"BFLOAT16": torch.bfloat16, "FLOAT32": torch.float32}[args.dtype]
    config = transformer_config(args.model, args.layers, args.smoke)
    shape = latent_shape(config, width, height, frames)
    tokens = video_tokens(config, shape)
    from modules.util.enum import AttentionBackend

    ours = (args.attention_backend or "AUTO").upper() in AttentionBackend.__members__
    if args.offload_inactive_expert and args.experts != 2:
        parser.error("--offload-inactive-expert needs --experts 2")
    if args.fp8_scale != "NONE" and not args.fp8:
        parser.error("--fp8-scale needs --fp8")
    from modules.util.base_config import ConfigError

    try:
        train = train_config(rank=args.lora_rank, checkpointing=args.checkpointing,
                             blocks_to_swap=args.blocks_to_swap, fp8=args.fp8,
                             activation_offload=args.activation_offload, dtype_name=args.dtype,
                             fp8_scale=args.fp8_scale, compile=args.compile,
                             attention_backend=(args.attention_backend or "AUTO").upper() if ours else "NATIVE",
                             offload_inactive_expert=args.offload_inactive_expert, device=device.type,
                             ffn_chunks=args.ffn_chunks, checkpoint_attention=args.checkpoint_attention,
                             base_weight_format=args.base_weight_format,
                             keep_self_attention=args.keep_self_attention,
                             checkpoint_policy=args.checkpoint_policy, kept_blocks=args.kept_blocks)
    except ConfigError as e:  # e.g. FLASH without flash_attn: a result too ("unavailable"), not a traceback
        text = json.dumps({"status": "unavailable", "error": str(e), "model": args.model,
                           "attention_backend": args.attention_backend, "compile": args.compile}, indent=2)
        print(text)
        if args.json:
            Path(args.json).write_text(text)
        return 4
    flops = step_flops(config, tokens, args.batch_size, args.lora_rank, train.lora_target_modules,
                       train.checkpointing.checkpoints())

    result = {
        "status": "ok", "model": args.model, "smoke": args.smoke, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
        "dtype": args.dtype, "layers": config["num_layers"],
        "width": config["num_attention_heads"] * config["attention_head_dim"],
        "size": f"{width}x{height}", "frames": frames, "batch_size": args.batch_size,
        "latent_shape": [config["out_channels"], *shape], "tokens": tokens, "text_tokens": TEXT_TOKENS,
        "image_tokens": IMAGE_TOKENS if config["image_dim"] is not None else 0,
        "checkpointing": args.checkpointing, "blocks_to_swap": args.blocks_to_swap, "fp8": args.fp8,
        "activation_offload": args.activation_offload, "fp8_scale": args.fp8_scale, "compile": args.compile,
        "base_weight_format": args.base_weight_format,
        "checkpoint_policy": train.checkpointing.resolved().name, "kept_blocks": train.checkpointing.kept_blocks,
        "experts": args.experts, "offload_inactive_expert": args.offload_inactive_expert,
        "lora_rank": args.lora_rank, "steps": steps, "warmup": warmup, "build_on": args.build_on,
    }
    times: list[float] = []
    loss = float("nan")
    counted = None
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    build = device if args.build_on == "device" else torch.device("cpu")
    try:
        torch.manual_seed(args.seed)  # LoRA init
        transformer = build_transformer(config, build, dtype, args.seed)
        check_flop_table(transformer, config)
        result["base_params"] = sum(p.numel() for p in transformer.parameters())
        transformer_2 = None
        if args.experts == 2:  # the low-noise expert: same config, other random weights
            transformer_2 = build_transformer(config, build, dtype, args.seed + 1)
            result["base_params"] += sum(p.numel() for p in transformer_2.parameters())
        setup, params, optimizer = prepare(transformer, config, train, device, dtype, transformer_2)
        if not ours:  # a raw diffusers backend name, after prepare_device set the config's
            for t in setup.model.transformers():
                t.set_attention_backend(args.attention_backend)
        result["attention_backend"] = getattr(next(m.processor for m in transformer.modules()
                                                   if hasattr(m, "processor")), "_attention_backend", None) or "native"
        result["trainable_params"] = sum(p.numel() for p in params)
        result["per_token_timesteps"] = setup.model.conditioning.per_token_timesteps  # the step's own routing
        inputs = make_inputs(config, shape, args.batch_size, device, args.seed)
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
            result["setup_peak_vram_gib"] = gib(torch.cuda.max_memory_allocated(device))
            result["resident_vram_gib"] = gib(torch.cuda.memory_allocated(device))  # weights, LoRA, inputs
            torch.cuda.reset_peak_memory_stats(device)
        warmup_times = []
        for step in range(warmup + steps):
            start = time.perf_counter()
            loss = train_step(setup, params, optimizer, inputs, step, train.max_grad_norm, args.seed)
            if cuda:
                torch.cuda.synchronize(device)
            (times if step >= warmup else warmup_times).append(time.perf_counter() - start)
        result["warmup_times"] = [round(t, 4) for t in warmup_times]  # with --compile: compiling happens here
        if setup.offloader is not None:
            result["expert_transfers"] = setup.offloader.transfers
        if args.compile:
            from modules.modelSetup.compile import compiled_graphs

            result["compiled_graphs"] = compiled_graphs()
        if cuda:
            result["peak_vram_gib"] = gib(torch.cuda.max_memory_allocated(device))
            result["peak_vram_reserved_gib"] = gib(torch.cuda.max_memory_reserved(device))
        if args.profile:
            result["profile_top"] = profile_step(setup, params, optimizer, inputs, warmup + steps, train, args,
                                                 cuda)
        try:  # after the measurement: running out of memory here leaves the timings standing
            counted = counted_step_flops(setup, params, optimizer, inputs, warmup + steps, train.max_grad_norm,
                                         args.seed)
        except torch.OutOfMemoryError:
            counted = None
    except torch.OutOfMemoryError as e:
        result["status"] = "oom"
        result["error"] = str(e).splitlines()[0]
    if cuda and "peak_vram_gib" not in result:  # out of memory before the counting step
        result["peak_vram_gib"] = gib(torch.cuda.max_memory_allocated(device))
        result["peak_vram_reserved_gib"] = gib(torch.cuda.max_memory_reserved(device))
    elif not cuda:
        result["peak_vram_gib"] = None
    result["peak_host_rss_gib"] = host_peak_rss_gib()
    result.update(vram_estimate(config, train, width, height, frames, args.batch_size, args.experts))

    seconds = statistics.mean(times) if times else None
    result.update({
        "loss": round(loss, 5) if math.isfinite(loss) else None,
        "s_per_step": round(seconds, 4) if seconds else None,
        "s_per_step_min": round(min(times), 4) if times else None,
        "step_times": [round(t, 4) for t in times],
        "forward_flops": flops["forward"],
        "attention_share_of_forward": flops["forward_attention_share"],
        "model_flops_per_step": flops["model_per_step"],
        "recompute_flops_per_step": flops["recompute_per_step"],
        "counted_flops_per_step": counted,
        "model_tflops_per_s": float(f"{flops['model_per_step'] / seconds / 1e12:.4g}") if seconds else None,
        "peak_tflops": peak_tflops,
        "mfu": round(flops["model_per_step"] / seconds / 1e12 / peak_tflops, 4) if seconds and peak_tflops else None,
        "hfu": round(counted / seconds / 1e12 / peak_tflops, 4) if seconds and peak_tflops and counted else None,
    })
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0 if result["status"] == "ok" else 3


if __name__ == "__main__":
    sys.exit(main())
