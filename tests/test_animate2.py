"""Wan2.2-Animate-2: the family loads from its folder; the generation pass's log-sum-exp merge is the block-mask
attention; the two-pass forward through our processor is diffusers' own forward (flex block mask) for the same
inputs, with gradients that reach the driving pass and survive gradient checkpointing."""
from __future__ import annotations

import copy
import functools

import pytest
import torch

from modules.model.animate2 import two_pass_forward
from modules.model.attention.animate2_attention import block_mask_attention, frame_aligned_attention
from modules.model.attention.animate2_processor import Animate2AttentionProcessor
from modules.model.detection import detect_variant
from modules.model.registry import family_for
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.synthetic.tiny_animate2 import tiny_animate2_transformer
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)


def _sdpa(query, key, value):
    return torch.nn.functional.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)).transpose(1, 2)


def test_the_tiny_folder_is_the_animate_2_family_and_loads(tiny_model):
    from diffusers import WanAnimate2Transformer3DModel

    variant = detect_variant(tiny_model("animate_2"))
    assert variant.name == family_for(variant).name == "animate_2"
    assert (variant.in_channels, variant.out_channels, variant.has_clip_branch) == (36, 16, True)
    model = WanModelLoader().load(str(tiny_model("animate_2")), torch.device("cpu"))
    assert isinstance(model.transformer, WanAnimate2Transformer3DModel)
    assert model.image_encoder.config.hidden_size == model.transformer.img_emb.proj[0].normalized_shape[0] == 1280


def test_the_log_sum_exp_merge_is_the_block_mask_attention_values_and_gradients():
    torch.manual_seed(0)
    hw, frames, heads, dim = 3, 4, 2, 8
    shapes = [(2, (frames + 1) * hw, heads, dim)] * 3 + [(2, frames * hw, heads, dim)] * 2
    inputs = [(torch.randn(shape, dtype=torch.float64) * 3).requires_grad_() for shape in shapes]  # peaked
    merged = frame_aligned_attention(*inputs, hw, _sdpa)
    masked = block_mask_attention(*inputs, hw)
    torch.testing.assert_close(merged, masked, rtol=0, atol=1e-12)  # float64: exact up to rounding
    cotangent = torch.randn_like(merged)
    ours = torch.autograd.grad(merged, inputs, cotangent)
    reference = torch.autograd.grad(masked, inputs, cotangent)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)
    assert all(g.abs().sum() > 0 for g in ours)  # the driving keys and values receive gradient too


def _inputs(seed: int = 1, frames: int = 3, size: int = 4):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    return dict(latents=randn(2, 16, frames + 1, size, size), condition=randn(2, 20, frames + 1, size, size),
                driving_latents=randn(2, 16, frames, size, size), driving_condition=randn(2, 20, frames, size, size),
                timestep=torch.tensor([700.0, 250.0]), prompt_embeds=randn(2, 6, 32),
                driving_prompt_embeds=randn(2, 6, 32), clip_embeds=randn(2, 257, 1280),
                driving_clip_embeds=randn(2, 257, 1280))


