"""Scaled fp8 base weights (issue #17, deliverable 3): `fp8_scale` TENSOR (ComfyUI's fp8_scaled format) and
CHANNEL next to the plain e4m3 cast; training on a ComfyUI fp8_scaled file agrees with our own scaled fp8."""
from __future__ import annotations

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.modelSetup.fp8_storage import FP8, dequantize, quantize, stored_weights
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.enum import Fp8Scale
from tests.conftest import train_config_dict
from tests.test_single_file_models import comfy_transformer, write


def relative_error(weight: torch.Tensor, mode: Fp8Scale) -> float:
    stored, scale = quantize(weight, mode)
    return float((dequantize(stored, scale, torch.float32) - weight).norm() / weight.norm())


def test_quantize_formats():
    weight = torch.randn(6, 5) * torch.logspace(-3, 0, 6)[:, None]
    plain, none = quantize(weight, Fp8Scale.NONE)
    tensor, scalar = quantize(weight, Fp8Scale.TENSOR)
    channel, rows = quantize(weight, Fp8Scale.CHANNEL)
    assert none is None and plain.dtype == tensor.dtype == channel.dtype == FP8
    assert scalar.shape == () and scalar.dtype == torch.float32  # ComfyUI's scale_weight: a float32 scalar
    assert torch.allclose(scalar, weight.abs().max() / 448)
    assert rows.shape == (6, 1) and torch.allclose(rows[:, 0], weight.abs().amax(dim=1) / 448)
    assert float(tensor.float().abs().max()) == 448 and torch.all(channel.float().abs().amax(dim=1) == 448)


def test_per_channel_reconstructs_with_a_smaller_error_than_per_tensor_and_plain():
    torch.manual_seed(0)
    # rows of very different size, as a trained layer's output channels can be
    weight = torch.randn(64, 256) * 0.02 * torch.logspace(-2, 0, 64)[:, None]
    errors = {mode: relative_error(weight, mode) for mode in Fp8Scale}
    assert errors[Fp8Scale.CHANNEL] < errors[Fp8Scale.TENSOR] < errors[Fp8Scale.NONE], errors
    assert errors[Fp8Scale.CHANNEL] < 2 ** -4  # e4m3: 3 mantissa bits


def test_the_tiny_models_weights_round_as_the_formats_promise(tiny_model):
    from modules.modelLoader.WanModelLoader import WanModelLoader

    transformer = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu")).transformer
    weights = [m.weight.data.float() for m in transformer.blocks.modules() if isinstance(m, torch.nn.Linear)]
    total = {mode: sum(relative_error(w, mode) ** 2 * float(w.norm()) ** 2 for w in weights) for mode in Fp8Scale}
    assert total[Fp8Scale.CHANNEL] < total[Fp8Scale.TENSOR] < total[Fp8Scale.NONE], total


def first_step(model_dir, video_dataset, work, **overrides):
    """Loss and LoRA gradients of one step, and the trainer."""
    config = TrainConfig.from_dict(train_config_dict(model_dir, video_dataset, work, **overrides))
    trainer = GenericTrainer(config)
    trainer.start()
    random = StepRandom.for_micro_step(0, 0, 2)
    output = trainer.setup.predict(trainer.data.assemble(trainer.data.load_batch([0, 1], 0), random), random)
    output.loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.transformer.named_parameters() if p.grad is not None}
    return float(output.loss.detach()), grads, trainer


@pytest.fixture(scope="module")
def full_precision(tiny_model, video_dataset, tmp_path_factory):
    return first_step(tiny_model("t2v"), video_dataset, tmp_path_factory.mktemp("fp32"))


