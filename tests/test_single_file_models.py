"""Training from ComfyUI's split files: diffusion_models/ (bf16, fp16, fp8_e4m3fn, fp8_scaled), vae/,
text_encoders/umt5_xxl_* and clip_vision/, written here from the tiny models in ComfyUI's key names."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers, convert_wan_vae_to_diffusers
from safetensors.torch import load_file, save_file
from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

from modules.config.train_config import TrainConfig
from modules.modelFile.wan_vae_names import wan_vae_to_diffusers
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.commands import TrainCallbacks
from modules.util.enum import DataType
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.test_model_loader import to_original_names

CPU = torch.device("cpu")
FP8 = torch.float8_e4m3fn


# --- ComfyUI-style files ------------------------------------------------------------------------------
def fp8_scaled(state: dict[str, torch.Tensor], marker: str) -> dict[str, torch.Tensor]:
    """ComfyUI's fp8_scaled layout: each Linear weight as fp8 with a float32 `scale_weight` (and the
    `scale_input` ComfyUI uses for fp8 matmuls), the rest as stored, and the `scaled_fp8` marker."""
    out = {marker: torch.empty(0, dtype=FP8)}
    for name, tensor in state.items():
        if name.endswith(".weight") and tensor.ndim == 2 and "embedding" not in name and "shared" not in name:
            scale = tensor.float().abs().max() / torch.finfo(FP8).max
            out[name] = (tensor.float() / scale).to(FP8)
            out[name[: -len("weight")] + "scale_weight"] = scale.reshape(())
            out[name[: -len("weight")] + "scale_input"] = torch.ones(())
        else:
            out[name] = tensor
    return out


def comfy_transformer(state: dict[str, torch.Tensor], storage: str) -> dict[str, torch.Tensor]:
    original = to_original_names(state)
    if storage == "fp8_scaled":
        return fp8_scaled(original, "model.diffusion_model.scaled_fp8")
    if storage == "fp8_e4m3fn":  # Linear weights in fp8 without scales, the rest as stored
        return {k: v.to(FP8) if k.endswith(".weight") and v.ndim == 2 else v for k, v in original.items()}
    return {k: v.to(getattr(torch, storage)) for k, v in original.items()}


# diffusers -> Wan's original VAE names (ComfyUI's comfy/ldm/wan/vae.py and vae2_2.py)
_VAE_CONVS = {"quant_conv": "conv1", "post_quant_conv": "conv2"}
_CODER_PARTS = {"conv_in": "conv1", "norm_out": "head.0", "conv_out": "head.2", "mid_block.resnets.0": "middle.0",
                "mid_block.attentions.0": "middle.1", "mid_block.resnets.1": "middle.2"}
_RESNET_PARTS = {"norm1": "residual.0", "conv1": "residual.2", "norm2": "residual.3", "conv2": "residual.6",
                 "conv_shortcut": "shortcut"}


def _resnet(tail: str) -> str:
    head, _, rest = tail.partition(".")
    return f"{_RESNET_PARTS[head]}.{rest}" if head in _RESNET_PARTS else tail


def _original_coder_name(part: str, rest: str, resnets: int, residual: bool) -> str:
    for diffusers, original in _CODER_PARTS.items():
        if rest.startswith(diffusers + "."):
            return f"{original}.{_resnet(rest[len(diffusers) + 1:])}"
    if part == "encoder" and not residual:  # one flat list in both
        index, tail = re.fullmatch(r"down_blocks\.(\d+)\.(.+)", rest).groups()
        return f"downsamples.{index}.{_resnet(tail)}"
    stage, resnet, tail = re.fullmatch(
        r"(?:down|up)_blocks\.(\d+)\.(?:resnets\.(\d+)|downsampler|upsampler|upsamplers\.0)\.(.+)", rest).groups()
    stage_resnets = resnets if part == "encoder" else resnets + 1  # the stage's resample comes after them
    block = int(resnet) if resnet is not None else stage_resnets
    if not residual:  # the Wan 2.1 decoder: one flat list
        return f"upsamples.{int(stage) * (stage_resnets + 1) + block}.{_resnet(tail)}"
    blocks = "downsamples" if part == "encoder" else "upsamples"
    return f"{blocks}.{stage}.{blocks}.{block}.{_resnet(tail)}"


def vae_to_original(state: dict[str, torch.Tensor], resnets: int, residual: bool) -> dict[str, torch.Tensor]:
    """`resnets` is the VAE's num_res_blocks; `residual` the Wan 2.2 layout."""
    out = {}
    for name, tensor in state.items():
        part, rest = name.split(".", 1)
        if part in _VAE_CONVS:
            out[f"{_VAE_CONVS[part]}.{rest}"] = tensor
        else:
            out[f"{part}.{_original_coder_name(part, rest, resnets, residual)}"] = tensor
    return out