def _diffusers_forward(transformer, latents, condition, driving_latents, driving_condition, timestep, prompt_embeds,
                       driving_prompt_embeds, clip_embeds, driving_clip_embeds):
    """diffusers' own two calls, as its modular pipeline makes them, one sample at a time (its block mask is built
    per clip geometry; the per-sample timestep goes in as the pipeline's (1,) tensor)."""
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    out = []
    for i in range(latents.shape[0]):
        cache = WanAnimate2KVCache(len(transformer.blocks))
        frames, h, w = driving_latents.shape[2:]
        grid = torch.tensor([[frames, h // 2, w // 2]])
        transformer([driving_latents[i]], timestep=timestep[i:i + 1], encoder_hidden_states=[driving_prompt_embeds[i]],
                    encoder_hidden_states_image=driving_clip_embeds[i:i + 1], condition_latents=[driving_condition[i]],
                    kv_cache=cache, kv_cache_mode="extract", seq_len=frames * h * w // 4, offset_grid_sizes=grid)
        out.append(transformer([latents[i]], timestep=timestep[i:i + 1], encoder_hidden_states=[prompt_embeds[i]],
                               encoder_hidden_states_image=clip_embeds[i:i + 1], condition_latents=[condition[i]],
                               kv_cache=cache, kv_cache_mode="cached", seq_len=(frames + 1) * h * w // 4,
                               reference_grid_sizes=grid, origin_len=(frames - 1) * 4 + 1,
                               origin_area=[h * 8, w * 8]).sample[0])
    return torch.stack(out)


def test_the_two_pass_forward_is_diffusers_forward_for_the_same_inputs(monkeypatch):
    import diffusers.models.transformers.transformer_wan_animate_2 as animate2

    # diffusers compiles its block mask (~45 s on this CPU); the same mask function, built eagerly
    original = animate2.create_block_mask
    monkeypatch.setattr(animate2, "create_block_mask",
                        functools.partial(lambda *a, **k: original(*a, **{**k, "_compile": False})))
    reference = tiny_animate2_transformer(seed=3)
    ours = copy.deepcopy(reference)
    inputs = _inputs()
    with torch.no_grad():
        expected = _diffusers_forward(reference, **inputs)
        got = two_pass_forward(ours, **inputs)
    assert isinstance(ours.blocks[0].self_attn.processor, Animate2AttentionProcessor)
    assert not isinstance(reference.blocks[0].self_attn.processor, Animate2AttentionProcessor)
    assert got.shape == (2, 16, 4, 4, 4) and expected.abs().mean() > 0.1
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)


def test_gradients_reach_the_driving_pass_and_checkpointing_keeps_them():
    inputs = _inputs(seed=2)
    grads = []
    for checkpointing in (False, True):
        transformer = tiny_animate2_transformer(seed=4).train()
        if checkpointing:
            transformer.enable_gradient_checkpointing()
        driving = inputs["driving_latents"].clone().requires_grad_()
        out = two_pass_forward(transformer, **{**inputs, "driving_latents": driving})
        out[:, :, 1:].square().mean().backward()  # the loss leaves the reference slot out
        grads.append([driving.grad] + [p.grad for p in transformer.parameters()])
    assert grads[0][0].abs().sum() > 0  # the driving stream is trained through, not a constant
    for a, b in zip(*grads):
        if a is None:
            assert b is None
            continue
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_the_denoising_loop_is_diffusers_animate_2_pipeline_loop_for_the_same_noise(monkeypatch):
    """diffusers' own ref-extract and denoise blocks (guider, scheduler, block mask) against ours, fp32, same noise."""
    from types import SimpleNamespace

    import diffusers.models.transformers.transformer_wan_animate_2 as animate2
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.guiders import ClassifierFreeGuidance
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache
    from diffusers.modular_pipelines.modular_pipeline import BlockState
    from diffusers.modular_pipelines.wan_animate_2.denoise import (
        WanAnimate2RefExtractStep,
        WanAnimate2SegmentDenoiseInner,
    )

    from modules.modelSampler.animate2_sampling import denoise_segment

    original = animate2.create_block_mask
    monkeypatch.setattr(animate2, "create_block_mask", lambda *a, **k: original(*a, **{**k, "_compile": False}))
    inputs = {k: v[0] for k, v in _inputs(seed=5, frames=2).items() if k != "timestep"}
    negative = torch.randn(6, 32, generator=torch.Generator().manual_seed(9))
    noise = torch.randn(inputs["latents"].shape, generator=torch.Generator().manual_seed(11))
    reference = tiny_animate2_transformer(seed=6, num_layers=10)  # 10 blocks: the unconditional branch skips block 9
    ours = copy.deepcopy(reference)

    def scheduler():
        return FlowMatchEulerDiscreteScheduler(shift=3.0)  # (diffusers' loop hands step() a generator)

    frames, h, w = inputs["driving_latents"].shape[1:]
    components = SimpleNamespace(transformer=reference, scheduler=scheduler(), _execution_device=torch.device("cpu"),
                                 guider=ClassifierFreeGuidance(guidance_scale=3.0))
    state = BlockState(driving_video_latents=inputs["driving_latents"][None],
                       driving_video_condition=inputs["driving_condition"],
                       condition_clip_context=inputs["driving_clip_embeds"][None],
                       prompt_ref_embeds=inputs["driving_prompt_embeds"][None],
                       kv_cache=WanAnimate2KVCache(10), max_seq_len_ref=frames * h * w // 4,
                       grid_sizes_ref=torch.tensor([[frames, h // 2, w // 2]]), latents=noise.clone(),
                       reference_latents=inputs["condition"], num_inference_steps=3, num_segments=1,
                       max_seq_len=(frames + 1) * h * w // 4, segment_frame_length=(frames - 1) * 4 + 1,
                       height=h * 8, width=w * 8, generator=None, prompt_embeds=inputs["prompt_embeds"][None],
                       negative_prompt_embeds=negative[None],
                       denoiser_input_fields={"encoder_hidden_states_image": inputs["clip_embeds"][None]})
    components.scheduler.set_timesteps(3)
    state.timesteps = components.scheduler.timesteps
    WanAnimate2RefExtractStep()(components, state, 0)
    WanAnimate2SegmentDenoiseInner()(components, state, 0)
    got = denoise_segment(ours, scheduler(), noise, inputs["condition"], inputs["driving_latents"],
                          inputs["driving_condition"], inputs["prompt_embeds"], negative,
                          inputs["driving_prompt_embeds"], inputs["clip_embeds"][None],
                          inputs["driving_clip_embeds"][None], steps=3, guidance_scale=3.0)
    assert (got - noise).abs().mean() > 0.1  # it denoised something
    torch.testing.assert_close(got, state.latents, rtol=0, atol=1e-4)


def test_a_lora_trains_on_the_two_pass_step_with_the_reference_slot_out_of_the_loss(tiny_model, video_dataset,
                                                                                    tmp_path):
    """The trainer's step (`BaseWanSetup.predict_at`) on an Animate-2 base: LoRA on self-attention q/k/v by default,
    the reference image's slot out of the loss, and a few steps on one batch lower its loss."""
    from modules.config.train_config import TrainConfig
    from modules.model.animate2 import DrivingStream
    from modules.model.conditioning import ConditionPayload
    from modules.model.step_inputs import StepInputs
    from modules.modelSetup.WanLoRASetup import WanLoRASetup
    from tests.conftest import train_config_dict

    config = TrainConfig.from_dict(train_config_dict(tiny_model("animate_2"), video_dataset, tmp_path,
                                                     gradient_checkpointing=True))
    setup = WanLoRASetup(WanModelLoader().load_for_config(config, torch.device("cpu")), config)
    params = setup.setup_trainable()
    targets = sorted({n.split(".lora")[0] for n, p in setup.model.transformer.named_parameters() if p.requires_grad})
    assert targets == [f"blocks.{b}.self_attn.{m}" for b in (0, 1) for m in ("to_k", "to_q", "to_v")]
    x = _inputs(seed=7, frames=2)
    inputs = StepInputs(x0=x["latents"], prompt_embeds=x["prompt_embeds"], payload=ConditionPayload(
        condition=x["condition"], clip_embeds=x["clip_embeds"], dropped_frames=1,
        driving=DrivingStream(x["driving_latents"], x["driving_condition"], x["driving_prompt_embeds"],
                              x["driving_clip_embeds"])))
    sigmas = torch.tensor([0.7, 0.4])
    noise = torch.randn(x["latents"].shape[1:], generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    losses = []
    for _ in range(6):
        out = setup.predict_at(inputs, sigmas, noise, 0)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(float(out.loss.detach()))
    video_only = (out.predicted - out.target)[:, :, 1:].square().mean()
    torch.testing.assert_close(out.loss, video_only)  # frame 0, the reference slot, is out of the loss
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.99 * losses[0], losses
    # its file in ComfyUI's key space (the official checkpoint's names) and diffusers', both read back exactly
    from modules.modelFile.lora_formats import extract_from_peft, from_state_dict, to_state_dict

    weights = extract_from_peft(setup.model.transformer, "default")
    header = {"wantrainer.variant": "wan-2.1-animate-2"}  # ComfyUI's names are Wan's: the header says which
    for fmt, key in (("COMFY_LORA", "diffusion_model.blocks.0.self_attn.q.lora_down.weight"),
                     ("DIFFUSERS_LORA", "transformer.blocks.0.self_attn.to_q.lora_A.weight")):
        state = to_state_dict(weights, fmt)
        assert key in state and sum(k.endswith((".lora_down.weight", ".lora_A.weight")) for k in state) == 6
        back = from_state_dict(state, header)
        assert set(back.layers) == set(weights.layers) == set(targets)


def test_make_tiny_model_writes_the_animate_2_folder(tmp_path, capsys):
    import importlib.util

    from tests.conftest import REPO_ROOT

    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO_ROOT / "scripts" / "make_tiny_model.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--variant", "animate_2", "--output", str(tmp_path / "model")]) == 0
    assert capsys.readouterr().out.strip() == str((tmp_path / "model").resolve())
    assert detect_variant(tmp_path / "model").name == "animate_2"


def test_the_attention_backend_reaches_our_processor_and_the_forward_is_unchanged():
    from modules.model.attention.backend_setup import apply_attention_backend
    from modules.util.enum import AttentionBackend

    transformer = tiny_animate2_transformer(seed=8)
    inputs = _inputs(seed=3, frames=2)
    with torch.no_grad():
        before = two_pass_forward(transformer, **inputs)
        apply_attention_backend([transformer], AttentionBackend.NATIVE, "cpu", training=True)
        processors = {type(b.self_attn.processor).__name__: b.self_attn.processor for b in transformer.blocks}
        assert list(processors) == ["Animate2AttentionProcessor"]
        assert all(str(b.self_attn.processor._attention_backend) in ("native", "AttentionBackendName.NATIVE")
                   for b in transformer.blocks)
        torch.testing.assert_close(two_pass_forward(transformer, **inputs), before, rtol=0, atol=0)
