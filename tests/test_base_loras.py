"""LoRAs merged into the frozen base at load time (issue #28, `base_loras` / `--base-lora`): every input format
merges to the project's adapter math and to ComfyUI's weights, unknown keys are one warning, files are checked
before a model loads, training on base + LoRA equals training on the merge_lora.py folder bit for bit, the trained
LoRA's header records the stack, and a sample with --base-lora equals a sample of the merged folder.

ComfyUI is re-stated from its code (Comfy-Org/ComfyUI at a125cd84): `comfy_weight` (tests/test_adapters.py) is
weight_adapter/lora.py, loha.py, lokr.py `calculate_weight` and base.py `weight_decompose`; `comfy_diff` is
comfy/lora.py `load_lora` (``<x>.diff`` patches the weight, ``<x>.diff_b`` the bias of module x) with
`calculate_weight`'s "diff" branch, ``weight += strength * diff``, on the float32 copy ModelPatcher patches.
"""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from diffusers import WanTransformer3DModel
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from modules.config.train_config import BaseLoRAConfig, TrainConfig
from modules.model.detection import detect_variant
from modules.modelFile.base_loras import (
    check_base_loras,
    header_stack,
    merge_stack,
    parse_base_lora,
    read_base_lora,
)
from modules.modelFile.lora_checks import check_lora_file
from modules.modelFile.lora_formats import COMFY_LORA, DIFFUSERS_LORA, extract_from_peft
from modules.modelFile.lora_header import BASE_LORAS_KEY
from modules.modelFile.original_keys import original_key
from modules.modelSaver.merged_model import DIFFUSERS, MergeInputs, merge_lora_into_model
from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.enum import WanExpert
from modules.util.errors import UserError
from tests.comfyui_nodes import problems
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.script_runner import run_script
from tests.test_adapters import comfy_weight, file_modules, injected

TYPES = {"lora": {}, "loha": {"peft_type": "LOHA"}, "lokr": {"peft_type": "LOKR", "lora_rank": 2},
         "dora": {"lora_decompose": True}}


def base_transformer(model_dir) -> WanTransformer3DModel:
    return WanTransformer3DModel.from_pretrained(model_dir / "transformer")


def random_file(kind: str, model_dir, folder, fmt: str = COMFY_LORA):
    """(file, neutral weights) of a random adapter of `kind` on every block Linear of the tiny T2V transformer."""
    weights = extract_from_peft(injected(model_dir, folder, **TYPES[kind]), "default")
    path = folder / f"{kind}-{fmt}.safetensors"
    save_lora(weights, path, fmt, lora_metadata("wan-2.1-t2v"))
    return path, weights


def as_musubi(comfy_file, folder):
    """The COMFY_LORA file under musubi-tuner / sd-scripts names: ``lora_unet_blocks_0_self_attn_q.<suffix>``."""
    with safe_open(str(comfy_file), framework="pt") as f:
        state = {key: f.get_tensor(key) for key in f.keys()}
    renamed = {f"lora_unet_{module.replace('.', '_')}.{suffix}": tensor
               for module, tensors in file_modules(state).items() for suffix, tensor in tensors.items()}
    path = folder / "musubi.safetensors"
    save_file(renamed, str(path))
    return path


def merged_with(model_dir, *stack: tuple[object, float]) -> dict[str, torch.Tensor]:
    transformer = base_transformer(model_dir)
    merge_stack(transformer, [(read_base_lora(str(path)), strength) for path, strength in stack])
    return transformer.state_dict()


# --- formats: the project's adapter math and ComfyUI's ---------------------------------------------------------
@pytest.mark.parametrize("kind, fmt", [("lora", "COMFY"), ("lora", "MUSUBI"), ("lora", "DIFFUSERS"),
                                       ("loha", "COMFY"), ("lokr", "COMFY"), ("lokr", "MUSUBI"), ("dora", "COMFY")])
