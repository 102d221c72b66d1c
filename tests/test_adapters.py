"""LoHa, LoKr and DoRA (issue #12, deliverable 1): they train (LoRA method and E2V), back up and resume
bit-identically, save files whose every key ComfyUI's loader consumes and whose change is ComfyUI's formula of
the trained peft weights, load back for continued training, in our sampler and through merge_lora.py.

ComfyUI is re-stated here from its code (Comfy-Org/ComfyUI at a125cd84), not imported: the key suffixes its
loader consumes (`comfy_loaded_keys`) and the weight it computes from them (`comfy_weight`).
"""
from __future__ import annotations

import pytest
import torch
from diffusers import WanTransformer3DModel
from safetensors import safe_open

from modules.adapter.registry import adapter_for
from modules.config.train_config import SampleConfig, TrainConfig
from modules.modelFile.lora_formats import (
    COMFY_LORA,
    DIFFUSERS_LORA,
    LoRAFormatError,
    apply_to_peft,
    extract_from_peft,
    from_state_dict,
    to_state_dict,
)
from modules.modelFile.lora_reading import load_lora_file
from modules.modelFile.original_keys import original_key
from modules.modelLoader.lora_inference import attach_lora_for_inference
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.modelSaver.merged_model import DIFFUSERS, MergeInputs, merge_lora_into_model
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import e2v_on_t2v_config, stop_and_resume, train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.test_default_output import comfy_module_names