def comfy_umt5(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI's T5 has `shared` only (no `encoder.embed_tokens`) and carries its sentencepiece model."""
    out = {k: v for k, v in state.items() if k != "encoder.embed_tokens.weight"}
    out["spiece_model"] = torch.frombuffer(bytearray(b"sentencepiece model bytes"), dtype=torch.uint8)
    return out


def comfy_clip_vision(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI stores CLIPVisionModelWithProjection names: `vision_model.` + the tower, and its projection."""
    out = {f"vision_model.{k}": v for k, v in state.items()}
    width = state["embeddings.patch_embedding.weight"].shape[0]
    out["visual_projection.weight"] = torch.randn(1024, width)
    return out


def assert_within_fp8_rounding(loaded: torch.Tensor, original: torch.Tensor, scaled: bool, name: str) -> None:
    """fp8 e4m3 keeps 3 mantissa bits (relative error <= 2^-4); below its normal range the step is 2^-9 of
    the scale."""
    scale = float(original.abs().max()) / torch.finfo(FP8).max if scaled else 1.0
    assert torch.allclose(loaded, original, rtol=2 ** -4, atol=scale * 2 ** -9), name


def write(state: dict[str, torch.Tensor], path: Path) -> str:
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return str(path)


@pytest.fixture(scope="module")
def t2v(tiny_model):
    return WanModelLoader().load(str(tiny_model("t2v")), CPU)


@pytest.fixture(scope="module")
def bf16_folder(tiny_model, tmp_path_factory) -> Path:
    """The tiny T2V folder with its transformer stored in bf16, as the ComfyUI bf16 file is."""
    folder = tmp_path_factory.mktemp("bf16") / "model"
    shutil.copytree(tiny_model("t2v"), folder)
    transformer = WanTransformer3DModel.from_pretrained(folder / "transformer").to(torch.bfloat16)
    shutil.rmtree(folder / "transformer")
    transformer.save_pretrained(folder / "transformer")
    return folder


@pytest.fixture(scope="module")
def comfy_files(tiny_model, bf16_folder, t2v, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("comfy")
    bf16_state = load_file(str(bf16_folder / "transformer" / "diffusion_pytorch_model.safetensors"))
    files = {f"transformer_{storage}": write(comfy_transformer(bf16_state if storage == "bfloat16" else
                                                               t2v.transformer.state_dict(), storage),
                                             out / f"wan_t2v_{storage}.safetensors")
             for storage in ("bfloat16", "float16", "fp8_e4m3fn", "fp8_scaled")}
    files["vae"] = write(vae_to_original(t2v.vae.state_dict(), 1, residual=False), out / "wan_2.1_vae.safetensors")
    files["umt5"] = write(comfy_umt5(t2v.text_encoder.state_dict()), out / "umt5_xxl_fp32.safetensors")
    files["umt5_fp8_scaled"] = write(fp8_scaled(comfy_umt5(t2v.text_encoder.state_dict()), "scaled_fp8"),
                                     out / "umt5_xxl_fp8_e4m3fn_scaled.safetensors")
    return files


# --- names --------------------------------------------------------------------------------------------
def test_original_transformer_names_are_what_diffusers_converts(t2v):
    state = t2v.transformer.state_dict()
    converted = convert_wan_transformer_to_diffusers(to_original_names(state))
    assert converted.keys() == state.keys() and all(converted[k] is state[k] for k in state)


def test_our_vae_names_equal_diffusers_converter_on_the_real_wan_2_1_layout():
    """diffusers' converter lists the real VAE's indices (two resnets per stage): ours must agree there."""
    vae = AutoencoderKLWan(base_dim=4, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
                           temperal_downsample=[False, True, True])
    state = vae.state_dict()
    original = vae_to_original(state, 2, residual=False)
    for converted in (convert_wan_vae_to_diffusers(original), wan_vae_to_diffusers(original)):
        assert converted.keys() == state.keys() and all(converted[k] is state[k] for k in state)


# --- loading ------------------------------------------------------------------------------------------
def test_a_bf16_file_loads_as_the_folder_it_came_from(bf16_folder, comfy_files):
    """Same values and dtypes, including the modules diffusers keeps in float32."""
    folder = WanModelLoader().load(str(bf16_folder), CPU, transformer_dtype=DataType.BFLOAT16).transformer
    file = WanModelLoader().load(str(bf16_folder), CPU, transformer_dtype=DataType.BFLOAT16,
                                 transformer_override=comfy_files["transformer_bfloat16"]).transformer
    expected, loaded = folder.state_dict(), file.state_dict()
    assert {k: v.dtype for k, v in loaded.items()} == {k: v.dtype for k, v in expected.items()}
    assert all(torch.equal(loaded[k], v) for k, v in expected.items())
    assert expected["condition_embedder.time_embedder.linear_1.weight"].dtype == torch.float32


@pytest.mark.parametrize("storage", ["float16", "fp8_e4m3fn", "fp8_scaled"])
def test_transformer_file_dequantizes_to_the_original_weights(t2v, tiny_model, comfy_files, storage):
    file = comfy_files[f"transformer_{storage}"]
    model = WanModelLoader().load(str(tiny_model("t2v")), CPU, transformer_override=file)
    expected, loaded = t2v.transformer.state_dict(), model.transformer.state_dict()
    assert loaded.keys() == expected.keys()
    for name, weight in expected.items():
        if storage == "float16":
            assert torch.equal(loaded[name], weight.half().float()), name
        else:
            assert_within_fp8_rounding(loaded[name], weight, storage == "fp8_scaled", name)


def test_fp8_scaled_dequantizes_as_comfyui(tiny_model, comfy_files):
    """ComfyUI's full-precision weight: the fp8 weight as float32 times scale_weight."""
    file = comfy_files["transformer_fp8_scaled"]
    raw = load_file(file)
    model = WanModelLoader().load(str(tiny_model("t2v")), CPU, transformer_override=file)
    q = raw["model.diffusion_model.blocks.0.self_attn.q.weight"]
    scale = raw["model.diffusion_model.blocks.0.self_attn.q.scale_weight"]
    assert torch.equal(model.transformer.blocks[0].attn1.to_q.weight, q.float() * scale)


@pytest.mark.parametrize("variant, residual, resample", [
    ("t2v", False, "decoder.upsamples.2.time_conv.weight"),  # flat: 2 resnets, then the stage's resample
    ("ti2v", True, "decoder.upsamples.0.upsamples.2.time_conv.weight"),
])
def test_vae_file_in_comfyui_names_is_the_folders_vae(tiny_model, tmp_path, variant, residual, resample):
    folder = WanModelLoader().load(str(tiny_model(variant)), CPU)
    original = vae_to_original(folder.vae.state_dict(), 1, residual)
    # the keys ComfyUI's comfy/sd.py tells the two VAEs apart by, and one of each layout
    assert "decoder.middle.0.residual.0.gamma" in original and resample in original
    assert ("decoder.upsamples.0.upsamples.0.residual.2.weight" in original) == residual
    file = write({k: v.to(torch.bfloat16) for k, v in original.items()}, tmp_path / "vae.safetensors")
    model = WanModelLoader().load(str(tiny_model(variant)), CPU, vae_override=file)
    expected = folder.vae.state_dict()
    assert all(torch.equal(model.vae.state_dict()[k], v.to(torch.bfloat16).float()) for k, v in expected.items())


def test_the_low_noise_expert_takes_its_own_file(tiny_model, tmp_path):
    folder = WanModelLoader().load(str(tiny_model("a14b")), CPU)
    file = write(comfy_transformer(folder.transformer_2.state_dict(), "fp8_scaled"), tmp_path / "low.safetensors")
    model = WanModelLoader().load(str(tiny_model("a14b")), CPU, transformer_2_override=file)
    name = "blocks.0.attn1.to_q.weight"
    high, low = model.transformer.state_dict()[name], model.transformer_2.state_dict()[name]
    assert torch.equal(high, folder.transformer.state_dict()[name])
    assert_within_fp8_rounding(low, folder.transformer_2.state_dict()[name], True, name)


def test_text_encoder_file_gives_the_folders_embeddings(t2v, tiny_model, comfy_files):
    prompts = ["a red circle", "two squares"]
    model = WanModelLoader().load(str(tiny_model("t2v")), CPU, text_encoder_override=comfy_files["umt5"])
    assert torch.equal(model.encode_prompts(prompts), t2v.encode_prompts(prompts))
    fp8 = WanModelLoader().load(str(tiny_model("t2v")), CPU, text_encoder_override=comfy_files["umt5_fp8_scaled"])
    error = fp8.encode_prompts(prompts) - t2v.encode_prompts(prompts)
    assert error.norm() < 0.1 * t2v.encode_prompts(prompts).norm()  # fp8 rounding, through two layers


def test_image_encoder_file_gives_the_folders_embeddings(tiny_model, tmp_path):
    folder = WanModelLoader().load(str(tiny_model("i2v")), CPU)
    file = write(comfy_clip_vision(folder.image_encoder.state_dict()), tmp_path / "clip_vision_h.safetensors")
    model = WanModelLoader().load(str(tiny_model("i2v")), CPU, image_encoder_override=file)
    images = [torch.randint(0, 255, (40, 56, 3), dtype=torch.uint8).numpy()]
    assert torch.equal(model.encode_images(images), folder.encode_images(images))


def test_vit_h_config_is_derived_from_a_file_without_one(tiny_model, tmp_path):
    """clip_vision_h: width 1280 means ViT-H/14 (16 heads); the other sizes come from the shapes."""
    config = CLIPVisionConfig(hidden_size=1280, intermediate_size=64, num_hidden_layers=1, num_attention_heads=16,
                              image_size=224, patch_size=14, hidden_act="gelu", layer_norm_eps=1e-5)
    torch.manual_seed(0)
    reference = CLIPVisionModel(config).eval()
    file = write(comfy_clip_vision(reference.state_dict()), tmp_path / "clip_vision_h.safetensors")
    encoder, processor = WanModelLoader.load_image_encoder(str(tmp_path / "no-configs"), CPU, override=file)
    assert (encoder.config.num_attention_heads, encoder.config.num_hidden_layers) == (16, 1)
    # Wan's own image_processor (OpenAI CLIP at 224 px), as the tiny I2V folder mirrors it
    wan_processor = CLIPImageProcessor.from_pretrained(tiny_model("i2v") / "image_processor")
    assert processor.to_dict() == wan_processor.to_dict()
    pixels = torch.randn(1, 3, 224, 224)
    assert torch.equal(encoder(pixels).last_hidden_state, reference(pixels).last_hidden_state)
    # a T2V base takes it as its CLIP too (E2V without e2v.image_encoder_model_name)
    t2v = WanModelLoader().load(str(tiny_model("t2v")), CPU, image_encoder_override=file)
    assert t2v.image_encoder.config.hidden_size == 1280 and t2v.image_processor.to_dict() == wan_processor.to_dict()


def test_a_folder_of_configs_and_the_tokenizer_is_enough(t2v, tiny_model, comfy_files, tmp_path):
    """What docs/models.md lists: model_index.json, tokenizer/, scheduler/, transformer/ + vae/ config.json."""
    full, minimal = tiny_model("t2v"), tmp_path / "minimal"
    for part in ("model_index.json", "tokenizer", "scheduler", "transformer/config.json", "vae/config.json"):
        (minimal / part).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (full / part).is_dir() else shutil.copy
        copy(full / part, minimal / part)
    model = WanModelLoader().load(str(minimal), CPU, transformer_override=comfy_files["transformer_float16"],
                                  vae_override=comfy_files["vae"], text_encoder_override=comfy_files["umt5"])
    assert model.text_encoder.config.num_layers == t2v.text_encoder.config.num_layers  # read off the shapes
    assert torch.equal(model.encode_prompts(["a red circle"]), t2v.encode_prompts(["a red circle"]))


# --- training -----------------------------------------------------------------------------------------
def first_loss(model_dir: Path, video_dataset: Path, work: Path, **overrides) -> float:
    losses: list[float] = []
    config = TrainConfig.from_dict(train_config_dict(model_dir, video_dataset, work, max_steps=1, **overrides))
    trainer = GenericTrainer(config, TrainCallbacks(on_update=lambda update: losses.append(update.loss)))
    trainer.start()
    trainer.train()
    trainer.end()
    return losses[0]


@pytest.mark.parametrize("dtype", ["BFLOAT16", "FLOAT32"])
def test_training_on_comfyui_files_equals_training_on_the_folder(bf16_folder, video_dataset, comfy_files, tmp_path,
                                                                  dtype):
    """bf16 transformer file + single-file VAE against the (bf16) folder they were written from."""
    dtypes = {"transformer_dtype": dtype, "train_dtype": dtype}
    folder_loss = first_loss(bf16_folder, video_dataset, tmp_path / "folder", **dtypes)
    file_loss = first_loss(bf16_folder, video_dataset, tmp_path / "files", **dtypes,
                           transformer_override=comfy_files["transformer_bfloat16"], vae_override=comfy_files["vae"])
    assert abs(file_loss - folder_loss) <= 1e-5


def test_a_cache_made_with_the_folder_is_not_reused_with_override_files(tiny_model, video_dataset, comfy_files,
                                                                           tmp_path):
    """Cache entries are keyed on where each encoder's weights came from: switching to an override file
    (or between two) encodes again instead of training on the other encoder's latents."""
    def encoder_calls(**overrides) -> int:
        config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **overrides))
        trainer = GenericTrainer(config)
        trainer.start()
        trainer.close()
        return trainer.data.encoder_calls

    assert encoder_calls() == 6  # 3 clips: VAE + UMT5 each
    assert encoder_calls() == 0  # warm
    assert encoder_calls(vae_override=comfy_files["vae"]) == 3  # the VAE's entries again, captions reused
    assert encoder_calls(vae_override=comfy_files["vae"], text_encoder_override=comfy_files["umt5"]) == 3
    assert encoder_calls(vae_override=comfy_files["vae"], text_encoder_override=comfy_files["umt5"]) == 0


