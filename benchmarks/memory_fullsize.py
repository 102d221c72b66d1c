#!/usr/bin/env python
"""Peak device memory of the real training step at full size, measured without a GPU.

Each configuration runs the project's own step (`WanLoRASetup`: fp8 or int8 ConvRot storage, LoRA injection,
`prepare_device` with gradient checkpointing, block swap, activation and expert offload; `predict`, backward,
gradient clipping, the optimizer step: benchmarks/gpu_step.py) for 2 optimizer steps on a full-size random Wan
transformer whose tensors are FakeTensors on a fake CUDA device (benchmarks/fake_cuda.py): shapes, dtypes, CUDA
autocast and the fused attention kernels are a GPU's, no memory is allocated and nothing is computed.
`DeviceMemoryCounter` (benchmarks/device_memory.py) counts the live device bytes as
`torch.cuda.max_memory_allocated` would, and names the phase, op and module at the peak with a breakdown. Beside it:
the project's estimate (memory_estimate.py) of the same run, and the goal (issues #24 and #54).

    python benchmarks/memory_fullsize.py --config 1.3b_gc          # one configuration, one JSON
    python benchmarks/memory_fullsize.py --all --json out.json     # the table (each configuration in its own process)
    python benchmarks/memory_fullsize.py --list

What it cannot see is in docs/performance.md ("Measured device memory"): allocator fragmentation (reserved minus
allocated), cuBLAS / cuDNN workspaces and the CUDA context.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    model: str  # a key of gpu_step.MODELS
    width: int = 832
    height: int = 480
    frames: int = 81
    checkpointing: bool = True
    fp8: bool = False  # short for base_weight_format FP8 (the rows' own name)
    base_weight_format: str = "BF16"  # train_config's base_weight_format
    blocks_to_swap: int = 0
    activation_offload: bool = False
    experts: int = 1
    offload_inactive_expert: bool = False
    ffn_chunks: int = 0
    checkpoint_attention: bool = False
    keep_self_attention: bool = False  # each block's self-attention output kept for the backward (kept_attention.py)
    checkpoint_policy: str = ""  # checkpointing.policy by name (instead of the three flags above); "": the flags
    kept_blocks: int = 0  # checkpointing.kept_blocks
    lora_rank: int = 32
    layers: int | None = None  # only the first N blocks (tests of the memory features); None: the whole model
    guidance_scale: float = 0.0  # guidance_preserving.scale: the step's extra no-grad unconditional pass (0 = off)
    # sequence_parallel N: rank 0 of a group of N (the larger share of an uneven cut) under DDP, the others' traffic
    # on a fake process group (shapes only, as every tensor here)
    sequence_parallel: int = 1
    resident_vae: bool = True  # the run's VAE on the GPU beside the step (float32, vae_dtype's default), as training keeps it
    goal_gib: float | None = None
    # what tests/test_memory_fullsize.py holds it to: the goal, or where the goal is not met (yet) the figure
    # measured when this row was set plus 2 % (docs/performance.md says what holds each one); every row is measured
    # with the resident VAE
    limit_gib: float | None = None
    ci: bool = False  # measured in CI's test suite (each row takes 0.5-1.5 CPU-minutes)
    note: str = ""


SPLIT = dict(ffn_chunks=8, checkpoint_attention=True)  # a block's recompute in parts (modelSetup/chunking.py)
LIGHT = dict(fp8=True, blocks_to_swap=30, activation_offload=True)  # what docs/performance.md says fits 24 GB
LIGHT_INT8 = dict(LIGHT, fp8=False, base_weight_format="INT8_CONVROT")  # the same with the int8 ConvRot base
# limits: the goal where it is met, else the figure measured with the lean block (2026-11-28) plus 2 %
HD = dict(width=1280, height=720, frames=81)
CONFIGS: dict[str, MemoryConfig] = {
    "1.3b_gc": MemoryConfig("1.3b", goal_gib=8.5, limit_gib=8.5, ci=True, note="1.3B 832x480x81, training, GC only"),
    "1.3b_gc_split": MemoryConfig("1.3b", **SPLIT, goal_gib=8.0, limit_gib=8.0,
                                  note="1.3B, GC + ffn_chunks 8 + checkpoint_attention"),
    "1.3b_auto8": MemoryConfig("1.3b", activation_offload=True, goal_gib=7.5, limit_gib=7.5, ci=True,
                               note="1.3B, what AUTO picks for an 8 GiB card, the float32 VAE on the GPU "
                                    "(with caching_umt5_cpu: the whole run)"),
    "14b_gc": MemoryConfig("14b", goal_gib=45.0, limit_gib=48.5, note="14B 832x480x81, GC only (80 GB card, no swap)"),
    "14b_gc_split": MemoryConfig("14b", **SPLIT, goal_gib=45.0, limit_gib=46.74,
                                 note="14B, GC + ffn_chunks 8 + checkpoint_attention"),
    "14b_light": MemoryConfig("14b", **LIGHT, goal_gib=12.0, limit_gib=14.32,
                              note="14B 832x480x81, fp8 + 30 swapped blocks + activation offload"),
    "14b_light_split": MemoryConfig("14b", **LIGHT, **SPLIT, goal_gib=12.0, limit_gib=12.0,
                                    note="14B, fp8 + 30 swapped + activation offload + ffn_chunks 8 + "
                                         "checkpoint_attention"),
    "14b_light_int8": MemoryConfig("14b", **LIGHT_INT8, goal_gib=12.0, limit_gib=13.79,
                                   note="14B 832x480x81, int8 ConvRot + 30 swapped blocks + activation offload"),
    "14b_light_split_int8": MemoryConfig("14b", **LIGHT_INT8, **SPLIT, goal_gib=12.0, limit_gib=12.0,
                                         note="14B, int8 ConvRot + 30 swapped + activation offload + ffn_chunks 8 "
                                              "+ checkpoint_attention"),
    "14b_auto12": MemoryConfig("14b", fp8=True, activation_offload=True, checkpoint_attention=True, blocks_to_swap=32,
                               goal_gib=12.0, limit_gib=12.0, ci=True,
                               note="14B, what AUTO picks for a 12 GiB card: fp8 + activation offload + "
                                    "checkpoint_attention + 32 swapped blocks"),
    "14b_auto24": MemoryConfig("14b", fp8=True, activation_offload=True, goal_gib=24.0, limit_gib=24.0,
                               note="14B, what AUTO picks for a 24 GiB card: fp8 + activation offload"),
    # checkpointing policies (modelSetup/checkpoint_policy.py): memory spent on speed, and AUTO's choices for a card
    "1.3b_keep_attention": MemoryConfig("1.3b", checkpoint_policy="KEEP_ATTENTION", limit_gib=11.44,
                                        note="1.3B, checkpointing KEEP_ATTENTION (the self-attention outputs kept)"),
    "1.3b_auto24": MemoryConfig("1.3b", checkpoint_policy="KEEP_ATTENTION", kept_blocks=7, goal_gib=24.0,
                                limit_gib=24.0, note="1.3B, what AUTO picks for a 24 GiB card: KEEP_ATTENTION with 7 "
                                                     "kept blocks"),
    "1.3b_all_but_ffn": MemoryConfig("1.3b", checkpoint_policy="KEEP_ALL_BUT_FFN", limit_gib=53.78,
                                     note="1.3B, checkpointing KEEP_ALL_BUT_FFN (AUTO's choice for 80 GiB)"),
    "14b_keep_attention": MemoryConfig("14b", checkpoint_policy="KEEP_ATTENTION", limit_gib=61.12,
                                       note="14B, checkpointing KEEP_ATTENTION (80 GB card, no swap)"),
    "14b_auto80": MemoryConfig("14b", checkpoint_policy="KEEP_ATTENTION", kept_blocks=2, goal_gib=80.0, limit_gib=80.0,
                               note="14B, what AUTO picks for an 80 GiB card: KEEP_ATTENTION with 2 kept blocks"),
    "5b_keep_attention_kept4": MemoryConfig("5b", width=1280, height=704, frames=121,
                                            checkpoint_policy="KEEP_ATTENTION", kept_blocks=4, limit_gib=36.35,
                                            note="5B TI2V 1280x704x121, KEEP_ATTENTION with 4 kept blocks"),
    "a14b_keep_attention_kept4": MemoryConfig("14b", experts=2, offload_inactive_expert=True,
                                              checkpoint_policy="KEEP_ATTENTION", kept_blocks=4, limit_gib=81.82,
                                              note="A14B BOTH, offload_inactive_expert, KEEP_ATTENTION with 4 kept "
                                                   "blocks"),
    "5b_gc": MemoryConfig("5b", width=1280, height=704, frames=121, goal_gib=20.0, limit_gib=22.17,
                          note="5B TI2V 1280x704x121, GC"),
    "5b_gc_split": MemoryConfig("5b", width=1280, height=704, frames=121, **SPLIT, goal_gib=20.0, limit_gib=21.34,
                                ci=True, note="5B TI2V 1280x704x121, GC + ffn_chunks 8 + checkpoint_attention"),
    # 14B LoRA at 1280x720x81 (75,600 tokens) with checkpointing, no swap: one GPU, then one rank of a sequence group
    "14b_720p": MemoryConfig("14b", **HD, limit_gib=73.2, note="14B 1280x720x81, GC, one GPU"),
    "14b_720p_sp2": MemoryConfig("14b", **HD, sequence_parallel=2, limit_gib=51.5,
                                 note="14B 1280x720x81, GC, sequence_parallel 2: one rank"),
    "14b_720p_sp4": MemoryConfig("14b", **HD, sequence_parallel=4, goal_gib=70.0, limit_gib=70.0,
                                 note="14B 1280x720x81, GC, sequence_parallel 4: one rank"),
    "14b_720p_sp8": MemoryConfig("14b", **HD, sequence_parallel=8, limit_gib=35.2,
                                 note="14B 1280x720x81, GC, sequence_parallel 8: one rank"),
    "a14b_light": MemoryConfig("14b", **LIGHT, experts=2, offload_inactive_expert=True, goal_gib=12.5, limit_gib=16.07,
                               note="A14B BOTH, offload_inactive_expert, fp8 + 30 swapped + activation offload"),
    "a14b_light_split": MemoryConfig("14b", **LIGHT, **SPLIT, experts=2, offload_inactive_expert=True, goal_gib=12.5,
                                     limit_gib=13.91, note="A14B BOTH, offload_inactive_expert, fp8 + swap + "
                                                          "activation offload + ffn_chunks 8 + checkpoint_attention"),
    "a14b_auto16": MemoryConfig("14b", fp8=True, activation_offload=True, checkpoint_attention=True, blocks_to_swap=27,
                                experts=2, offload_inactive_expert=True, goal_gib=16.0, limit_gib=16.0,
                                note="A14B BOTH, what AUTO picks for a 16 GiB card: fp8 + activation offload + "
                                     "checkpoint_attention + offload_inactive_expert + 27 swapped blocks"),
}


def measure(name: "str | MemoryConfig") -> dict:
    """Run configuration `name` (or a MemoryConfig) on the fake CUDA device in this process (fake_cuda.preload()
    must have run)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from benchmarks import gpu_step
    from benchmarks.device_memory import DeviceMemoryCounter
    from benchmarks.fake_cuda import fake_cuda_patches
    from modules.modelSetup.int8_storage import int8_layers

    spec = CONFIGS[name] if isinstance(name, str) else name
    name = name if isinstance(name, str) else "custom"
    config = gpu_step.transformer_config(spec.model, spec.layers)
    shape = gpu_step.latent_shape(config, spec.width, spec.height, spec.frames)
    train = gpu_step.train_config(rank=spec.lora_rank, checkpointing=spec.checkpointing,
                                  blocks_to_swap=spec.blocks_to_swap, fp8=False,
                                  activation_offload=spec.activation_offload, dtype_name="BFLOAT16",
                                  offload_inactive_expert=spec.offload_inactive_expert, device="cuda",
                                  ffn_chunks=spec.ffn_chunks, checkpoint_attention=spec.checkpoint_attention,
                                  guidance_scale=spec.guidance_scale,
                                  base_weight_format="FP8" if spec.fp8 else spec.base_weight_format,
                                  keep_self_attention=spec.keep_self_attention,
                                  checkpoint_policy=spec.checkpoint_policy, kept_blocks=spec.kept_blocks)
    device, dtype = torch.device("cuda"), torch.bfloat16
    started = time.perf_counter()
    with fake_cuda_patches(), FakeTensorMode(allow_non_fake_inputs=True):
        counter = DeviceMemoryCounter("cuda")
        with counter:
            # built on the (fake) CPU as the loader leaves a checkpoint; prepare_device moves it
            transformer = fake_transformer(config, dtype)
            transformer_2 = fake_transformer(config, dtype) if spec.experts == 2 else None
            vae = fake_vae(config).to(device) if spec.resident_vae else None  # kept for sampling and validation
            setup, params, optimizer = gpu_step.prepare(transformer, config, train, device, dtype, transformer_2)
            if spec.sequence_parallel > 1:
                split_sequences(setup, spec.sequence_parallel)
            counter.watch([*setup.model.transformers(), *([vae] if vae is not None else [])], [optimizer])
            real_sigmas(setup)
            inputs = gpu_step.make_inputs(config, shape, 1, device)
            if spec.guidance_scale:  # the unconditional prompt's text rows, as the loaders add them
                inputs.unconditional_embeds = torch.zeros_like(inputs.prompt_embeds)
            after_setup = counter.current
            int8 = sum(len(int8_layers(t)) for t in setup.model.transformers())  # the base's layers stored in int8
            # the optimizer's state exists from the first step on (for both experts once each has trained), so a
            # later step holds the most: create it with one step on zero gradients (AdamW's state, same shapes) and
            # measure the steps after it (two experts: a step routed to each)
            prime_optimizer(params, optimizer)
            phases = [_step(counter, setup, params, optimizer, inputs, step, train.max_grad_norm)
                      for step in first_step_of_each_expert(setup)]
        result = counter.result()
        counter.close()
    estimate = gpu_step.vram_estimate(config, dataclasses.replace(train, sequence_parallel=spec.sequence_parallel),
                                      spec.width, spec.height, spec.frames, 1, spec.experts,
                                      vae_config(config) if spec.resident_vae else None)
    measured = result["peak_gib"]
    estimated = estimate.get("estimate_training_gib")
    return {
        "config": name, "note": spec.note, **dataclasses.asdict(spec), "tokens": gpu_step.video_tokens(config, shape),
        "measured": result, "after_setup_gib": round(after_setup / 2 ** 30, 3), "steps": phases, "int8_layers": int8,
        "goal_gib": spec.goal_gib, "meets_goal": spec.goal_gib is None or measured <= spec.goal_gib,
        "estimate_gib": estimated,
        "estimate_error": round(estimated / measured - 1, 4) if estimated and measured else None,
        "seconds": round(time.perf_counter() - started, 1), "torch": torch.__version__,
    }