ADAPTERS = {"loha": {"peft_type": "LOHA"}, "lokr": {"peft_type": "LOKR"}, "dora": {"lora_decompose": True}}
# What trains, by peft's parameter names (the `<kind>` of `...<module>.<kind>.default[.weight]`).
TRAINED_KINDS = {"loha": {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"},
                 "lokr": {"lokr_w1", "lokr_w2"},  # rank 4 on the tiny 32/64-wide layers: both factors whole
                 "dora": {"lora_A", "lora_B", "lora_magnitude_vector"}}
# Random adapters for the codec tests: each LoKr case stores the factors differently.
CODEC_CASES = {"loha": {"peft_type": "LOHA"},
               "lokr whole": {"peft_type": "LOKR"},
               "lokr decomposed": {"peft_type": "LOKR", "lora_rank": 2},
               "lokr factor 2": {"peft_type": "LOKR", "lokr_factor": 2},
               "dora": {"lora_decompose": True}}


# --- ComfyUI, re-stated ------------------------------------------------------------------------------------------
def comfy_loaded_keys(state: dict[str, torch.Tensor], modules: set[str]) -> set[str]:
    """The keys comfy/lora.py `load_lora` marks loaded, for `to_load` = `diffusion_model.<module>` of every Wan
    module (`model_lora_keys_unet`): `.alpha` and `.dora_scale` (load_lora itself), then each adapter's `load`:
    LoRAAdapter (weight_adapter/lora.py; our files use its `lora_up.weight` form), LoHaAdapter (loha.py: hada_w1_a
    decides, then all four, t1/t2 when hada_t1 is there), LoKrAdapter (lokr.py: each of its seven names)."""
    loaded = set()
    for module in modules:
        x = f"diffusion_model.{module}"
        present = {suffix for suffix in ("alpha", "dora_scale") if f"{x}.{suffix}" in state}
        if f"{x}.lora_up.weight" in state:
            present |= {"lora_up.weight", "lora_down.weight"} | ({"lora_mid.weight"} & _suffixes(state, x))
        if f"{x}.hada_w1_a" in state:
            present |= {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"}
            present |= {"hada_t1", "hada_t2"} if f"{x}.hada_t1" in state else set()
        present |= {"lokr_w1", "lokr_w2", "lokr_w1_a", "lokr_w1_b", "lokr_w2_a", "lokr_w2_b", "lokr_t2"} & _suffixes(state, x)
        for suffix in present:
            assert f"{x}.{suffix}" in state, f"ComfyUI reads {x}.{suffix} (KeyError there)"
        loaded |= {f"{x}.{suffix}" for suffix in present}
    return loaded


def _suffixes(state: dict[str, torch.Tensor], module_key: str) -> set[str]:
    return {key[len(module_key) + 1:] for key in state if key.startswith(module_key + ".")}


def comfy_weight(weight: torch.Tensor, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """ComfyUI's patched float32 weight at strength 1 (ModelPatcher patches in float32): `calculate_weight` of
    weight_adapter/lora.py (alpha / lora_down rows), loha.py (alpha / hada_w1_b rows), lokr.py (alpha / the rank
    of a factor stored as a product, the w2 one winning; 1.0 when both are whole), and `weight_decompose` of
    base.py for a dora_scale (output axis: the base weight's row norms; input axis: the merged weight's columns)."""
    t = {key: value.float() for key, value in tensors.items()}
    alpha = t["alpha"].item() if "alpha" in t else None
    dim = None
    if "lora_up.weight" in t:
        diff, dim = t["lora_up.weight"] @ t["lora_down.weight"], t["lora_down.weight"].shape[0]
    elif "hada_w1_a" in t:
        diff = (t["hada_w1_a"] @ t["hada_w1_b"]) * (t["hada_w2_a"] @ t["hada_w2_b"])
        dim = t["hada_w1_b"].shape[0]
    else:
        factors = []
        for which in ("w1", "w2"):
            if f"lokr_{which}" in t:
                factors.append(t[f"lokr_{which}"])
            else:
                factors.append(t[f"lokr_{which}_a"] @ t[f"lokr_{which}_b"])
                dim = t[f"lokr_{which}_b"].shape[0]
        diff = torch.kron(*factors)
    scale = alpha / dim if alpha is not None and dim is not None else 1.0
    diff = diff.reshape(weight.shape)
    if "dora_scale" not in t:
        return weight + scale * diff
    merged = weight + diff * scale
    if t["dora_scale"].shape[0] == merged.shape[0]:
        norm = weight.reshape(weight.shape[0], -1).norm(dim=1, keepdim=True)
    else:
        norm = merged.transpose(0, 1).reshape(merged.shape[1], -1).norm(dim=1, keepdim=True).transpose(0, 1)
    return merged * (t["dora_scale"] / (norm + torch.finfo(weight.dtype).eps))


def file_modules(state: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """Wan module name -> {suffix: tensor} of a COMFY_LORA state dict (module names hold no adapter suffix)."""
    suffixes = ("lora_up.weight", "lora_down.weight", "alpha", "dora_scale", "hada_", "lokr_")
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        rest = key.removeprefix("diffusion_model.")
        cut = min(rest.find("." + s) for s in suffixes if "." + s in rest)
        out.setdefault(rest[:cut], {})[rest[cut + 1:]] = value
    return out


def peft_weight(module: torch.nn.Module) -> torch.Tensor:
    """The weight a peft layer computes with (its forward on the identity, less the bias), float32."""
    base = module.get_base_layer()
    eye = torch.eye(base.in_features)
    with torch.no_grad():
        out = module(eye) - (base.bias if base.bias is not None else 0)
    return out.T


def max_formula_error(transformer: torch.nn.Module, state: dict[str, torch.Tensor]) -> float:
    """The largest |ComfyUI's weight from the file - peft's weight| over every module in the file."""
    errors = []
    for wan_name, tensors in file_modules(state).items():
        module = transformer.get_submodule(original_to_diffusers(transformer)[wan_name])
        expected = peft_weight(module)
        errors.append((comfy_weight(module.get_base_layer().weight.detach().float(), tensors) - expected).abs().max())
    return float(max(errors))


def original_to_diffusers(transformer: torch.nn.Module) -> dict[str, str]:
    """Wan original module name -> diffusers module path, for the adapted modules."""
    names = {}
    for name, module in transformer.named_modules():
        if hasattr(module, "get_base_layer"):
            names[original_key(f"{name}.weight").removesuffix(".weight")] = name
    return names


# --- codec: random adapters on the tiny transformer ---------------------------------------------------------------
def injected(model_dir, work, random: bool = True, **options) -> torch.nn.Module:
    """The tiny transformer with the adapter `options` choose on every block Linear; weights random (else
    peft's initial ones)."""
    config = TrainConfig.from_dict(train_config_dict(model_dir, work, work, **options))
    transformer = WanTransformer3DModel.from_pretrained(model_dir / "transformer")
    spec = adapter_for(config.peft_type, config.lora_decompose)
    targets = [n for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith("blocks.")]
    transformer.add_adapter(spec.peft_config(config, targets), adapter_name="default")
    if not random:
        return transformer
    generator = torch.Generator().manual_seed(0)
    params = dict(transformer.named_parameters())
    with torch.no_grad():
        for name in sorted(spec.trainable_names(transformer, "default")):
            params[name].copy_(torch.randn(params[name].shape, generator=generator) * 0.2 + (1.0 if "magnitude" in name else 0))
    return transformer


@pytest.mark.parametrize("case", CODEC_CASES)
def test_the_comfy_file_of_random_adapters_is_comfyuis_formula_of_peft(case, tiny_model, tmp_path):
    transformer = injected(tiny_model("i2v"), tmp_path, lora_alpha=3, **CODEC_CASES[case])  # alpha != rank
    state = to_state_dict(extract_from_peft(transformer), COMFY_LORA)
    assert max_formula_error(transformer, state) < 1e-5


@pytest.mark.parametrize("case", CODEC_CASES)
def test_every_key_of_the_file_is_one_comfyuis_loader_consumes(case, tiny_model, tmp_path):
    transformer = injected(tiny_model("i2v"), tmp_path, **CODEC_CASES[case])
    state = to_state_dict(extract_from_peft(transformer), COMFY_LORA)
    modules = comfy_module_names(WanTransformer3DModel.from_pretrained(tiny_model("i2v") / "transformer"))
    assert comfy_loaded_keys(state, modules) == set(state)


@pytest.mark.parametrize("case", CODEC_CASES)
def test_the_file_loads_back_into_a_fresh_adapter_with_the_same_weights(case, tiny_model, tmp_path):
    trained = injected(tiny_model("i2v"), tmp_path, lora_alpha=3, **CODEC_CASES[case])
    fresh = injected(tiny_model("i2v"), tmp_path, random=False, lora_alpha=3, **CODEC_CASES[case])
    expected, actual = dict(trained.named_parameters()), dict(fresh.named_parameters())  # updated in place below
    assert not all(torch.equal(actual[k], expected[k]) for k in expected)
    apply_to_peft(fresh, from_state_dict(to_state_dict(extract_from_peft(trained), COMFY_LORA)))
    assert all(torch.allclose(actual[k], expected[k], rtol=1e-5, atol=1e-6) for k in expected)


def test_dora_scale_is_written_in_float32_whatever_output_dtype(tiny_model, tmp_path):
    """DoRA's magnitudes rounded to bf16 cost 3-9 % of the trained change in ComfyUI (its norm of the base weight
    is float32): the file keeps dora_scale in float32 (a few KB) while lora_up / lora_down take output_dtype."""
    from safetensors.torch import load_file

    from modules.modelSaver.WanLoRASaver import save_lora

    transformer = injected(tiny_model("i2v"), tmp_path, **CODEC_CASES["dora"])
    weights = extract_from_peft(transformer)
    exact = {k: v for k, v in to_state_dict(weights, COMFY_LORA).items() if k.endswith(".dora_scale")}
    assert exact and all(v.dtype == torch.float32 for v in exact.values())
    for dtype in (torch.bfloat16, torch.float16):
        save_lora(weights, tmp_path / "dora.safetensors", COMFY_LORA, dtype=dtype)
        state = load_file(str(tmp_path / "dora.safetensors"))
        assert {v.dtype for k, v in state.items() if k.endswith("lora_up.weight")} == {dtype}
        assert all(torch.equal(state[k], v) for k, v in exact.items())  # float32, not rounded through bf16
        assert {v.dtype for k, v in state.items() if k.endswith((".dora_scale", ".alpha"))} == {torch.float32}


@pytest.mark.parametrize("case", ["loha", "dora"])
def test_diffusers_lora_refuses_other_types_in_one_line(case, tiny_model, tmp_path):
    weights = extract_from_peft(injected(tiny_model("t2v"), tmp_path, **CODEC_CASES[case]))
    with pytest.raises(LoRAFormatError, match="DIFFUSERS_LORA cannot hold a (LoHa|DoRA) adapter") as error:
        to_state_dict(weights, DIFFUSERS_LORA)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("options, key", [({"peft_type": "LOHA", "lora_decompose": True}, "lora_decompose"),
                                          ({"peft_type": "LOKR", "output_model_format": "DIFFUSERS_LORA"},
                                           "output_model_format"),
                                          ({"peft_type": "LOKR", "lokr_factor": 0}, "lokr_factor"),
                                          ({"peft_type": "LOHA", "lora_dropout": 0.1}, "lora_dropout"),
                                          ({"lora_decompose": True, "base_weight_format": "FP8"}, "lora_decompose")])
def test_config_refuses_what_an_adapter_type_cannot_do(options, key, tmp_path):
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        TrainConfig.from_dict(train_config_dict(tmp_path, tmp_path, tmp_path, **options))


# --- training --------------------------------------------------------------------------------------------------
def make_trainer(tiny_model, video_dataset, work, adapter, **overrides) -> GenericTrainer:
    values = train_config_dict(tiny_model("t2v"), video_dataset, work, epochs=1, learning_rate=1e-2,
                               output_dtype="FLOAT32", **ADAPTERS[adapter])  # 3 steps; exact files
    return GenericTrainer(TrainConfig.from_dict({**values, **overrides}))


def trained_state(trainer: GenericTrainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.setup.trainable_state().items()}


@pytest.fixture(scope="module")
def trained(tiny_model, video_dataset, tmp_path_factory):
    """adapter -> (its trainer after 3 steps and `end()`, the COMFY_LORA file it wrote); one run per adapter."""
    runs = {}

    def run(adapter: str):
        if adapter not in runs:
            trainer = make_trainer(tiny_model, video_dataset, tmp_path_factory.mktemp(adapter), adapter)
            trainer.start()
            trainer.train()
            (path,) = trainer.end()
            runs[adapter] = trainer, path
        return runs[adapter]

    return run


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_what_trains_is_the_weights_peft_names_for_the_type(adapter, trained):
    trainer, _ = trained(adapter)
    kinds = {key.split(".")[-3] if key.endswith(".weight") else key.split(".")[-2] for key in trained_state(trainer)}
    assert kinds == TRAINED_KINDS[adapter]
    assert trainer.progress.global_step == 3


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_trained_file_has_only_keys_comfyui_consumes_and_its_formula(adapter, trained, tiny_model):
    trainer, path = trained(adapter)
    with safe_open(str(path), framework="pt") as f:
        state, header = {key: f.get_tensor(key) for key in f.keys()}, f.metadata()
    modules = comfy_module_names(WanTransformer3DModel.from_pretrained(tiny_model("t2v") / "transformer"))
    assert comfy_loaded_keys(state, modules) == set(state)
    assert header["wantrainer.adapter"] == adapter
    assert max_formula_error(trainer.model.transformer, state) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_resume_from_a_backup_is_bit_identical(adapter, trained, tiny_model, video_dataset, tmp_path):
    expected = trained_state(trained(adapter)[0])
    resumed = stop_and_resume(lambda **o: make_trainer(tiny_model, video_dataset, tmp_path, adapter, **o), step=2)
    resumed.train()
    actual = trained_state(resumed)
    assert actual.keys() == expected.keys()
    assert all(torch.equal(actual[k], expected[k]) for k in expected)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_lora_weight_path_continues_from_the_same_weights(adapter, trained, tiny_model, video_dataset, tmp_path):
    first, path = trained(adapter)
    second = make_trainer(tiny_model, video_dataset, tmp_path, adapter, lora_weight_path=str(path))
    second.start()
    saved, loaded = trained_state(first), trained_state(second)
    assert loaded.keys() == saved.keys()
    assert all(torch.allclose(loaded[k], saved[k], rtol=1e-5, atol=1e-6) for k in saved)


def test_a_file_of_another_type_is_refused_naming_the_key(trained, tiny_model, video_dataset, tmp_path):
    _, path = trained("loha")
    trainer = make_trainer(tiny_model, video_dataset, tmp_path, "lokr", lora_weight_path=str(path))
    with pytest.raises(UserError, match="config key 'lora_weight_path'.*holds a LoHa adapter.*LoKr"):
        trainer.start()


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_our_sampler_applies_the_file(adapter, trained, tiny_model):
    _, path = trained(adapter)
    sample = SampleConfig.from_dict({"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 2,
                                     "seed": 3}, "sample")
    base = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu"))
    before = WanModelSampler(base).generate(sample, show_progress=False)
    model = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu"))
    attach_lora_for_inference(model, path)
    with safe_open(str(path), framework="pt") as f:
        modules = file_modules({key: f.get_tensor(key) for key in f.keys()})
    name = sorted(load_lora_file(path)[0].layers)[0]
    expected = comfy_weight(base.transformer.get_submodule(name).weight.float(), modules[original_key(f"{name}.weight")[:-7]])
    assert torch.allclose(model.transformer.get_submodule(name).weight, expected, atol=1e-6)
    assert (WanModelSampler(model).generate(sample, show_progress=False) != before).any()


def test_merge_lora_of_a_loha_file_is_base_plus_comfyuis_delta(trained, tiny_model, tmp_path):
    _, path = trained("loha")
    out = merge_lora_into_model(MergeInputs(tiny_model("t2v"), path), tmp_path / "merged", DIFFUSERS)[0]
    merged = WanTransformer3DModel.from_pretrained(out / "transformer").state_dict()  # diffusers loads it
    base = WanTransformer3DModel.from_pretrained(tiny_model("t2v") / "transformer").state_dict()
    with safe_open(str(path), framework="pt") as f:
        modules = file_modules({key: f.get_tensor(key) for key in f.keys()})
    changed = {f"{name}.weight" for name in load_lora_file(path)[0].layers}
    assert len(changed) == len(modules)
    for key, weight in merged.items():
        tensors = modules.get(original_key(key)[:-7]) if key in changed else None
        expected = base[key] if tensors is None else comfy_weight(base[key].float(), tensors)
        assert torch.allclose(weight.float(), expected, atol=1e-6), key


@pytest.fixture
def e2v_trainer(tiny_model, tmp_path):
    """(adapter, work folder, overrides) -> an E2V trainer on the T2V base (expanded to the I2V layout)."""
    def make(adapter: str, work: str, **overrides) -> GenericTrainer:
        values = e2v_on_t2v_config(tiny_model, tmp_path / work, epochs=2, output_dtype="FLOAT32",
                                   **ADAPTERS[adapter], **overrides)
        return GenericTrainer(TrainConfig.from_dict(values))

    return make


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_e2v_on_a_t2v_base_trains_saves_continues_and_resumes_bit_identically(adapter, e2v_trainer):
    first = e2v_trainer(adapter, "a")
    first.start()
    first.train()
    saved = trained_state(first)
    written = first.end()
    assert any(path.name.endswith("-i2v.safetensors") for path in written)  # the I2V export merged the adapter
    adapter_kinds = set().union(*TRAINED_KINDS.values())
    kinds = {part for key in saved for part in key.split(".") if part in adapter_kinds}
    assert kinds == TRAINED_KINDS[adapter]
    assert any("patch_embedding" in key for key in saved)  # the expanded input trains fully
    second = e2v_trainer(adapter, "b", lora_weight_path=str(written[0]))
    second.start()
    loaded = trained_state(second)
    assert all(torch.allclose(loaded[k], saved[k], rtol=1e-5, atol=1e-6) for k in saved)

    resumed = stop_and_resume(lambda **o: e2v_trainer(adapter, "stopped", **o), step=1)
    resumed.train()
    actual = trained_state(resumed)
    assert actual.keys() == saved.keys()
    assert all(torch.equal(actual[k], saved[k]) for k in saved)