def test_every_format_merges_to_the_adapter_math_and_comfy_files_to_comfyuis_weights(kind, fmt, tiny_model, tmp_path):
    model_dir = tiny_model("t2v")
    path, weights = random_file(kind, model_dir, tmp_path, DIFFUSERS_LORA if fmt == "DIFFUSERS" else COMFY_LORA)
    comfy_modules = file_modules(load_file(str(path))) if fmt == "COMFY" else {}
    if fmt == "MUSUBI":
        path = as_musubi(path, tmp_path)
    strength = 1.0 if fmt == "COMFY" else 0.7  # comfy_weight is ComfyUI's weight at strength 1
    merged = merged_with(model_dir, (path, strength))
    base = base_transformer(model_dir).state_dict()
    assert len(weights.layers) == 2 * 10  # every block Linear of both tiny blocks
    for key, value in base.items():
        layer = weights.layers.get(key.removesuffix(".weight")) if key.endswith(".weight") else None
        expected = value if layer is None else weights.spec.merged_weight(value.float().clone(), layer, strength)
        if fmt == "DIFFUSERS":  # alpha is baked into lora_B and taken out again: float32 rounding
            assert torch.allclose(merged[key], expected, rtol=0, atol=1e-6), key
        else:
            assert torch.equal(merged[key], expected), key
        if comfy_modules:
            tensors = comfy_modules.get(original_key(key)[:-len(".weight")]) if layer is not None else None
            comfy = value if tensors is None else comfy_weight(value.float(), tensors)
            assert torch.allclose(merged[key], comfy, rtol=0, atol=1e-6), key


def comfy_diff(weight: torch.Tensor, diff: torch.Tensor, strength: float) -> torch.Tensor:
    return weight.float() + strength * diff.float()


DIFFS = (("blocks.0.self_attn.q.diff_b", "blocks.0.attn1.to_q.bias"),
         ("blocks.1.ffn.2.diff_b", "blocks.1.ffn.net.2.bias"),
         ("blocks.0.cross_attn.norm_k.diff", "blocks.0.attn2.norm_k.weight"),
         ("blocks.1.modulation.diff", "blocks.1.scale_shift_table"))  # ComfyUI keys a non-.weight parameter whole


def lightning_like(path, base: dict[str, torch.Tensor], tmp_path):
    """A LoRA file as extracted distillation LoRAs (lightx2v) come: lora_down/up/alpha, ``.diff_b`` of the biases,
    ``.diff`` of a norm, and the per-block ``diff_m`` ComfyUI does not load."""
    state = load_file(str(path))
    g = torch.Generator().manual_seed(5)
    for key, name in DIFFS:
        state[f"diffusion_model.{key}"] = torch.randn(base[name].shape, generator=g)
    for block in range(2):
        state[f"diffusion_model.blocks.{block}.diff_m"] = torch.randn(base[f"blocks.{block}.scale_shift_table"].shape)
    out = tmp_path / "lightning.safetensors"
    save_file(state, str(out))
    return out, state


def test_diff_and_diff_b_merge_as_comfyui_and_unknown_keys_are_one_counted_line(tiny_model, tmp_path, caplog):
    model_dir = tiny_model("t2v")
    lora, _ = random_file("lora", model_dir, tmp_path)
    base = base_transformer(model_dir).state_dict()
    path, state = lightning_like(lora, base, tmp_path)
    with caplog.at_level(logging.WARNING, logger="modules.modelFile.base_loras"):
        merged = merged_with(model_dir, (path, 0.5))
    for key, name in DIFFS:
        assert torch.allclose(merged[name], comfy_diff(base[name], state[f"diffusion_model.{key}"], 0.5), atol=1e-6)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and str(path) in lines[0] and "2 key(s) left out" in lines[0], lines


def test_a_stack_is_applied_in_order_to_one_float32_copy(tiny_model, tmp_path):
    model_dir = tiny_model("t2v")
    first, _ = random_file("lora", model_dir, tmp_path)
    second, weights = random_file("loha", model_dir, tmp_path)
    merged = merged_with(model_dir, (first, 1.0), (second, 0.5))
    step = merged_with(model_dir, (first, 1.0))
    name = sorted(weights.layers)[0]
    expected = weights.spec.merged_weight(step[f"{name}.weight"].clone(), weights.layers[name], 0.5)
    assert torch.allclose(merged[f"{name}.weight"], expected, atol=1e-6)