FAKE_WORLD = 64  # the largest sequence group a row may ask for


def split_sequences(setup, n: int) -> None:
    """Rank 0 of a sequence group of `n` over a fake process group (no other rank exists: its collectives return
    tensors of the right shapes and move nothing), set up as prepare_device does: the token hooks and Ulysses
    processors. Not DDP, whose C++ reducer cannot hold FakeTensors: prepare_device's DDP keeps the gradients in its
    all-reduce buckets (gradient_as_bucket_view), so it adds no copy of them (a few KB of bucket bookkeeping)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from modules.model.attention.ulysses import SequenceShards
    from modules.model.sequence_parallel import shard_tokens

    if not dist.is_initialized():  # one fake world for every row of this process; a group of n in it per row
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=FAKE_WORLD)
    setup.sequence = SequenceShards(dist.new_group(list(range(n))), n, 0)
    for expert, transformer in setup.trained_transformers():
        shard_tokens(transformer, setup.sequence)


def fake_transformer(config: dict, dtype):
    """A full-size WanTransformer3DModel of FakeTensors on the CPU (made inside a FakeTensorMode: its init computes
    nothing), in the dtypes diffusers' from_pretrained gives and frozen, as the loader leaves it."""
    from diffusers import WanTransformer3DModel

    transformer = WanTransformer3DModel.from_config(config)
    keep = set(transformer._keep_in_fp32_modules or ())
    for name, param in transformer.named_parameters():
        param.data = param.data.to(torch_float32() if keep & set(name.split(".")) else dtype)
    transformer.requires_grad_(False)
    transformer.eval()
    return transformer