def test_training_on_an_fp8_scaled_transformer(tiny_model, video_dataset, comfy_files, tmp_path):
    reference = first_loss(tiny_model("t2v"), video_dataset, tmp_path / "folder")
    loss = first_loss(tiny_model("t2v"), video_dataset, tmp_path / "fp8",
                      transformer_override=comfy_files["transformer_fp8_scaled"])
    assert abs(loss - reference) <= 0.01 * reference  # fp8 rounding of the frozen weights
    assert (tmp_path / "fp8" / "output" / "lora.safetensors").is_file()


# --- files of the wrong kind --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wrong_files(tiny_model, comfy_files, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("wrong")
    # another size, as a 1.3B file for a 14B folder: 3 blocks of width 48
    other = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=3, attention_head_dim=16,
                                  in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=64, num_layers=3,
                                  cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=1024)
    ti2v = WanModelLoader().load(str(tiny_model("ti2v")), CPU)
    i2v = WanModelLoader().load(str(tiny_model("i2v")), CPU)
    (out / "notes.safetensors").write_text("not a model")
    umt5 = {k: v for k, v in load_file(comfy_files["umt5"]).items() if k != "shared.weight"}
    return {**comfy_files,
            "other": write(to_original_names(other.state_dict()), out / "wan_other.safetensors"),
            "wan2.2_vae": write(vae_to_original(ti2v.vae.state_dict(), 1, residual=True), out / "wan22.safetensors"),
            "clip_without_config": write(comfy_clip_vision(i2v.image_encoder.state_dict()), out / "clip.safetensors"),
            "umt5_without_embeddings": write(umt5, out / "umt5_cut.safetensors"),
            "not_safetensors": str(out / "notes.safetensors")}