def test_a_file_that_changes_nothing_of_the_model_is_refused(tiny_model, tmp_path):
    path = tmp_path / "other.safetensors"
    save_file({"diffusion_model.blocks.7.self_attn.q.lora_down.weight": torch.zeros(4, 64),
               "diffusion_model.blocks.7.self_attn.q.lora_up.weight": torch.zeros(64, 4)}, str(path))
    with pytest.raises(UserError, match="other.safetensors' changes none of this model's weights"):
        merged_with(tiny_model("t2v"), (path, 1.0))


# --- start-up checks --------------------------------------------------------------------------------------------
def test_parse_base_lora_reads_file_strength_and_expert():
    assert parse_base_lora("l.safetensors") == BaseLoRAConfig(path="l.safetensors")
    assert parse_base_lora("l.safetensors:0.5:low") == BaseLoRAConfig("l.safetensors", 0.5, WanExpert.LOW)
    assert parse_base_lora(r"C:\loras\l.safetensors:2") == BaseLoRAConfig(r"C:\loras\l.safetensors", 2.0)
    with pytest.raises(UserError, match="--base-lora 'l:x:high'"):
        parse_base_lora("l:x:high")


def test_a_missing_base_lora_stops_the_run_before_a_model_loads(tiny_model, video_dataset, tmp_path, monkeypatch):
    from modules.modelLoader.WanModelLoader import WanModelLoader

    monkeypatch.setattr(WanModelLoader, "load", lambda *a, **k: pytest.fail("a model loaded"))
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                                                     base_loras=[{"path": str(tmp_path / "no.safetensors")}]))
    with pytest.raises(UserError, match=r"base_loras\[0\]\.path"):
        GenericTrainer(config).start()


def test_an_expert_choice_on_a_one_transformer_model_is_refused(tiny_model, tmp_path):
    path, _ = random_file("lora", tiny_model("t2v"), tmp_path)
    with pytest.raises(UserError, match=r"base_loras\[0\]: expert is HIGH.*set it to BOTH"):
        check_base_loras([BaseLoRAConfig(str(path), 1.0, WanExpert.HIGH)], detect_variant(tiny_model("t2v")))


# --- training and sampling on the merged base -----------------------------------------------------------------
def trained_file(config: dict) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    trainer.train()
    path = trainer.end()[0]
    with safe_open(str(path), framework="pt") as f:
        return {key: f.get_tensor(key) for key in f.keys()}, dict(f.metadata())


@pytest.mark.slow
def test_training_on_base_plus_lora_equals_training_on_the_merge_lora_folder(tiny_model, video_dataset, tmp_path):
    model_dir = tiny_model("t2v")
    lora, _ = random_file("lora", model_dir, tmp_path)
    merged_dir = merge_lora_into_model(MergeInputs(model_dir, lora, strength=0.7), tmp_path / "merged", DIFFUSERS)[0]
    base_file = model_dir / "transformer" / "diffusion_pytorch_model.safetensors"
    base_bytes = base_file.read_bytes()
    on_stack, header = trained_file(train_config_dict(model_dir, video_dataset, tmp_path / "a", epochs=1,
                                                      base_loras=[{"path": str(lora), "strength": 0.7}]))
    assert base_file.read_bytes() == base_bytes  # merged in memory: the mmapped base file is never written
    on_folder, _ = trained_file(train_config_dict(merged_dir, video_dataset, tmp_path / "b", epochs=1))
    assert on_stack.keys() == on_folder.keys()
    assert all(torch.equal(on_stack[key], on_folder[key]) for key in on_stack)
    import hashlib

    stack = json.loads(header[BASE_LORAS_KEY])
    assert stack == [{"name": lora.name, "path": str(lora), "sha256": hashlib.sha256(lora.read_bytes()).hexdigest(),
                      "strength": 0.7}]


