"""Speed options on the CPU (issue #17): the attention backend through diffusers' dispatcher and AdamW's fused
step give the training step's results of the plain path; unusable choices are one-line errors at start-up."""
from __future__ import annotations

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.model.attention.backend_setup import apply_attention_backend
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util import attention_kernels
from modules.util.attention_kernels import resolve
from modules.util.base_config import ConfigError
from modules.util.enum import AttentionBackend as A
from tests.conftest import train_config_dict


def trained(tiny_model, video_dataset, work, **overrides):
    trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, work,
                                                                     max_steps=3, **overrides)))
    trainer.start()
    trainer.train()
    return trainer


def test_native_and_auto_attention_train_alike_on_the_cpu(tiny_model, video_dataset, tmp_path):
    assert resolve(A.AUTO, "cpu", training=True) == A.NATIVE
    auto = trained(tiny_model, video_dataset, tmp_path / "auto")
    native = trained(tiny_model, video_dataset, tmp_path / "native", attention_backend="NATIVE")
    processors = {getattr(m.processor, "_attention_backend", None) for m in native.model.transformer.modules()
                  if hasattr(m, "processor")}
    assert processors == {"native"}  # set through diffusers' dispatcher
    state, other = auto.setup.trainable_state(), native.setup.trainable_state()
    assert all(torch.equal(value, other[name]) for name, value in state.items())


def test_auto_orders_the_kernels_by_the_cards_measurements(monkeypatch):
    """Hopper and newer: cuDNN first (PyTorch's measurement against flash-attn 2), flash-attn where installed next;
    a card without a measurement (Ampere, Ada, unknown): flash-attn where installed, then cuDNN. Each order names its
    source."""
    installed = {"flash_attn"}
    monkeypatch.setattr(attention_kernels.importlib.util, "find_spec", lambda name: name in installed or None)
    for capability in [(8, 6), (8, 9), None]:
        assert resolve(A.AUTO, "cuda", training=True, capability=capability or (7, 5)) == A.FLASH
    for capability in [(9, 0), (10, 0), (12, 0)]:
        assert resolve(A.AUTO, "cuda", training=True, capability=capability) == A.CUDNN
        assert "PyTorch 2.5" in attention_kernels.auto_order(capability)[1]
    assert "not measured" in attention_kernels.auto_order((8, 6))[1]
    installed.clear()
    assert resolve(A.AUTO, "cuda", training=True, capability=(8, 6)) == A.CUDNN
    assert resolve(A.AUTO, "cpu", training=False) == A.NATIVE


@pytest.mark.parametrize("settings, message", [
    ({"attention_backend": "CUDNN"}, "attention_backend' is CUDNN, which needs a CUDA"),
    ({"attention_backend": "FLEX"}, "attention_backend' is FLEX, which has no backward pass on the CPU"),
    ({"attention_backend": "FLASH"}, "attention_backend' is FLASH, which needs the 'flash_attn' package"),
    ({"sample_attention_backend": "SAGE"}, "sample_attention_backend' is SAGE, which needs the 'sageattention'"),
])
def test_unusable_backends_are_refused_at_start_up(settings, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict({"train_device": "cpu", **settings})


def test_a_backend_without_backward_is_refused_for_training(monkeypatch):
    monkeypatch.setattr(attention_kernels.importlib.util, "find_spec", lambda name: True)
    assert "no backward pass" in attention_kernels.unavailable(A.SAGE, "cuda", training=True)
    assert attention_kernels.unavailable(A.SAGE, "cuda", training=False) is None


def test_fused_adamw_trains_as_the_unfused_step(tiny_model, video_dataset, tmp_path):
    options = lambda fused: {"optimizer_options": {"ADAMW": {"fused": fused}}}  # noqa: E731
    fused = trained(tiny_model, video_dataset, tmp_path / "fused", **options("on"))
    plain = trained(tiny_model, video_dataset, tmp_path / "plain", **options("off"))
    assert fused.optimizer.defaults["fused"] is True and not plain.optimizer.defaults["fused"]
    state, other = fused.setup.trainable_state(), plain.setup.trainable_state()
    assert max(float((value - other[name]).abs().max()) for name, value in state.items()) < 1e-6
    assert max(float(value.abs().max()) for name, value in state.items() if "lora_B" in name) > 0  # it trained
