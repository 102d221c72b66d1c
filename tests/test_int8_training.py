"""Training on an int8 ConvRot base (base_weight_format INT8_CONVROT): every adapter kind trains on the int8 block
Linears, the loss is the full-precision one within int8 rounding, block swap and expert offload move the int8
tensors, and what an int8 base cannot do is refused in one line at start-up. (Resume: tests/test_int8_files.py.)"""
from __future__ import annotations

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.modelSetup.int8_storage import Int8ConvRotLinear, int8_layers
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)

INT8 = {"base_weight_format": "INT8_CONVROT"}
ADAPTERS = {"lora": {}, "loha": {"peft_type": "LOHA"}, "lokr": {"peft_type": "LOKR"}, "dora": {"lora_decompose": True}}


def first_step(model_dir, data, work, **overrides):
    """Loss and adapter gradients of one step, and the trainer."""
    trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(model_dir, data, work, **overrides)))
    trainer.start()
    random = StepRandom.for_micro_step(0, 0, 2)
    output = trainer.setup.predict(trainer.data.assemble(trainer.data.load_batch([0, 1], 0), random), random)
    output.loss.backward()
    grads = {n: p.grad for n, p in trainer.model.transformer.named_parameters() if p.grad is not None}
    return float(output.loss.detach()), grads, trainer


@pytest.fixture(scope="module")
def full_precision(tiny_model, video_dataset, tmp_path_factory):
    return first_step(tiny_model("t2v"), video_dataset, tmp_path_factory.mktemp("fp32"))


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_adapter_kind_trains_on_the_int8_block_linears(adapter, tiny_model, video_dataset, tmp_path,
                                                            full_precision):
    loss, grads, trainer = first_step(tiny_model("t2v"), video_dataset, tmp_path, **INT8, **ADAPTERS[adapter])
    transformer = trainer.model.transformer
    layers = int8_layers(transformer)
    # the 20 Linears of the 2 blocks and proj_out; embedders, modulation and norms stay as loaded
    assert len(layers) == 21 and all(layer.qweight.dtype == torch.int8 for layer in layers.values())
    assert all(not p.requires_grad for layer in layers.values() for p in layer.parameters())
    plain = [n for n, m in transformer.blocks.named_modules() if type(m) is torch.nn.Linear and ".lora_" not in n]
    assert not plain  # (peft's own lora_A / lora_B are Linears)
    adapted = [m for m in transformer.modules() if hasattr(m, "base_layer")]
    assert adapted and all(isinstance(m.base_layer, Int8ConvRotLinear) for m in adapted)
    reference, reference_grads, _ = full_precision
    assert abs(loss - reference) < 0.02 * reference  # int8's rounding of weights and activations
    trained = [n for n, p in transformer.named_parameters() if p.requires_grad]
    assert trained and set(grads) == set(trained)
    assert all(torch.isfinite(g).all() for g in grads.values()) and any(g.abs().sum() > 0 for g in grads.values())
    if adapter == "lora":  # same init, same data: the gradients agree within int8 rounding
        for name, grad in grads.items():
            expected = reference_grads[name]
            assert float((grad - expected).norm()) <= 0.1 * float(expected.norm()) + 1e-8, name


def test_block_swap_and_expert_offload_move_the_int8_tensors(tiny_model, tmp_path):
    from diffusers import WanTransformer3DModel

    from modules.modelSetup.memory import BlockSwapper, ExpertOffloader, store_base_weights

    config = TrainConfig.from_dict(train_config_dict(tmp_path, tmp_path, tmp_path, **INT8))
    experts = [WanTransformer3DModel.from_pretrained(tiny_model("t2v") / "transformer") for _ in range(2)]
    for transformer in experts:  # as two experts would be
        transformer.requires_grad_(False)
        store_base_weights(config, transformer, torch.float32)
    swapper = BlockSwapper(experts[0], 1, torch.device("cpu"))
    stored = [p for layer in int8_layers(experts[0].blocks[-1]).values() for p in (layer.qweight, layer.weight_scale)]
    assert stored and all(id(p) in swapper.swapped_parameters() for p in stored)
    offloader = ExpertOffloader(experts, torch.device("cpu"), swapper.swapped_parameters())
    moved = {id(param) for pairs in offloader.host for param, _ in pairs}
    second = [p for layer in int8_layers(experts[1]).values() for p in (layer.qweight, layer.weight_scale)]
    assert len(second) == 42 and all(id(p) in moved for p in second)
    swapper.remove()
    offloader.remove()


@pytest.mark.parametrize(("options", "key"), [
    ({**INT8, "base_loras": [{"path": "speed.safetensors"}]}, "base_loras"),
    ({**INT8, "training_method": "FINE_TUNE", "output_model_format": "DIFFUSERS"}, "base_weight_format"),
])
def test_config_refuses_what_an_int8_base_cannot_do_in_one_line(options, key, tmp_path):
    with pytest.raises(ConfigError, match=f"config key '{key}'") as error:
        TrainConfig.from_dict(train_config_dict(tmp_path, tmp_path, tmp_path, **options))
    assert "\n" not in str(error.value)


def test_fp8_and_fp8_scaled_store_float8_with_their_scales(tmp_path):
    older = TrainConfig.from_dict(train_config_dict(tmp_path, tmp_path, tmp_path, base_weight_format="FP8"))
    newer = TrainConfig.from_dict(train_config_dict(tmp_path, tmp_path, tmp_path, base_weight_format="FP8_SCALED"))
    assert older.fp8_base() and older.fp8_scale_mode().name == "NONE" and not older.int8_base()
    assert newer.fp8_base() and newer.fp8_scale_mode().name == "TENSOR"


def test_the_estimate_counts_int8_weights_and_their_row_scales(tmp_path):
    from modules.modelSetup.memory_estimate import GIB, estimate, transformer_counts
    from tests.fixtures.wan_configs import TRANSFORMER_14B, write_config_folder

    folder = write_config_folder(tmp_path / "wan-14b", TRANSFORMER_14B)
    common = {"base_model_name": str(folder), "resolution": [480, 832], "frames": 81,
              "transformer_dtype": "BFLOAT16", "train_dtype": "BFLOAT16"}
    weights = {fmt: estimate(TrainConfig.from_dict({**common, "base_weight_format": fmt}), gpu_gib=24)
               .phases["training"]["transformer_weights"] for fmt in ("BF16", "INT8_CONVROT")}
    count = transformer_counts(TRANSFORMER_14B)
    saved = count["block_linear"] * 1 - 4 * count["block_linear_rows"]  # 2 bytes -> 1, plus a float32 per row
    assert weights["BF16"] - weights["INT8_CONVROT"] == pytest.approx(saved / GIB)