def test_the_headers_stack_is_found_beside_the_lora_and_a_missing_file_is_a_warning(tiny_model, tmp_path, caplog):
    model_dir = tiny_model("t2v")
    base_lora, _ = random_file("lora", model_dir, tmp_path)
    weights = extract_from_peft(injected(model_dir, tmp_path, **TYPES["loha"]), "default")
    trained = tmp_path / "trained.safetensors"
    records = [{"name": base_lora.name, "path": "/elsewhere/" + base_lora.name, "sha256": "", "strength": 0.8},
               {"name": "gone.safetensors", "path": "/elsewhere/gone.safetensors", "sha256": "", "strength": 1.0}]
    save_lora(weights, trained, COMFY_LORA, {**lora_metadata("wan-2.1-t2v"), BASE_LORAS_KEY: json.dumps(records)})
    variant = detect_variant(model_dir)
    with caplog.at_level(logging.WARNING, logger="modules.modelFile.base_loras"):
        entries = header_stack(check_lora_file(trained, variant), variant)
    assert entries == [BaseLoRAConfig(str(base_lora), 0.8)]
    assert any("gone.safetensors" in r.getMessage() and "sampling without it" in r.getMessage() for r in caplog.records)


def sample_strip(args: list[str], output) -> np.ndarray:
    result = run_script("sample.py", "--prompt", "a red circle", "--frames", "5", "--height", "32", "--width", "32",
                        "--steps", "2", "--cfg-scale", "1", "--seed", "3", "--device", "cpu", "--output", str(output),
                        *args)
    assert result.returncode == 0, result.stderr[-2000:]
    return np.asarray(Image.open(output.with_suffix(".png")))


def test_a_sample_with_base_lora_equals_a_sample_of_the_merged_folder(tiny_model, tmp_path, monkeypatch):
    model_dir = tiny_model("t2v")
    lora, _ = random_file("lora", model_dir, tmp_path)
    merged_dir = merge_lora_into_model(MergeInputs(model_dir, lora, strength=0.6), tmp_path / "merged", DIFFUSERS)[0]
    with_stack = sample_strip(["--model", str(model_dir), "--base-lora", f"{lora}:0.6"], tmp_path / "a.mp4")
    of_folder = sample_strip(["--model", str(merged_dir)], tmp_path / "b.mp4")
    plain = sample_strip(["--model", str(model_dir)], tmp_path / "c.mp4")
    assert np.array_equal(with_stack, of_folder)
    assert not np.array_equal(with_stack, plain)
    # sample.py writes the ComfyUI workflow beside the video: the stack in LoraLoaderModelOnly, ComfyUI's names
    workflow = json.loads((tmp_path / "a.workflow.json").read_text(encoding="utf-8"))
    assert problems(workflow) == []
    assert [(n["inputs"]["lora_name"], n["inputs"]["strength_model"]) for n in workflow.values()
            if n["class_type"] == "LoraLoaderModelOnly"] == [(lora.name, 0.6)]


def test_sample_overrides_replace_each_samples_own_settings():
    from modules.config.loading import load_train_config
    from modules.config.train_config import SampleConfig

    config = load_train_config(preset="#wan2.1 t2v 14B lora on lightning")
    sample = config.sample_overrides.apply(SampleConfig(prompt="a fox", steps=30, cfg_scale=6.0))
    assert (sample.prompt, sample.steps, sample.cfg_scale, sample.shift, sample.sampler) == ("a fox", 4, 1.0, 5.0, "euler")
    assert config.base_loras[0].path.endswith("lightx2v_cfg_step_distill_lora_rank32.safetensors")
    with pytest.raises(UserError, match="sample_overrides.steps' must be at least 1"):
        TrainConfig.from_dict({"sample_overrides": {"steps": 0}})


def test_cfg_1_samples_without_a_negative_pass(tiny_model):
    from modules.config.train_config import SampleConfig
    from modules.modelLoader.WanModelLoader import WanModelLoader
    from modules.modelSampler.WanModelSampler import WanModelSampler

    model = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu"))
    calls = []
    model.transformer.register_forward_hook(lambda *_: calls.append(1))
    for cfg_scale in (1.0, 5.0):
        sample = SampleConfig(prompt="a fox", negative_prompt="blur", frames=5, height=32, width=32, steps=2,
                              cfg_scale=cfg_scale)
        WanModelSampler(model).generate(sample, show_progress=False)
    assert len(calls) == 2 * 1 + 2 * 2  # two steps: one pass each at CFG 1, a negative pass too at CFG 5