@pytest.mark.parametrize("key, file, message", [
    ("text_encoder_override", "vae", "holds a Wan VAE (ComfyUI's vae/), not a UMT5 text encoder"),
    ("vae_override", "umt5", "holds a UMT5 text encoder (ComfyUI's text_encoders/umt5_xxl_*), not a Wan VAE"),
    ("image_encoder_override", "transformer_bfloat16",
     "holds a Wan transformer (ComfyUI's diffusion_models/), not a CLIP"),
    ("transformer_override", "other", "does not match the base model's transformer (the file's is 3 blocks of width "
                                      "48, 16 input channels, base_model_name's config says 2 blocks of width 32"),
    ("vae_override", "wan2.2_vae", "does not match the base model's VAE (the file's is a Wan 2.2 VAE (z 48), "
                                   "base_model_name's config says a Wan 2.1 VAE (z 16))"),
    ("image_encoder_override", "clip_without_config",
     "is a CLIP of width 32, whose head count its weights do not tell"),
    ("text_encoder_override", "umt5_without_embeddings", "lacks the tensor 'shared.weight'"),
    ("text_encoder_override", "not_safetensors", "is not a readable safetensors file"),
])
def test_a_file_of_the_wrong_kind_is_one_line_naming_the_key(tiny_model, wrong_files, key, file, message):
    with pytest.raises(UserError) as error:
        WanModelLoader().load(str(tiny_model("t2v")), CPU, **{key: wrong_files[file]})
    text = str(error.value)
    assert text.startswith(f"config key '{key}': '{wrong_files[file]}'") and message in text and "\n" not in text


def test_sample_py_generates_from_comfyui_files(tiny_model, comfy_files, tmp_path):
    from tests.script_runner import run_script

    out = tmp_path / "clip.mp4"
    run = run_script("sample.py", "--model", str(tiny_model("t2v")), "--transformer-file",
                     comfy_files["transformer_fp8_scaled"], "--vae-file", comfy_files["vae"], "--text-encoder-file",
                     comfy_files["umt5"], "--prompt", "a red circle", "--frames", "5", "--height", "32", "--width",
                     "32", "--steps", "2", "--output", str(out))
    assert run.returncode == 0, run.stderr
    assert out.is_file() and out.with_suffix(".png").is_file()