# Wan2.2-TI2V-5B's VAE (vae/config.json): the 16x spatial, 48-channel one; Wan 2.1's is AutoencoderKLWan's default
WAN22_VAE = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                 attn_scales=[], temperal_downsample=[False, True, True], dropout=0.0, is_residual=True,
                 in_channels=12, out_channels=12, patch_size=2, scale_factor_temporal=4, scale_factor_spatial=16)


def vae_config(config: dict) -> dict:
    """The VAE config of the transformer's family, as its model folder has it (Wan 2.1's: AutoencoderKLWan's
    defaults)."""
    import inspect

    from diffusers import AutoencoderKLWan

    from benchmarks import gpu_step

    if gpu_step.per_token_timesteps(config):
        return {"_class_name": "AutoencoderKLWan", **WAN22_VAE}
    defaults = inspect.signature(AutoencoderKLWan.__init__).parameters.items()
    return {"_class_name": "AutoencoderKLWan", **{k: p.default for k, p in defaults if k != "self"}}


def fake_vae(config: dict):
    """The family's VAE of FakeTensors in float32 (`vae_dtype`'s default), frozen."""
    from diffusers import AutoencoderKLWan

    vae_args = {k: v for k, v in vae_config(config).items() if not k.startswith("_")}
    return AutoencoderKLWan(**vae_args).to(torch_float32()).requires_grad_(False).eval()