def test_two_expert_models_take_each_entry_into_its_expert(tiny_model, tmp_path):
    from modules.modelFile.lora_header import read_stack, stack_header
    from modules.modelLoader.WanModelLoader import WanModelLoader

    model_dir = tiny_model("a14b")
    high = tmp_path / "high.safetensors"
    both = tmp_path / "both.safetensors"
    reference = WanModelLoader().load(str(model_dir), torch.device("cpu"))
    name = "blocks.0.attn1.to_q"
    shape = reference.transformer.get_submodule(name).weight.shape
    for path, value in ((high, 1.0), (both, 2.0)):
        save_file({f"transformer.{name}.lora_A.weight": torch.full((1, shape[1]), value),
                   f"transformer.{name}.lora_B.weight": torch.full((shape[0], 1), 0.01)}, str(path))
    model = WanModelLoader().load(str(model_dir), torch.device("cpu"), base_loras=[
        BaseLoRAConfig(str(high), 1.0, WanExpert.HIGH), BaseLoRAConfig(str(both), 0.5)])
    for expert, expected_delta in ((0, 0.01 * (1.0 + 0.5 * 2.0)), (1, 0.01 * 0.5 * 2.0)):
        delta = model.transformers()[expert].get_submodule(name).weight - \
            reference.transformers()[expert].get_submodule(name).weight
        assert torch.allclose(delta, torch.full(shape, expected_delta), atol=1e-6)
    assert [r["name"] for r in read_stack(stack_header(model.base_loras, 0))] == ["high.safetensors", "both.safetensors"]
    assert [r["name"] for r in read_stack(stack_header(model.base_loras, 1))] == ["both.safetensors"]


@pytest.mark.slow
def test_with_fp8_storage_the_merged_weights_are_quantised(tiny_model, video_dataset, tmp_path):
    from modules.modelSetup.fp8_storage import stored_weights

    model_dir = tiny_model("t2v")
    lora, _ = random_file("lora", model_dir, tmp_path)
    merged_dir = merge_lora_into_model(MergeInputs(model_dir, lora), tmp_path / "merged", DIFFUSERS)[0]
    stored = []
    for base, work, stack in ((model_dir, "a", [{"path": str(lora)}]), (merged_dir, "b", [])):
        trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(
            base, video_dataset, tmp_path / work, base_weight_format="FP8", fp8_scale="TENSOR", base_loras=stack)))
        trainer.start()
        stored.append(stored_weights(trainer.model.transformer))
        trainer.close()
    assert stored[0].keys() == stored[1].keys() and stored[0]
    for name, (weight, scale) in stored[0].items():
        assert weight.dtype == torch.float8_e4m3fn
        assert torch.equal(weight.view(torch.uint8), stored[1][name][0].view(torch.uint8)), name
        assert torch.equal(scale, stored[1][name][1]), name


@pytest.mark.parametrize("script", ["sample.py", "evaluate.py"])
def test_the_scripts_check_base_lora_files_before_a_model_loads(script, tiny_model, tmp_path, monkeypatch):
    from modules.modelLoader.WanModelLoader import WanModelLoader

    monkeypatch.setattr(WanModelLoader, "load", lambda *a, **k: pytest.fail("a model loaded"))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a fox\n")
    extra = ["--prompt", "a fox"] if script == "sample.py" else ["--prompts", str(prompts)]
    output = tmp_path / ("out.mp4" if script == "sample.py" else "report")
    result = run_script(script, "--model", str(tiny_model("t2v")), *extra, "--base-lora",
                        f"{tmp_path / 'gone.safetensors'}:0.8", "--output", str(output))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--base-lora" in lines[0] and "gone.safetensors" in lines[0], lines
