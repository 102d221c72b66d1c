"""The explicit registries (issue #12, deliverables 4 and 5): checkpoint class + layout -> family, classes and
conditioning; an unknown class or layout is one line naming the folder; the trainer looks its parts up; the E2V
expansion is a model-setup step that preview_e2v.py runs too, so it works on T2V bases."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from diffusers import (
    SkyReelsV2ImageToVideoPipeline,
    SkyReelsV2Pipeline,
    WanImageToVideoPipeline,
    WanPipeline,
    WanVACEPipeline,
)
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
from modules.model.detection import detect_variant
from modules.model.registry import FAMILIES, NOT_SUPPORTED, family_for
from modules.modelLoader.lora_inference import attach_lora_for_inference
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSetup.WanLoRASetup import WanLoRASetup
from modules.trainer.GenericTrainer import GenericTrainer
from modules.trainer.preflight import DATA_CHECKS
from modules.trainer.registry import DATA_KINDS, SETUPS, DataKind, Method, data_kind
from modules.util.enum import TrainingMethod
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, e2v_on_t2v_config, train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.script_runner import run_script

PIPELINES = {"t2v": (WanPipeline, WanPipeline), "i2v": (WanImageToVideoPipeline, WanImageToVideoPipeline),
             "ti2v": (WanPipeline, WanImageToVideoPipeline), "a14b_t2v": (WanPipeline, WanPipeline),
             "a14b_i2v": (WanImageToVideoPipeline, WanImageToVideoPipeline), "vace": (WanVACEPipeline, WanVACEPipeline),
             "flf2v": (WanImageToVideoPipeline, WanImageToVideoPipeline),
             "skyreels_v2_t2v": (SkyReelsV2Pipeline, SkyReelsV2Pipeline),
             "skyreels_v2_i2v": (SkyReelsV2ImageToVideoPipeline, SkyReelsV2ImageToVideoPipeline),
             "a14b_vace": (WanVACEPipeline, WanVACEPipeline)}


@pytest.mark.parametrize("variant", list(PIPELINES))
def test_every_tiny_variant_resolves_to_its_family_and_pipelines(variant, tiny_model):
    detected = detect_variant(tiny_model(variant))
    family = family_for(detected)
    assert detected.name == family.name == variant
    assert detected.transformer_class == ("WanVACETransformer3DModel" if "vace" in variant else
                                          "SkyReelsV2Transformer3DModel" if "skyreels" in variant else
                                          "WanTransformer3DModel")
    assert isinstance(WanModelLoader().load(str(tiny_model(variant)), torch.device("cpu")).transformer,
                      family.transformer_class)
    assert (family.pipeline(False), family.pipeline(True)) == PIPELINES[variant]
    model = WanModelLoader().load(str(tiny_model(variant)), torch.device("cpu"))
    needs_image = detected.channel_concat_condition
    assert type(model.pipeline()) is PIPELINES[variant][1 if needs_image else 0]
    assert model.conditioning == family.conditioning(detected)


def edited_copy(tiny_model, tmp_path, **changes) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model("t2v"), folder)
    config_path = folder / "transformer" / "config.json"
    config = json.loads(config_path.read_text())
    config.update(changes)
    config_path.write_text(json.dumps(config))
    return folder


def test_an_unknown_transformer_class_is_one_line_naming_the_folder(tiny_model, tmp_path):
    folder = edited_copy(tiny_model, tmp_path, _class_name="HunyuanVideoTransformer3DModel")
    with pytest.raises(UserError) as error:
        detect_variant(folder)
    assert str(folder) in str(error.value) and "HunyuanVideoTransformer3DModel" in str(error.value)
    assert "\n" not in str(error.value)


def test_a_wan_family_we_do_not_train_is_named(tiny_model, tmp_path):
    folder = edited_copy(tiny_model, tmp_path, _class_name="WanAnimateTransformer3DModel")
    with pytest.raises(UserError, match=r"is a Wan Animate checkpoint \(WanAnimateTransformer3DModel\), which WanTrainer "
                                        r"does not train yet"):
        detect_variant(folder)


def test_an_unrecognised_channel_layout_is_an_error_not_a_silent_t2v(tiny_model, tmp_path):
    folder = edited_copy(tiny_model, tmp_path, in_channels=20)
    with pytest.raises(UserError) as error:
        detect_variant(folder)
    message = str(error.value)
    assert str(folder) in message and "20 input and 16 output channels matches no Wan layout" in message
    assert "\n" not in message


def test_the_registry_is_a_plain_dict_of_every_layout():
    # (animate_2 has no diffusers pipeline of the classic kind: tests/test_animate2.py loads its folder)
    assert {family.name for family in FAMILIES.values()} == set(PIPELINES) | {"animate_2"}


def test_the_trainer_takes_its_parts_from_the_registries(tiny_model, video_dataset, tmp_path):
    assert set(SETUPS) == set(TrainingMethod)
    plain = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path))
    assert data_kind(plain) is DATA_KINDS["clips"]
    e2v = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, dataset_config="x.json"))
    assert data_kind(e2v) is DATA_KINDS["e2v"]
    source = (REPO_ROOT / "modules" / "trainer" / "GenericTrainer.py").read_text(encoding="utf-8")
    for name in ("WanLoRASetup", "WanFineTuneSetup", "WanE2VDataLoader", "expand_model_for_e2v", "channel_concat",
                 "expand_timesteps", "variant.name"):
        assert name not in source, f"GenericTrainer decides by model type again ({name})"


@pytest.mark.slow
def test_preview_e2v_works_on_a_t2v_base_and_shows_what_the_trainer_feeds(tiny_model, tmp_path):
    values = e2v_on_t2v_config(tiny_model, tmp_path)
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()  # expands the T2V base, caches the samples
    sample_id = sorted(p.stem for p in (tmp_path / "data").glob("*.mp4"))[0]
    expected, _ = trainer.data.preview(sample_id)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(values))
    result = run_script("preview_e2v.py", "--config-path", str(config), "--sample", sample_id, "--output",
                        str(tmp_path / "preview"))  # in this process: test_e2v_bad_data runs it as a real one
    assert result.returncode == 0, result.stderr[-2000:]
    tensors = load_file(tmp_path / "preview" / f"{sample_id}.safetensors")
    assert set(tensors) == set(expected) and {"mask", "condition_latents", "clip_embeds"} <= set(tensors)
    for key, value in expected.items():
        torch.testing.assert_close(tensors[key], value.float(), rtol=0, atol=1e-5)
    assert (tmp_path / "preview" / f"{sample_id}.png").is_file()


@pytest.mark.parametrize("class_name", sorted(NOT_SUPPORTED))
def test_every_wan_derived_class_we_do_not_train_is_one_line_naming_folder_and_class(class_name, tiny_model, tmp_path):
    import diffusers

    assert hasattr(diffusers, class_name)  # the names are diffusers' own, not guesses
    folder = edited_copy(tiny_model, tmp_path, _class_name=class_name)
    with pytest.raises(UserError) as error:
        detect_variant(folder)
    message = str(error.value)
    assert str(folder) in message and f"({class_name}), which WanTrainer does not train yet" in message
    assert "\n" not in message


def test_every_wan_transformer_class_of_diffusers_is_either_trained_or_named():
    import diffusers

    wan_classes = {name for name in dir(diffusers) if name.endswith("Transformer3DModel") and "Wan" in name}
    known = {key[0] for key in FAMILIES} | set(NOT_SUPPORTED)
    assert wan_classes and wan_classes <= known, f"decide about {sorted(wan_classes - known)} in model/registry.py"


def test_the_trainer_builds_and_calls_what_the_registries_hold(tiny_model, video_dataset, tmp_path, monkeypatch):
    """Behaviour, not source text: entries swapped into the registries are what GenericTrainer builds and calls."""
    from safetensors.torch import save_file

    calls = []

    class Setup(WanLoRASetup):
        pass

    class Loader(WanBaseDataLoader):
        pass

    def sampling_options(data):
        calls.append(("sampling options", type(data)))
        return None

    monkeypatch.setitem(SETUPS, TrainingMethod.LORA, Method(
        Setup, lambda model, setup, path: calls.append(("continue from", type(setup), path))))
    monkeypatch.setitem(DATA_CHECKS, "clips", lambda config: calls.append(("check", config.seed)))  # start-up's
    monkeypatch.setitem(DATA_KINDS, "clips", DataKind(
        Loader, lambda model, config: calls.append(("prepare", model.variant.name)) or {}, sampling_options))
    lora = tmp_path / "start.safetensors"
    save_file({"diffusion_model.blocks.0.self_attn.q.lora_down.weight": torch.zeros(1, 8),  # a LoRA start-up reads
               "diffusion_model.blocks.0.self_attn.q.lora_up.weight": torch.zeros(8, 1)}, str(lora))
    sample = {"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 1}
    trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(
        tiny_model("t2v"), video_dataset, tmp_path, seed=5, lora_weight_path=str(lora), samples=[sample])))
    trainer.start()
    assert type(trainer.setup) is Setup and type(trainer.data) is Loader
    # the samples' inputs are encoded ahead right after caching (trainer/sample_inputs.py), with the data kind's options
    assert calls == [("check", 5), ("prepare", "t2v"), ("sampling options", Loader), ("continue from", Setup, str(lora))]
    assert len(trainer.sample()) == 1 and calls[-1] == ("sampling options", Loader)


def transformer_output(transformer, seed: int = 0) -> torch.Tensor:
    """One forward pass on fixed random E2V inputs (36 channels, text and CLIP context)."""
    config = transformer.config
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(1, config.in_channels, 2, 4, 4, generator=generator)
    text = torch.randn(1, 512, config.text_dim, generator=generator)
    image = torch.randn(1, 257, config.image_dim, generator=generator)
    with torch.no_grad():
        return transformer(hidden, torch.tensor([500.0]), text, encoder_hidden_states_image=image,
                           return_dict=False)[0]


@pytest.mark.slow
@pytest.mark.parametrize("variant, train_expert", [("t2v", "BOTH"), ("a14b", "HIGH")])
def test_sampling_an_e2v_lora_of_a_t2v_base_expands_it_as_training_did(variant, train_expert, tiny_model, tmp_path):
    """The run expands with its own seed (7 here); the sampler re-expands the base from the LoRA file alone.
    Every expanded or new weight of a trained expert travels in the file, so it comes back exactly; an expert
    the run did not train starts as a no-op either way (zero new inputs, zero add_v_proj), so it computes
    what the run's copy computes."""
    values = e2v_on_t2v_config(tiny_model, tmp_path, seed=7, output_dtype="FLOAT32", train_expert=train_expert)
    values["base_model_name"] = str(tiny_model(variant))
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()
    trainer.train()
    lora = [path for path in trainer.end() if path.suffix == ".safetensors" and "-i2v" not in path.name][0]
    model = WanModelLoader().load(str(tiny_model(variant)), torch.device("cpu"))
    model.image_encoder, model.image_processor = WanModelLoader.load_image_encoder(str(tiny_model("i2v")),
                                                                                   model.train_device)
    attach_lora_for_inference(model, lora)
    assert model.variant == trainer.model.variant  # the I2V input layout with the CLIP branch
    trained = dict(trainer.setup.trained_transformers())
    for expert, (ours, theirs) in enumerate(zip(model.transformers(), trainer.model.transformers())):
        if expert in trained:
            state = dict(theirs.named_parameters())
            for name in trainer.setup.full_train[expert]:
                assert torch.equal(ours.get_parameter(name), state[name]), name
        theirs.eval()
        torch.testing.assert_close(transformer_output(ours), transformer_output(theirs), rtol=0, atol=1e-5)
