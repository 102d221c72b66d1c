"""merge_lora.py for every family the registry knows × every adapter type (issue #41, deliverable 3): the merged
model is the family's own transformer class with the shapes that class has, its weights are what peft's own
`merge()` of the same adapter gives, in both formats (diffusers folder, ComfyUI single file), and the single file's
keys are exactly the weights of the model ComfyUI builds for it (tests/comfyui_wan.py, re-stated from ComfyUI)."""
from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import diffusers
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from modules.adapter.registry import adapter_for
from modules.config.train_config import TrainConfig
from modules.model.detection import detect_variant
from modules.modelFile.lora_formats import COMFY_LORA, expert_lora_paths, extract_from_peft
from modules.modelFile.original_keys import original_key
from modules.modelSaver.merged_model import COMFY, DIFFUSERS, MergeInputs, merge_lora_into_model
from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
from modules.util.errors import UserError
from tests import comfyui_wan
from tests.conftest import train_config_dict

FAMILIES = ("t2v", "i2v", "flf2v", "ti2v", "a14b", "a14b_i2v", "vace", "a14b_vace", "skyreels_v2", "skyreels_v2_i2v")
ADAPTERS = {"lora": {}, "loha": {"peft_type": "LOHA"}, "lokr": {"peft_type": "LOKR"}, "dora": {"lora_decompose": True}}
TRANSFORMERS = ("transformer", "transformer_2")
# Names diffusers' single-file converter (convert_wan_transformer_to_diffusers) does not map but its conversion
# scripts do: scripts/convert_wan_to_diffusers.py (FLF2V) and convert_skyreelsv2_to_diffusers.py (fps embedding).
SCRIPT_NAMES = {"img_emb.emb_pos": "condition_embedder.image_embedder.pos_embed",
                "fps_projection.0": "fps_projection.net.0.proj", "fps_projection.2": "fps_projection.net.2"}
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: threads only contend


def declared_class(model_dir: Path, folder: str = "transformer") -> type:
    """The transformer class the tiny folder declares in model_index.json (what diffusers' pipeline loads)."""
    return getattr(diffusers, json.loads((model_dir / "model_index.json").read_text())[folder][1])


def adapted(model_dir: Path, expert: int, adapter: str, work: Path) -> torch.nn.Module:
    """The expert's transformer with a random adapter of the type on every Linear of its blocks (VACE's control
    blocks too), through the spec's own peft config, as training injects it."""
    config = TrainConfig.from_dict(train_config_dict(model_dir, work, work, lora_alpha=3, **ADAPTERS[adapter]))
    spec = adapter_for(config.peft_type, config.lora_decompose)
    transformer = declared_class(model_dir).from_pretrained(model_dir / TRANSFORMERS[expert])
    targets = [name for name, module in transformer.named_modules()
               if isinstance(module, torch.nn.Linear) and name.startswith(("blocks.", "vace_blocks."))]
    transformer.add_adapter(spec.peft_config(config, targets), adapter_name="default")
    generator = torch.Generator().manual_seed(10 * expert + len(adapter))
    params = dict(transformer.named_parameters())
    with torch.no_grad():
        for name in sorted(spec.trainable_names(transformer, "default")):
            noise = torch.randn(params[name].shape, generator=generator) * 0.2
            params[name].copy_(noise + (1.0 if "magnitude" in name else 0.0))
    return transformer


