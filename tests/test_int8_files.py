"""ComfyUI's int8 ConvRot Wan files (`weight` I8, `weight_scale` F32 [N, 1], `comfy_quant` U8 JSON per Linear),
written here with comfy-kitchen's own quantiser: read as stored for base_weight_format INT8_CONVROT (no
full-precision copy), dequantised as ComfyUI does otherwise; training on one equals training on the bf16 base
quantised at load, and the LoRA it saves loads in ComfyUI with every key consumed."""
from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors import safe_open

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSetup.int8_convrot import group_size_for
from modules.modelSetup.int8_storage import int8_layers
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.errors import UserError
from tests.conftest import stop_and_resume, train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.test_adapters import comfy_loaded_keys
from tests.test_model_loader import to_original_names
from tests.test_single_file_models import write

CPU = torch.device("cpu")
PREFIX = "model.diffusion_model."
# the block Linears ComfyUI's int8 Wan files quantise (attention q k v o, cross-attention, FFN)
BLOCK_LINEAR = re.compile(r"blocks\.\d+\.(attn[12]\.(to_[qkv]|to_out\.0)|ffn\.net\.(0\.proj|2))$")


def comfy_int8_file(state: dict[str, torch.Tensor], path, marker=None) -> tuple[str, dict]:
    """`state` (diffusers names) as ComfyUI's int8 ConvRot file, quantised by comfy-kitchen (its eager backend);
    returns the path and {diffusers layer: (int8 weight, scale, group)}."""
    ck = pytest.importorskip("comfy_kitchen")
    from comfy_kitchen.backends.eager.quantization import quantize_int8_convrot_weight

    quantised = {}
    with ck.use_backend("eager"):
        for name, tensor in state.items():
            layer = name.removesuffix(".weight")
            if name.endswith(".weight") and BLOCK_LINEAR.search(layer):
                group = group_size_for(tensor.shape[1])
                quantised[layer] = (*quantize_int8_convrot_weight(tensor.float(), group), group)
    rows = {f"{layer}.weight": q for layer, (q, _, _) in quantised.items()}
    original = to_original_names({**state, **rows})
    out = {}
    for name, tensor in original.items():  # named model.diffusion_model.<Wan's name>
        out[name] = tensor
        if tensor.dtype == torch.int8:
            layer = next(k for k, v in rows.items() if v is tensor).removesuffix(".weight")
            _, scale, group = quantised[layer]
            entry = marker or {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": group}
            stem = name.removesuffix(".weight")
            out[stem + ".weight_scale"] = scale
            out[stem + ".comfy_quant"] = torch.tensor(list(json.dumps(entry).encode()), dtype=torch.uint8)
    return write(out, path), quantised


@pytest.fixture(scope="module")
def int8_file(tiny_model, tmp_path_factory):
    state = WanModelLoader().load(str(tiny_model("t2v")), CPU).transformer.state_dict()
    return comfy_int8_file(state, tmp_path_factory.mktemp("int8") / "wan_t2v_int8_convrot.safetensors")


def test_the_file_loads_as_stored_without_a_full_precision_copy(tiny_model, int8_file):
    path, quantised = int8_file
    transformer = WanModelLoader().load(str(tiny_model("t2v")), CPU, transformer_override=path,
                                        keep_int8=True).transformer
    layers = int8_layers(transformer)
    assert layers.keys() == quantised.keys() and len(layers) == 20  # 2 blocks x (4 + 4 + 2)
    for name, (q, scale, group) in quantised.items():
        assert torch.equal(layers[name].qweight, q) and torch.equal(layers[name].weight_scale, scale)
        assert layers[name].group == group
    names = dict(transformer.named_parameters())
    assert not any(f"{layer}.weight" in names for layer in layers)
    assert not any(p.is_meta for p in transformer.parameters())


def test_without_int8_the_file_is_dequantised_as_comfyui_does(tiny_model, int8_file):
    from comfy_kitchen.backends.eager.quantization import dequantize_int8_convrot_weight

    path, quantised = int8_file
    transformer = WanModelLoader().load(str(tiny_model("t2v")), CPU, transformer_override=path).transformer
    assert not int8_layers(transformer)
    for name, (q, scale, group) in quantised.items():
        assert torch.equal(transformer.get_submodule(name).weight, dequantize_int8_convrot_weight(q, scale, group))


def test_a_quantisation_format_we_cannot_read_is_one_line(tiny_model, tmp_path):
    state = WanModelLoader().load(str(tiny_model("t2v")), CPU).transformer.state_dict()
    path, _ = comfy_int8_file(state, tmp_path / "nvfp4.safetensors", marker={"format": "nvfp4"})
    with pytest.raises(UserError, match="config key 'transformer_override'.*nvfp4") as error:
        WanModelLoader().load(str(tiny_model("t2v")), CPU, transformer_override=path, keep_int8=True)
    assert "\n" not in str(error.value)


def test_training_on_the_file_is_training_on_the_base_quantised_at_load(tiny_model, video_dataset, tmp_path,
                                                                         int8_file):
    path, quantised = int8_file
    losses, grads = [], []
    for name, override in (("folder", ""), ("file", path)):
        values = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path / name, epochs=1,
                                   base_weight_format="INT8_CONVROT", transformer_override=override)
        trainer = GenericTrainer(TrainConfig.from_dict(values))
        trainer.start()
        random = StepRandom.for_micro_step(0, 0, 2)
        output = trainer.setup.predict(trainer.data.assemble(trainer.data.load_batch([0, 1], 0), random), random)
        output.loss.backward()
        losses.append(float(output.loss.detach()))
        grads.append({n: p.grad for n, p in trainer.model.transformer.named_parameters() if p.grad is not None})
    # our quantiser is comfy-kitchen's, bit for bit: the same int8 base, the same step
    assert losses[0] == losses[1] and grads[0].keys() == grads[1].keys()
    assert all(torch.equal(grads[0][k], grads[1][k]) for k in grads[0])
    (saved,) = trainer.end()
    with safe_open(path, framework="pt") as f:
        names = list(f.keys())
    modules = {k.removeprefix(PREFIX).removesuffix(".weight") for k in names if k.endswith(".weight")}
    with safe_open(str(saved), framework="pt") as f:
        lora = {k: f.get_tensor(k) for k in f.keys()}
    assert comfy_loaded_keys(lora, modules) == set(lora)  # ComfyUI's LoRA loader: 0 keys left unloaded
    int8_modules = {k.removeprefix(PREFIX).removesuffix(".comfy_quant") for k in names if k.endswith(".comfy_quant")}
    assert int8_modules <= {k.removeprefix("diffusion_model.").rsplit(".lora_", 1)[0] for k in lora}