def torch_float32():
    import torch

    return torch.float32


def real_sigmas(setup) -> None:
    """σ and the expert they route to are drawn on real CPU tensors (a few numbers): the step reads them as Python
    floats, which FakeTensors do not have."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    draw = setup.sample_sigmas

    def sample_sigmas(*args, **kwargs):
        with unset_fake_temporarily():
            return draw(*args, **kwargs)

    setup.sample_sigmas = sample_sigmas


def first_step_of_each_expert(setup) -> list[int]:
    """The first micro step the run routes to each trained expert (one expert: step 0)."""
    from modules.model.step_inputs import StepRandom

    first: dict[int, int] = {}
    step = 0
    while len(first) < len(setup.trained_transformers()) and step < 256:
        _, expert = setup.sample_sigmas(StepRandom.for_micro_step(0, step, 1))  # real tensors (real_sigmas)
        first.setdefault(expert, step)
        step += 1
    return sorted(first.values())


def prime_optimizer(params, optimizer) -> None:
    import torch

    for param in params:
        param.grad = torch.zeros_like(param)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _step(counter, setup, params, optimizer, inputs, step: int, max_grad_norm: float) -> dict:
    """One optimizer step as gpu_step.train_step, with the counter's phase set around each part; the device bytes
    live after each part (what block swap and expert offload tests look at)."""
    import torch

    from modules.model.step_inputs import StepRandom

    live = {}
    counter.set_phase("forward")
    output = setup.predict(inputs, StepRandom.for_micro_step(0, step, inputs.x0.shape[0]))
    live["expert"] = output.expert
    live["after_forward"] = counter.current
    counter.set_phase("backward")
    output.loss.backward()
    del output
    live["after_backward"] = counter.current
    counter.set_phase("optimizer")
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    live["after_optimizer"] = counter.current
    return {k: round(v / 2 ** 30, 3) if k != "expert" else v for k, v in live.items()}


# UMT5-XXL, Wan's text encoder (Wan-AI/Wan2.1-*-Diffusers text_encoder/config.json): 5.68 B parameters
UMT5_XXL = dict(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
                relative_attention_num_buckets=32, relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
                dense_act_fn="gelu_new", is_gated_act=True, tie_word_embeddings=False)


@dataclasses.dataclass(frozen=True)
class CachingConfig:
    """The caching phase of a Wan 2.1 run: UMT5-XXL encodes a 512-token caption, the Wan 2.1 VAE a clip."""

    width: int = 832
    height: int = 480
    frames: int = 81
    one_at_a_time: bool = True  # each encoder on the GPU only while it encodes (False: both at once)
    text_encoder_on_gpu: bool = True  # False: UMT5 encodes on the CPU
    vae_tiling: bool = False
    vae_dtype: str = "float32"  # vae_dtype's default: what a run encodes in unless AUTO or the user picks bf16
    note: str = ""


CACHING: dict[str, CachingConfig] = {
    "caching_together": CachingConfig(one_at_a_time=False, note="UMT5 and the VAE on the GPU at once"),
    "caching": CachingConfig(note="one encoder at a time"),
    "caching_tiled": CachingConfig(vae_tiling=True, note="one at a time, VAE tiling"),
    "caching_umt5_cpu": CachingConfig(text_encoder_on_gpu=False, note="UMT5 on the CPU (AUTO's choice for 8 GiB)"),
    "caching_umt5_cpu_bf16": CachingConfig(text_encoder_on_gpu=False, vae_dtype="bfloat16",
                                           note="UMT5 on the CPU, the VAE in bf16 (AUTO's last caching saver)"),
    "caching_umt5_cpu_tiled": CachingConfig(text_encoder_on_gpu=False, vae_tiling=True,
                                            note="UMT5 on the CPU, VAE tiling"),
}


def measure_caching(name: str) -> dict:
    """The encoders' peak on the fake GPU: UMT5-XXL in bf16 on 512 tokens, then (or with it) the Wan 2.1 VAE in
    `vae_dtype` (float32 unless the row says) encoding one clip through `WanModel.encode_video`, as the cache is
    filled."""
    import torch
    from diffusers import AutoencoderKLWan
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import UMT5Config, UMT5EncoderModel

    from benchmarks.device_memory import DeviceMemoryCounter
    from benchmarks.fake_cuda import fake_cuda_patches
    from modules.model.WanModel import WanModel

    spec = CACHING[name]
    started = time.perf_counter()
    cuda, dtype = torch.device("cuda"), torch.bfloat16
    with fake_cuda_patches(), FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        counter = DeviceMemoryCounter("cuda")
        with counter:
            text_encoder = UMT5EncoderModel(UMT5Config(**UMT5_XXL)).to(dtype).eval()
            vae = AutoencoderKLWan().to(getattr(torch, spec.vae_dtype)).eval()  # its defaults are Wan 2.1's VAE
            if spec.vae_tiling:
                vae.enable_tiling()
            counter.watch([text_encoder, vae])
            if not spec.one_at_a_time:
                text_encoder.to(cuda)
                vae.to(cuda)
            counter.set_phase("text_encoder")
            device = cuda if spec.text_encoder_on_gpu else torch.device("cpu")
            text_encoder.to(device)
            tokens = torch.ones((1, 512), dtype=torch.long, device=device)
            text_encoder(input_ids=tokens, attention_mask=torch.ones_like(tokens)).last_hidden_state.to(cuda)
            if spec.one_at_a_time:
                text_encoder.to("cpu")
            counter.set_phase("vae")
            vae.to(cuda)
            model = WanModel.__new__(WanModel)
            model.vae = vae
            # the loader's clip arrives in float32 on the CPU; encode_video moves it in the VAE's dtype
            clip = torch.zeros((1, 3, spec.frames, spec.height, spec.width))
            WanModel.encode_video(model, clip)
        result = counter.result()
        counter.close()
    return {"config": name, "note": spec.note, **dataclasses.asdict(spec), "measured": result,
            "seconds": round(time.perf_counter() - started, 1)}


def run_in_subprocess(name: "str | MemoryConfig", timeout: float = 1800) -> dict:
    """Each configuration in a fresh process: the fake device must be set up before torch is imported."""
    args = ["--config", name] if isinstance(name, str) else ["--spec", json.dumps(dataclasses.asdict(name))]
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_many_in_subprocess(names: "list[str | MemoryConfig]", timeout: float = 1800) -> list[dict]:
    """Several configurations one after another in one fresh process: the fake device, torch and diffusers are set
    up once (~8 CPU-s a process), and each measurement builds its own model, optimizer and counter as a process of
    its own would (tests/test_memory_fullsize.py checks the figures match those of one process each)."""
    specs = [name if isinstance(name, str) else dataclasses.asdict(name) for name in names]
    done = subprocess.run([sys.executable, __file__, "--many", json.dumps(specs)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{specs} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure_any(spec: "str | dict") -> dict:
    started = time.process_time()
    if isinstance(spec, dict):
        row = measure(MemoryConfig(**spec))
    else:
        row = measure_caching(spec) if spec in CACHING else measure(spec)
    return {**row, "cpu_seconds": round(time.process_time() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS) + sorted(CACHING))
    parser.add_argument("--spec", help="a configuration as JSON (the fields of MemoryConfig)")
    parser.add_argument("--many", help="a JSON list of configuration names or MemoryConfig fields: measured one after "
                                       "another in this process, printed as one JSON list")
    parser.add_argument("--all", action="store_true", help="every configuration, each in its own process")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    if args.list:
        for name, spec in CONFIGS.items():
            print(f"{name:12s} goal {spec.goal_gib} GiB  {spec.note}")
        return 0
    if args.all:
        rows = [run_in_subprocess(name) for name in CONFIGS]
        for row in rows:
            print(f"{row['config']:12s} measured {row['measured']['peak_gib']:7.2f} GiB  goal {row['goal_gib']}  "
                  f"estimate {row['estimate_gib']}  ({row['measured']['phase']}: {row['measured']['op']} in "
                  f"{row['measured']['module']})", file=sys.stderr)
        text = json.dumps(rows, indent=2)
    elif args.config or args.spec or args.many:
        from benchmarks import fake_cuda

        fake_cuda.preload()
        import logging

        logging.basicConfig(level=logging.WARNING)
        if args.many:
            text = json.dumps([_measure_any(spec) for spec in json.loads(args.many)])
        elif args.config in CACHING:
            text = json.dumps(measure_caching(args.config))
        else:
            text = json.dumps(measure(args.config or MemoryConfig(**json.loads(args.spec))))
    else:
        parser.error("give --config NAME, --all or --list")
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