def peft_merged(transformer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights peft's own `merge()` of the adapter gives (the expected merge, computed without our code)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    merged = copy.deepcopy(transformer)
    for module in merged.modules():
        if isinstance(module, BaseTunerLayer):
            module.merge(adapter_names=["default"])
    base = merged.state_dict()
    return {key.replace(".base_layer.", "."): value for key, value in base.items()
            if ".base_layer." in key or not any(part in key for part in ("lora_", "hada_", "lokr_"))}


@pytest.fixture(scope="module")
def merged_case(tiny_model, tmp_path_factory):
    """(family, adapter) -> (model_dir, {expert: peft's merge}, DIFFUSERS folder, COMFY files in float32)."""
    made = {}

    def make(family: str, adapter: str):
        if (family, adapter) not in made:
            work = tmp_path_factory.mktemp(f"{family}-{adapter}")
            model_dir = tiny_model(family)
            variant = detect_variant(model_dir)
            tag = f"wan-{'2.2' if variant.model_type.name == 'WAN_2_2' else '2.1'}-{variant.name.replace('_', '-')}"
            files = [work / "lora.safetensors"] if not variant.two_experts else \
                [Path(p) for p in expert_lora_paths(work / "lora.safetensors")]
            expected = {}
            for expert, file in enumerate(files):
                transformer = adapted(model_dir, expert, adapter, work)
                save_lora(extract_from_peft(transformer), file, COMFY_LORA, lora_metadata(tag))
                expected[expert] = peft_merged(transformer)
            inputs = MergeInputs(model_dir, files[0], strength=1.0)
            folder = merge_lora_into_model(inputs, work / "merged", DIFFUSERS)[0]
            singles = merge_lora_into_model(inputs, work / "merged.safetensors", COMFY, torch.float32)
            made[family, adapter] = model_dir, expected, folder, singles
        return made[family, adapter]

    return make


CASES = [pytest.param(family, adapter, marks=() if adapter == "lora" or family == "vace" else pytest.mark.slow)
         for family in FAMILIES for adapter in ADAPTERS]


@pytest.mark.parametrize("family, adapter", CASES)
def test_the_merged_folder_is_the_familys_class_with_peft_merged_weights(family, adapter, merged_case):
    model_dir, expected, folder, _ = merged_case(family, adapter)
    assert detect_variant(folder) == detect_variant(model_dir)  # the folder says what it is: same family, same layout
    for expert, peft in expected.items():
        name = TRANSFORMERS[expert]
        cls = declared_class(model_dir, name)
        assert json.loads((folder / name / "config.json").read_text())["_class_name"] == cls.__name__
        merged = cls.from_pretrained(folder / name).state_dict()  # diffusers builds the class and loads every weight
        base = cls.from_pretrained(model_dir / name).state_dict()
        assert {k: tuple(v.shape) for k, v in merged.items()} == {k: tuple(v.shape) for k, v in base.items()}
        assert merged.keys() == peft.keys()
        error = max(float((merged[k] - peft[k]).abs().max()) for k in peft)
        changed = [k for k in base if not torch.equal(base[k], peft[k])]
        print(f"{family} {adapter} {name}: max |merged - peft merge| = {error:.1e} over {len(changed)} changed weights")
        assert error < 2e-6 and changed
        assert all(torch.equal(merged[k], base[k]) for k in base if k not in changed)
        if family.endswith("vace"):  # the control blocks merged too
            assert any(k.startswith("vace_blocks.") for k in changed)


def to_diffusers_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers' own converter, completed by its conversion scripts' names (SCRIPT_NAMES)."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    renamed = {}
    for key, value in state.items():
        for original, name in SCRIPT_NAMES.items():
            key = key.replace(original, name) if key.startswith(original) else key
        renamed[key] = value
    return convert_wan_transformer_to_diffusers(renamed)


@pytest.mark.parametrize("family, adapter", CASES)
def test_the_single_file_holds_the_folders_weights_under_the_names_comfyui_loads(family, adapter, merged_case):
    model_dir, expected, folder, singles = merged_case(family, adapter)
    assert len(singles) == len(expected)
    for expert, file in enumerate(singles):
        single = load_file(str(file))
        comfy = comfyui_wan.detect({k: tuple(v.shape) for k, v in single.items()})
        loaded_by_comfy = comfyui_wan.model_keys(comfy)
        extra = {k for k in single if k.startswith("fps_")}  # SkyReels-V2's fps embedding: see below
        assert set(single) - extra == loaded_by_comfy, (sorted(set(single) ^ loaded_by_comfy))[:5]
        config = json.loads((folder / TRANSFORMERS[expert] / "config.json").read_text())
        assert extra == ({f"fps_{k}" for k in ("embedding.weight", "projection.0.weight", "projection.0.bias",
                                               "projection.2.weight", "projection.2.bias")}
                         if config.get("inject_sample_info") else set())
        assert comfy["model"] == {"i2v": "WAN21_I2V", "flf2v": "WAN21_I2V", "skyreels_v2_i2v": "WAN21_I2V",
                                  "a14b_i2v": "WAN21_T2V", "ti2v": "WAN22_T2V"}.get(
            family, "WAN21_Vace" if "vace" in family else "WAN21_T2V")
        if family == "flf2v":
            assert comfy["flf_pos_embed_token_number"] == config["pos_embed_seq_len"]
        if "vace" in family:  # ComfyUI places control block n at base block n·(layers // vace blocks)
            step = comfy["num_layers"] // comfy["vace_layers"]
            assert config["vace_layers"] == list(range(0, comfy["num_layers"], step))
        in_folder = load_file(str(folder / TRANSFORMERS[expert] / "diffusion_pytorch_model.safetensors"))
        converted = to_diffusers_names(single)
        assert converted.keys() == in_folder.keys()
        assert all(torch.equal(converted[k], in_folder[k].float()) for k in in_folder)  # float32: no rounding


@pytest.mark.parametrize("family", ["flf2v", "vace", "skyreels_v2"])
def test_the_default_single_file_is_bf16_and_names_every_weight(family, tiny_model, tmp_path, caplog):
    """Without --dtype the single file is bfloat16 (what ComfyUI's own Wan files are); the keys do not change. An fps
    embedding (SkyReels-V2 DF 1.3B's, the tiny SkyReels-V2's) is written, and the user told that ComfyUI ignores it."""
    model_dir = tiny_model(family)
    variant = detect_variant(model_dir)
    tag = f"wan-2.1-{variant.name.replace('_', '-')}"
    lora = tmp_path / "lora.safetensors"
    save_lora(extract_from_peft(adapted(model_dir, 0, "lora", tmp_path)), lora, COMFY_LORA, lora_metadata(tag))
    with caplog.at_level(logging.WARNING, logger="modules.modelSaver.merged_model"):
        (file,) = merge_lora_into_model(MergeInputs(model_dir, lora), tmp_path / "out.safetensors", COMFY)
    assert ("ComfyUI loads the single file without it" in caplog.text) == (family == "skyreels_v2")
    with safe_open(str(file), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
        names = set(f.keys())
    state = declared_class(model_dir).from_pretrained(model_dir / "transformer").state_dict()
    assert names == {original_key(k) for k in state} and len(names) == len(state)


# ------------------------------------------- the E2V export (the I2V model of a T2V-based E2V run), per family
# E2V expands the T2V-layout bases that are not VACE (prepare_e2v_model): Wan T2V and A14B T2V
# (tests/test_merge_lora.py runs their exports in WanImageToVideoPipeline) and SkyReels-V2 T2V, here.


def transformer_output(transformer: torch.nn.Module, **kwargs) -> torch.Tensor:
    generator = torch.Generator().manual_seed(4)
    config = transformer.config
    hidden = torch.randn(1, config.in_channels, 2, 4, 4, generator=generator)
    text = torch.randn(1, 8, config.text_dim, generator=generator)
    image = torch.randn(1, 257, config.image_dim, generator=generator) if config.image_dim else None
    with torch.no_grad():
        return transformer(hidden, torch.tensor([700.0]), text, encoder_hidden_states_image=image, return_dict=False,
                           **kwargs)[0]


def skyreels_e2v_lora(model_dir: Path, folder: Path, clip: bool) -> Path:
    """What an E2V run on the SkyReels-V2 T2V base saves: a LoRA layer, every expanded or added weight in full
    (random, so that they matter), the expanded config in the header."""
    from diffusers import SkyReelsV2Transformer3DModel

    from modules.modelFile.lora_formats import DIFFUSERS_LORA, LoRALayer, LoRAWeights
    from modules.modelFile.lora_header import TRANSFORMER_CONFIG_KEY
    from modules.modelSetup.e2v_expansion import expand_transformer

    base = SkyReelsV2Transformer3DModel.from_pretrained(model_dir / "transformer")
    expanded, full_names = expand_transformer(base, 4, 32 if clip else None, seed=3)
    assert type(expanded) is SkyReelsV2Transformer3DModel and expanded.fps_embedding is not None  # class kept
    generator = torch.Generator().manual_seed(6)
    state = expanded.state_dict()
    full = {name: torch.randn(state[name].shape, generator=generator) * 0.3 for name in full_names}
    layer = LoRALayer(torch.randn(4, 32, generator=generator), torch.randn(32, 4, generator=generator), 2.0)
    config = {k: v for k, v in expanded.config.items() if not k.startswith("_")}
    metadata = {**lora_metadata("wan-2.1-skyreels-v2-t2v"), TRANSFORMER_CONFIG_KEY: json.dumps(config)}
    lora = folder / "lora.safetensors"
    save_lora(LoRAWeights(layers={"blocks.1.attn2.to_v": layer}, full_weights=full), lora, DIFFUSERS_LORA, metadata)
    return lora


@pytest.mark.parametrize("clip", [True, False], ids=["dual", "vae"])
def test_e2v_export_of_a_skyreels_v2_t2v_base_is_a_skyreels_v2_i2v_model(clip, tiny_model, tmp_path, caplog):
    """The export of an E2V LoRA on the SkyReels-V2 T2V base is the registry's I2V family of the same class:
    SkyReelsV2ImageToVideoPipeline with SkyReelsV2Transformer3DModel, fps embedding kept, computing what our sampler
    computes with the LoRA on the base; its single file is an I2V model for ComfyUI (a 36-channel T2V one without
    the CLIP pathway, as Wan 2.2 I2V A14B). Without CLIP there is no folder (diffusers' SkyReels-V2 I2V pipeline
    requires a CLIP encoder), and the user is told so."""
    from diffusers import DiffusionPipeline, SkyReelsV2ImageToVideoPipeline, SkyReelsV2Transformer3DModel

    from modules.modelLoader.lora_inference import attach_lora_for_inference
    from modules.modelLoader.WanModelLoader import WanModelLoader
    from modules.modelSaver.merged_model import export_e2v_as_i2v

    model_dir = tiny_model("skyreels_v2")
    lora = skyreels_e2v_lora(model_dir, tmp_path, clip)
    inputs = MergeInputs(model_dir, lora, image_encoder_dir=tiny_model("i2v"))
    if not clip:  # diffusers' SkyReelsV2ImageToVideoPipeline requires a CLIP encoder: a folder would not load
        with caplog.at_level(logging.WARNING, logger="modules.modelSaver.merged_model"):
            (single,) = export_e2v_as_i2v(inputs, tmp_path / "lora")
        assert "requires a CLIP image encoder" in caplog.text and "single file alone" in caplog.text
        with pytest.raises(UserError, match="--format COMFY"):
            merge_lora_into_model(inputs, tmp_path / "merged", DIFFUSERS)
    else:
        folder, single = export_e2v_as_i2v(inputs, tmp_path / "lora")
        assert detect_variant(folder).name == "skyreels_v2_i2v"
        pipe = DiffusionPipeline.from_pretrained(folder)
        assert type(pipe) is SkyReelsV2ImageToVideoPipeline and type(pipe.transformer) is SkyReelsV2Transformer3DModel
        assert pipe.image_encoder is not None and pipe.transformer.config.inject_sample_info
        model = WanModelLoader().load(str(model_dir), torch.device("cpu"))
        attach_lora_for_inference(model, lora)  # our sampler: the base expanded as the header says, the LoRA merged
        fps = [1]  # the 24 fps embedding (a list: diffusers makes it a tensor)
        ours, theirs = transformer_output(model.transformer, fps=fps), transformer_output(pipe.transformer, fps=fps)
        print(f"SkyReels-V2 E2V export vs our sampler's transformer: max abs {float((ours - theirs).abs().max()):.1e}")
        torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-5)
        assert not torch.allclose(transformer_output(pipe.transformer, fps=[0]), theirs)  # fps matters

    with safe_open(str(single), "pt") as f:
        shapes = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    comfy = comfyui_wan.detect(shapes)
    assert (comfy["model"], comfy["in_dim"]) == ("WAN21_I2V" if clip else "WAN21_T2V", 36)
    assert set(shapes) - comfyui_wan.model_keys(comfy) == {k for k in shapes if k.startswith("fps_")} != set()


@pytest.mark.slow
def test_an_e2v_run_on_a_skyreels_v2_base_trains_its_own_class_and_exports_it(tiny_model, tmp_path):
    """E2V training expands the SkyReels-V2 base as what it is (fps embedding and all), and the run's I2V export is a
    SkyReelsV2ImageToVideoPipeline folder whose transformer computes what the trained model computes."""
    from diffusers import SkyReelsV2ImageToVideoPipeline, SkyReelsV2Transformer3DModel

    from modules.trainer.GenericTrainer import GenericTrainer
    from tests.conftest import e2v_on_t2v_config

    values = e2v_on_t2v_config(tiny_model, tmp_path, max_steps=1, output_dtype="FLOAT32")
    values["base_model_name"] = str(tiny_model("skyreels_v2"))
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()
    trainer.train()
    written = trainer.end()
    out = tmp_path / "output"
    assert written == [out / "lora.safetensors", out / "lora-i2v", out / "lora-i2v.safetensors"]
    assert type(trainer.model.transformer) is SkyReelsV2Transformer3DModel  # (adapters are injected, not wrapped)
    pipe = SkyReelsV2ImageToVideoPipeline.from_pretrained(written[1])
    trainer.model.transformer.eval()
    ours = transformer_output(trainer.model.transformer, fps=[1])
    torch.testing.assert_close(transformer_output(pipe.transformer, fps=[1]), ours, rtol=0, atol=1e-5)
