"""`base_loras[].sample_only`: a LoRA users sample with (e.g. Lightning) merged for the trainer's samples only,
under the trained adapter, never trained through: the weights are bit-identical after a sample, the sample equals
scripts/sample.py's with the same stack (`--base-lora`), the sample's ComfyUI workflow chains it as sample.py's does
(per expert), and what cannot take it is refused at start-up."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from modules.config.train_config import BaseLoRAConfig, TrainConfig
from modules.modelFile.base_loras import merge_base_loras
from modules.modelFile.lora_formats import COMFY_LORA, extract_from_peft
from modules.modelFile.training_only_loras import check_memory_features, sampling_weights
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.comfy_workflow import workflow_models
from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
from modules.trainer.GenericTrainer import GenericTrainer
from modules.trainer.resume_check import config_fingerprint
from modules.trainer.snapshots import snapshot_destination
from modules.util.base_config import ConfigError
from modules.util.enum import WanExpert
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.test_base_loras import base_transformer, merged_with, random_file, sample_strip
from tests.test_comfy_workflow import VARIANTS

SAMPLE = {"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 2, "cfg_scale": 1.0, "seed": 3}


def chain_of(workflow_file) -> list[tuple[str, float]]:
    workflow = json.loads(workflow_file.read_text(encoding="utf-8"))
    return [(n["inputs"]["lora_name"], n["inputs"]["strength_model"]) for n in workflow.values()
            if n["class_type"] == "LoraLoaderModelOnly"]


def test_a_lora_runs_samples_stack_the_lora_with_the_trained_adapter_and_leave_the_weights_bit_identical(
        tiny_model, video_dataset, tmp_path, monkeypatch):
    model_dir = tiny_model("t2v")
    stack, _ = random_file("lora", model_dir, tmp_path)
    config = train_config_dict(model_dir, video_dataset, tmp_path, max_steps=1, samples=[SAMPLE],
                               base_loras=[{"path": str(stack), "strength": 0.7, "sample_only": True}])
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    transformer = trainer.model.transformer
    base = base_transformer(model_dir).state_dict()
    frozen = "blocks.0.attn1.to_q.base_layer.weight"
    assert torch.equal(dict(transformer.named_parameters())[frozen], base["blocks.0.attn1.to_q.weight"])  # trains on the base
    torch.manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter (peft starts at B = 0), so the sample shows it stays active
        for name, param in transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05)
    before = {name: param.detach().clone() for name, param in transformer.named_parameters()}
    # the snapshot of this step: the file the sample's workflow names, and sample.py's --lora below
    trained = snapshot_destination(trainer.run.path, config["output_model_destination"], 0)
    trained.parent.mkdir(parents=True)
    save_lora(extract_from_peft(transformer, "default"), trained, COMFY_LORA, lora_metadata("wan-2.1-t2v"))
    video = trainer.sample()[0]
    assert all(torch.equal(param, before[name]) for name, param in transformer.named_parameters())

    ours = np.asarray(Image.open(video.with_suffix(".png"))).astype(int)
    args = ["--model", str(model_dir), "--lora", str(trained)]
    with_stack = sample_strip([*args, "--base-lora", f"{stack}:0.7"], tmp_path / "a.mp4").astype(int)
    without = sample_strip(args, tmp_path / "b.mp4").astype(int)
    assert np.abs(ours - with_stack).max() <= 1  # float rounding of merged vs. unmerged adapter math, in 8 bits
    assert np.abs(ours - without).max() > 8
    chain = chain_of(video.with_name(video.stem + ".workflow.json"))
    assert chain == [(stack.name, 0.7), ("lora-step000000.safetensors", 1.0)]  # as sample.py's for that stack
    assert chain == chain_of(tmp_path / "a.workflow.json")


def test_the_samples_weights_add_the_sample_only_stack_and_drop_training_only_in_one_pass(tiny_model, tmp_path):
    model_dir = tiny_model("t2v")
    sample_lora, _ = random_file("lora", model_dir, tmp_path)
    adapter, _ = random_file("loha", model_dir, tmp_path)
    entries = [BaseLoRAConfig(str(adapter), 0.5, training_only=True), BaseLoRAConfig(str(sample_lora), 0.7, sample_only=True)]
    model = WanModelLoader().load(str(model_dir), torch.device("cpu"), base_loras=entries)  # a fine-tune's plain names
    assert [record["name"] for record in model.base_loras] == [adapter.name]  # not in the header, nor resume's fingerprint
    training = {name: p.detach().clone() for name, p in model.transformer.named_parameters()}
    torch.testing.assert_close(training, merged_with(model_dir, (adapter, 0.5)), rtol=0, atol=0)
    with sampling_weights(model):
        torch.testing.assert_close(dict(model.transformer.named_parameters()), merged_with(model_dir, (sample_lora, 0.7)),
                                   rtol=0, atol=1e-6)
    assert all(torch.equal(p, training[name]) for name, p in model.transformer.named_parameters())
    misfit = tmp_path / "misfit.safetensors"  # a layer of another model's width: refused when the model loads
    save_file({"diffusion_model.blocks.0.self_attn.q.lora_down.weight": torch.zeros(4, 7),
               "diffusion_model.blocks.0.self_attn.q.lora_up.weight": torch.zeros(7, 4)}, str(misfit))
    with pytest.raises(UserError, match="misfit.safetensors' does not fit this model"):
        merge_base_loras(model, [BaseLoRAConfig(str(misfit), sample_only=True)])


def test_the_workflow_chains_sample_only_loras_as_the_samples_weights_hold_them_per_expert():
    a14b = VARIANTS["a14b_i2v"]
    entries = [BaseLoRAConfig("/l/base.safetensors", 1.0), BaseLoRAConfig("/l/dedistill.safetensors", training_only=True),
               BaseLoRAConfig("/l/lightning_high.safetensors", 1.0, WanExpert.HIGH, sample_only=True),
               BaseLoRAConfig("/l/lightning_low.safetensors", 0.8, WanExpert.LOW, sample_only=True)]
    models = workflow_models(a14b, "/m/base", {}, entries, {0: "/o/lora_high.safetensors", 1: "/o/lora_low.safetensors"})
    assert models.loras == ((("base.safetensors", 1.0), ("lightning_high.safetensors", 1.0), ("lora_high.safetensors", 1.0)),
                            (("base.safetensors", 1.0), ("lightning_low.safetensors", 0.8), ("lora_low.safetensors", 1.0)))


def test_start_up_refuses_a_sample_only_lora_that_cannot_be_applied(tiny_model, video_dataset, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"base_loras\[0\]\.sample_only'.*not both"):
        TrainConfig.from_dict({"base_loras": [{"path": "x.safetensors", "training_only": True, "sample_only": True}]})

    class Model:
        training_only_loras, sample_only_loras = [], [(0, object(), 1.0)]

    for fp8, swapped, sharded, key in ((True, False, False, "base_weight_format FP8"),
                                       (False, True, False, "blocks_to_swap"), (False, False, True, "FSDP")):
        with pytest.raises(UserError, match=f"sample_only LoRA.*{key}"):
            check_memory_features(Model(), fp8, swapped, sharded)
    monkeypatch.setattr(WanModelLoader, "load", lambda *a, **k: pytest.fail("a model loaded"))
    missing = [{"path": str(tmp_path / "no.safetensors"), "sample_only": True}]
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, base_loras=missing))
    with pytest.raises(UserError, match=r"base_loras\[0\]\.path"):
        GenericTrainer(config).start()


def test_a_resume_may_add_or_drop_the_preview_stack():
    def fingerprint(**values) -> str:
        return config_fingerprint(TrainConfig.from_dict({"base_loras": [{"path": "merged.safetensors"}], **values}), 1)

    preview = {"base_loras": [{"path": "merged.safetensors"}, {"path": "lightning.safetensors", "sample_only": True}],
               "sample_overrides": {"steps": 4, "cfg_scale": 1.0}}
    assert fingerprint(**preview) == fingerprint()
    assert fingerprint(base_loras=[{"path": "lightning.safetensors"}]) != fingerprint()  # a merged one trains