@pytest.mark.parametrize("scale", ["NONE", "TENSOR", "CHANNEL"])
def test_fp8_storage_trains_within_fp8_rounding_of_full_precision(tiny_model, video_dataset, tmp_path,
                                                                 full_precision, scale):
    loss, grads, trainer = first_step(tiny_model("t2v"), video_dataset, tmp_path, base_weight_format="FP8",
                                      fp8_scale=scale)
    reference, reference_grads, _ = full_precision
    stored = stored_weights(trainer.model.transformer)
    # the 20 Linears of the 2 blocks and proj_out; the embedders and norms stay as loaded
    assert len(stored) == 21 and "proj_out" in stored and all(s.dtype == FP8 for s, _ in stored.values())
    assert all((scale == "NONE") == (s is None) for _, s in stored.values())
    assert abs(loss - reference) < 2 ** -4 * reference  # e4m3's relative rounding, 6.25 %
    assert grads.keys() == reference_grads.keys() and all(g.dtype == torch.float32 for g in grads.values())


def test_a_comfyui_fp8_scaled_file_trains_as_our_own_scaled_fp8(tiny_model, video_dataset, tmp_path):
    """The file (fp8 weights, float32 scale_weight, scale_input, the scaled_fp8 marker, ComfyUI's names) is
    dequantized as ComfyUI computes it; requantized per tensor, it gives back ComfyUI's own fp8 values, so the
    step is the one on the base model stored with fp8_scale TENSOR."""
    from modules.modelLoader.WanModelLoader import WanModelLoader

    state = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu")).transformer.state_dict()
    file = write(comfy_transformer(state, "fp8_scaled"), tmp_path / "wan_t2v_fp8_scaled.safetensors")
    ours_loss, ours_grads, ours = first_step(tiny_model("t2v"), video_dataset, tmp_path / "ours",
                                             base_weight_format="FP8", fp8_scale="TENSOR")
    comfy_loss, comfy_grads, comfy = first_step(tiny_model("t2v"), video_dataset, tmp_path / "comfy",
                                                transformer_override=file, base_weight_format="FP8", fp8_scale="TENSOR")
    ours_stored, comfy_stored = stored_weights(ours.model.transformer), stored_weights(comfy.model.transformer)
    assert ours_stored.keys() == comfy_stored.keys()
    for name, (weight, scale) in ours_stored.items():
        assert torch.equal(weight.view(torch.uint8), comfy_stored[name][0].view(torch.uint8)), name  # same e4m3 bits
        assert torch.allclose(scale, comfy_stored[name][1], rtol=1e-6), name
    # the file also holds condition_embedder.time_proj in fp8 (our storage keeps the embedders in full
    # precision): that weight's e4m3 rounding is the only other difference
    assert comfy_loss == pytest.approx(ours_loss, rel=1e-4)
    difference = sum(float((comfy_grads[k] - g).pow(2).sum()) for k, g in ours_grads.items())
    grad_error = (difference / sum(float(g.pow(2).sum()) for g in ours_grads.values())) ** 0.5
    assert grad_error < 2 ** -4, grad_error


def test_fp8_scale_needs_a_float8_base():
    with pytest.raises(ConfigError, match="config key 'fp8_scale' is TENSOR, which scales a float8 base: set "
                                          "base_weight_format FP8"):
        TrainConfig.from_dict({"fp8_scale": "TENSOR"})
    assert TrainConfig.from_dict({"fp8_scale": "CHANNEL", "base_weight_format": "FP8"}).fp8_scale == Fp8Scale.CHANNEL


def test_the_vram_estimate_adds_the_scales(tiny_model):
    import json

    from modules.modelSetup.memory_estimate import GIB, estimate, transformer_counts

    base = {"base_model_name": str(tiny_model("t2v")), "train_device": "cpu", "base_weight_format": "FP8"}
    weights = {scale: estimate(TrainConfig.from_dict({**base, "fp8_scale": scale})).phases["training"][
        "transformer_weights"] for scale in ("NONE", "TENSOR", "CHANNEL")}
    counts = transformer_counts(json.loads((tiny_model("t2v") / "transformer" / "config.json").read_text()))
    assert counts["block_linear_layers"] == 20
    assert (weights["TENSOR"] - weights["NONE"]) * GIB == pytest.approx(4 * 20)
    assert (weights["CHANNEL"] - weights["NONE"]) * GIB == pytest.approx(4 * counts["block_linear_rows"])
