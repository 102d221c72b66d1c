"""Every attention backend gets inputs its kernel accepts: a training step and a sampling step of every family
through NATIVE, CUDNN, FLASH, FLEX and (sampling) SAGE, with stand-ins for flash-attn, flex_attention and
SageAttention that assert the real kernels' input contract (tests/attention_kernels.py), under bf16 autocast with
CUDA's float32 rule for the q/k RMSNorm. Before WanAttentionProcessor, FLASH, FLEX and SAGE got float32 q/k beside a
bf16 v and refused them. And the processor changes no number: NATIVE (what CUDNN runs too) gives bit-identical
outputs and gradients with and without it, self-attention and I2V image keys alike.

Real tensors on the CPU, not FakeTensors on the fake GPU: a sampler ends in numpy and PIL, which FakeTensors do
not reach. The fake GPU's part (its SDPA casting as autocast does) is in tests/test_memory_fullsize.py."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from modules.config.train_config import SampleConfig, TrainConfig
from modules.model.attention.backend_setup import apply_attention_backend
from modules.model.step_inputs import StepRandom
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.enum import AttentionBackend
from tests.attention_kernels import cuda_autocast_norms, kernel_stand_ins
from tests.conftest import e2v_on_t2v_config, train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)

SIZE, FRAMES = 32, 9
SAMPLE = {"prompt": "a red circle", "frames": 5, "height": SIZE, "width": SIZE, "steps": 1, "cfg_scale": 1.0,
          "seed": 3}
TRAINING = (AttentionBackend.NATIVE, AttentionBackend.CUDNN, AttentionBackend.FLASH, AttentionBackend.FLEX)
SAMPLING = (*TRAINING, AttentionBackend.SAGE)


def _images(folder):
    first, last = folder / "first.png", folder / "last.png"
    Image.new("RGB", (SIZE, SIZE), (200, 40, 40)).save(first)
    Image.new("RGB", (SIZE, SIZE), (40, 40, 200)).save(last)
    return str(first), str(last)


def _plain(variant, **sample):
    def make(tiny_model, videos, work):
        config = train_config_dict(tiny_model(variant), videos, work, frames=FRAMES, resolution=[SIZE, SIZE])
        first, last = _images(work)
        extra = {key: {"image": first, "last_image": last}[key] for key in sample}
        return config, {**SAMPLE, **extra}
    return make


def _vace(tiny_model, videos, work):
    from tests.test_vace import vace_dataset

    data = vace_dataset(work / "data")
    config = train_config_dict(tiny_model("vace"), data, work, frames=FRAMES, resolution=[SIZE, SIZE])
    return config, {**SAMPLE, "control_video": str(data / "000_control.mp4")}


def _e2v(layout):
    def make(tiny_model, videos, work):
        overrides = {"e2v": {"reference_layout": "skyreels_v3"}} if layout == "skyreels_v3" else {}
        config = e2v_on_t2v_config(tiny_model, work, **overrides)
        if layout == "skyreels_v3":
            dataset = json.loads(open(config["dataset_config"]).read())
            for element in dataset["datasets"][0]["elements"]:
                element["vae"]["repeat"] = 1  # one latent frame per reference slot
            open(config["dataset_config"], "w").write(json.dumps(dataset))
        first, _ = _images(work)
        return config, {**SAMPLE, "frames": 9, "elements": [first]}
    return make


FAMILIES = {
    "t2v": _plain("t2v"), "i2v": _plain("i2v", image=1), "flf2v": _plain("flf2v", image=1, last_image=1),
    "ti2v": _plain("ti2v"), "a14b": _plain("a14b"), "vace": _vace, "skyreels_v2": _plain("skyreels_v2"),
    "e2v_a2": _e2v("a2"), "e2v_skyreels_v3": _e2v("skyreels_v3"),
}


def _failures(trainer, sample: SampleConfig) -> list[str]:
    """Each backend's training step and sample; what a kernel refused, one line each."""
    failed = []
    random = StepRandom.for_micro_step(0, 0, 1)
    inputs = trainer.data.assemble(trainer.data.load_batch([0], 0), random)
    sampler = WanModelSampler(trainer.model, trainer.kind.sampling_options(trainer.data))
    transformers = trainer.model.transformers()
    with kernel_stand_ins(), cuda_autocast_norms():
        for backend in TRAINING:
            apply_attention_backend(transformers, backend, "cpu", training=True)
            try:
                trainer.setup.predict(inputs, random).loss.backward()
            except AssertionError as e:
                failed.append(f"train {backend.name}: {e}")
        for backend in SAMPLING:
            apply_attention_backend(transformers, backend, "cpu", training=False)
            try:
                frames = sampler.generate(sample, show_progress=False)
                assert frames.shape[1:] == (SIZE, SIZE, 3) and np.isfinite(frames).all()
            except AssertionError as e:
                failed.append(f"sample {backend.name}: {e}")
    return failed


@pytest.mark.parametrize("family", FAMILIES)
def test_every_backend_gets_inputs_its_kernel_accepts(family, tiny_model, video_dataset, tmp_path):
    config, sample = FAMILIES[family](tiny_model, video_dataset, tmp_path)
    trainer = GenericTrainer(TrainConfig.from_dict({**config, "train_dtype": "BFLOAT16"}))
    trainer.start()
    try:
        assert trainer.model.train_dtype == torch.bfloat16  # autocast on: the float32 norms meet bf16 projections
        failures = _failures(trainer, SampleConfig.from_dict(sample, "sample"))
        assert not failures, "kernels refused their inputs:\n" + "\n".join(failures)
    finally:
        trainer.close()


def _wan(image_keys: bool, seed: int = 0):
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4,
                                  out_channels=4, text_dim=32, freq_dim=16, ffn_dim=64, num_layers=2,
                                  rope_max_seq_len=32, image_dim=24 if image_keys else None,
                                  added_kv_proj_dim=32 if image_keys else None)
    return model.to(torch.bfloat16)


@pytest.mark.parametrize("image_keys", [False, True], ids=["self_and_text", "with_image_keys"])
def test_the_processor_changes_no_number_of_native_attention(image_keys):
    """diffusers' processor against ours, NATIVE under bf16 autocast with CUDA's float32 RMSNorm: output, input
    gradient and every weight gradient equal bit for bit."""
    from modules.model.attention.attention_processor import WanAttentionProcessor, install

    results = []
    for ours in (False, True):
        model = _wan(image_keys)
        if ours:
            install(model)
            assert all(isinstance(m.processor, WanAttentionProcessor) for m in model.modules() if hasattr(m, "norm_q"))
        generator = torch.Generator().manual_seed(1)
        x = torch.randn(1, 4, 3, 8, 8, generator=generator, requires_grad=True)
        inputs = dict(hidden_states=x, timestep=torch.tensor([500.0]),
                      encoder_hidden_states=torch.randn(1, 512, 32, generator=generator), return_dict=False)
        if image_keys:
            inputs["encoder_hidden_states_image"] = torch.randn(1, 5, 24, generator=generator)
        with cuda_autocast_norms():  # the backward too: it recomputes the norms
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(**inputs)[0]
            out.float().pow(2).mean().backward()
        results.append((out.detach(), x.grad, [p.grad for p in model.parameters()]))
    (out_a, grad_a, params_a), (out_b, grad_b, params_b) = results
    assert out_a.dtype == torch.bfloat16 and torch.equal(out_a, out_b) and torch.equal(grad_a, grad_b)
    assert len(params_a) == len(params_b) and all(torch.equal(a, b) for a, b in zip(params_a, params_b))