def make_trainer(tiny_model, video_dataset, work, file, **overrides) -> GenericTrainer:
    values = train_config_dict(tiny_model("t2v"), video_dataset, work, epochs=1, output_dtype="FLOAT32",
                               base_weight_format="INT8_CONVROT", transformer_override=file)
    return GenericTrainer(TrainConfig.from_dict({**values, **overrides}))


def test_resume_is_bit_identical_and_another_base_is_refused_in_one_line(tiny_model, video_dataset, tmp_path,
                                                                          int8_file):
    path, _ = int8_file
    full = make_trainer(tiny_model, video_dataset, tmp_path / "full", path)
    full.start()
    full.train()
    expected = {k: v.clone() for k, v in full.setup.trainable_state().items()}
    stopped = tmp_path / "stopped"
    resumed = stop_and_resume(lambda **o: make_trainer(tiny_model, video_dataset, stopped, path, **o), step=2)
    resumed.train()
    actual = resumed.setup.trainable_state()
    assert actual.keys() == expected.keys() and all(torch.equal(actual[k], expected[k]) for k in expected)
    # the same config keys on another int8 file (its weights 1 % larger): the backup's base fingerprint differs
    state = {k: v * 1.01 for k, v in WanModelLoader().load(str(tiny_model("t2v")), CPU).transformer.state_dict().items()}
    other, _ = comfy_int8_file(state, tmp_path / "other.safetensors")
    cases = [({"transformer_override": other}, "another quantised base"),
             ({"base_weight_format": "BF16"}, 'base_weight_format: "INT8_CONVROT" -> "BF16"')]
    for overrides, reason in cases:
        refused = make_trainer(tiny_model, video_dataset, stopped, path, continue_last_backup=True,
                               resume_changed_config=True, **overrides)
        with pytest.raises(UserError, match=reason) as error:
            refused.start()
        assert "\n" not in str(error.value)
