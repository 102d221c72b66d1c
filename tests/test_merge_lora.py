"""Merged exports (`scripts/merge_lora.py`, `modules/modelSaver/merged_model.py`): merged weights are base +
strength·delta, the diffusers folder and the ComfyUI single file load where they should, and an E2V model
trained on a T2V base is exported as a Wan I2V model that `WanImageToVideoPipeline` runs like our sampler."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file

from modules.modelFile.lora_formats import COMFY_LORA, DIFFUSERS_LORA, LoRALayer, LoRAWeights
from modules.modelFile.lora_header import TRANSFORMER_CONFIG_KEY
from modules.modelFile.original_keys import original_key
from modules.modelSaver.merged_model import COMFY, DIFFUSERS, MergeInputs, export_e2v_as_i2v, merge_lora_into_model
from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
from modules.modelSaver.WanModelSaver import WanModelSaver
from modules.util.enum import DataType
from tests.conftest import REPO_ROOT, train_config_dict
from tests.script_runner import run_script

VARIANT_TAGS = {"t2v": "wan-2.1-t2v", "i2v": "wan-2.1-i2v", "ti2v": "wan-2.2-ti2v", "a14b": "wan-2.2-a14b-t2v",
                "a14b_i2v": "wan-2.2-a14b-i2v"}
LORA_MODULES = ("blocks.0.attn1.to_q", "blocks.1.attn2.to_v", "blocks.1.ffn.net.0.proj")
TRANSFORMERS = ("transformer", "transformer_2")


def random_lora(seed: int, in_features: dict[str, int], out_features: dict[str, int]) -> LoRAWeights:
    g = torch.Generator().manual_seed(seed)
    return LoRAWeights(layers={module: LoRALayer(torch.randn(4, in_features[module], generator=g),
                                                 torch.randn(out_features[module], 4, generator=g) * 0.1, 2.0 + seed)
                               for module in LORA_MODULES})


def base_state(model_dir: Path, expert: int = 0) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / TRANSFORMERS[expert] / "diffusion_pytorch_model.safetensors"))


def write_lora(model_dir: Path, variant: str, folder: Path, fmt: str = COMFY_LORA, seed: int = 1) -> Path:
    """A random LoRA file of `variant` (one per expert for two-expert models); returns the (first) file."""
    state = base_state(model_dir)
    shapes = {m: state[f"{m}.weight"].shape for m in LORA_MODULES}
    path = folder / "lora.safetensors"
    paths = [path] if variant != "a14b" else [folder / "lora_high_noise.safetensors", folder / "lora_low_noise.safetensors"]
    for expert, file in enumerate(paths):
        weights = random_lora(seed + expert, {m: s[1] for m, s in shapes.items()}, {m: s[0] for m, s in shapes.items()})
        save_lora(weights, file, fmt, lora_metadata(VARIANT_TAGS[variant]))
    return paths[0]


def expected_merge(base: dict[str, torch.Tensor], lora_file: Path, strength: float) -> dict[str, torch.Tensor]:
    """base + strength · up @ down · alpha / rank, read straight from the COMFY_LORA file's tensors."""
    lora = load_file(str(lora_file))
    expected = {name: tensor.float().clone() for name, tensor in base.items()}
    for module in LORA_MODULES:
        key = f"diffusion_model.{original_key(module + '.weight').removesuffix('.weight')}"
        down, up, alpha = lora[f"{key}.lora_down.weight"], lora[f"{key}.lora_up.weight"], lora[f"{key}.alpha"]
        expected[f"{module}.weight"] += strength * (up @ down * alpha / down.shape[0])
    return expected


def max_error(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    assert actual.keys() == expected.keys()
    return max(float((actual[k].float() - expected[k]).abs().max()) for k in expected)


# ------------------------------------------------------------------------------------------ (a) merge


@pytest.mark.parametrize("variant", ["t2v", "i2v", "a14b"])
def test_merged_transformer_is_base_plus_strength_times_delta(variant, tiny_model, tmp_path):
    model_dir = tiny_model(variant)
    lora = write_lora(model_dir, variant, tmp_path)
    out = merge_lora_into_model(MergeInputs(model_dir, lora, strength=0.7), tmp_path / "merged", DIFFUSERS)[0]
    experts = 2 if variant == "a14b" else 1
    loras = [lora] if experts == 1 else [lora, tmp_path / "lora_low_noise.safetensors"]
    for expert in range(experts):
        base = base_state(model_dir, expert)
        expected = expected_merge(base, loras[expert], 0.7)
        merged = base_state(out, expert)
        error = max_error(merged, expected)
        print(f"{variant} {TRANSFORMERS[expert]}: max |merged - (base + 0.7 delta)| = {error:.2e} (fp32)")
        assert error < 1e-6
        assert all(merged[k].dtype == base[k].dtype for k in base)  # the folder keeps the base's dtype
        changed = {f"{m}.weight" for m in LORA_MODULES}
        assert all(torch.equal(merged[k], base[k]) for k in base if k not in changed)
        assert not any(torch.equal(merged[k], base[k]) for k in changed)


def test_a_diffusers_lora_merges_to_the_same_weights_as_its_comfy_copy(tiny_model, tmp_path):
    """The file format is the reader's business: a DIFFUSERS_LORA (alpha baked into lora_B) merges to the
    weights its COMFY_LORA twin gives."""
    model_dir = tiny_model("t2v")
    comfy = write_lora(model_dir, "t2v", tmp_path / "comfy", COMFY_LORA)
    diffusers = write_lora(model_dir, "t2v", tmp_path / "diffusers", DIFFUSERS_LORA)
    expected = expected_merge(base_state(model_dir), comfy, 1.0)
    out = merge_lora_into_model(MergeInputs(model_dir, diffusers), tmp_path / "merged", DIFFUSERS)[0]
    assert max_error(base_state(out), expected) < 1e-6


@pytest.mark.parametrize("prefix", ["", "model.diffusion_model."])
def test_a_base_trained_with_a_single_file_transformer_merges_onto_that_file(prefix, tiny_model, tmp_path):
    """`transformer_override` (a ComfyUI file in original names): the merge reads the base weights from it."""
    from safetensors.torch import save_file

    model_dir = tiny_model("t2v")
    base = {name: tensor + 1.0 for name, tensor in base_state(model_dir).items()}  # not the folder's weights
    override = tmp_path / "base.safetensors"
    save_file({prefix + original_key(name): tensor for name, tensor in base.items()}, str(override))
    lora = write_lora(model_dir, "t2v", tmp_path)
    inputs = MergeInputs(model_dir, lora, overrides=(str(override), ""))
    out = merge_lora_into_model(inputs, tmp_path / "merged", DIFFUSERS)[0]
    assert max_error(base_state(out), expected_merge(base, lora, 1.0)) < 1e-6


# ---------------------------------------------------------------------- (b) where the outputs load


def test_merged_folder_loads_in_diffusers(tiny_model, tmp_path):
    from diffusers import DiffusionPipeline, WanPipeline

    model_dir = tiny_model("t2v")
    lora = write_lora(model_dir, "t2v", tmp_path)
    out = merge_lora_into_model(MergeInputs(model_dir, lora), tmp_path / "merged", DIFFUSERS)[0]
    pipe = DiffusionPipeline.from_pretrained(out)
    assert isinstance(pipe, WanPipeline)
    loaded = pipe.transformer.state_dict()
    assert max_error(loaded, expected_merge(base_state(model_dir), lora, 1.0)) < 1e-6


def test_sharded_transformer_folders_are_written_and_read_like_save_pretrained(tiny_model, tmp_path):
    """Real Wan folders are sharded: our writer shards like `save_pretrained` (index + numbered files),
    diffusers loads that, and the merge reads a sharded base back tensor by tensor."""
    from diffusers import WanTransformer3DModel

    from modules.modelFile.weight_merge import folder_source, read_config
    from modules.modelSaver.diffusers_folder import write_transformer_folder
    from modules.util.model_folders import WEIGHTS_INDEX_NAME
    from modules.util.safetensors_io import TensorSpec

    base = base_state(tiny_model("t2v"))
    specs = {name: TensorSpec(t.dtype, tuple(t.shape)) for name, t in base.items()}
    folder = tmp_path / "sharded"
    write_transformer_folder(folder, read_config(tiny_model("t2v") / "transformer"), specs, base.__getitem__,
                             class_name="WanTransformer3DModel", max_shard_bytes=20_000)
    assert (folder / WEIGHTS_INDEX_NAME).is_file() and len(list(folder.glob("*-of-*.safetensors"))) > 2
    loaded = WanTransformer3DModel.from_pretrained(folder).state_dict()
    assert max_error(loaded, base) == 0.0
    source = folder_source(folder)
    assert sorted(source.names()) == sorted(base) and all(torch.equal(source.tensor(k), base[k]) for k in base)


def e2v_expanded_t2v_state(clip: bool = True) -> dict[str, torch.Tensor]:
    from modules.modelSetup.e2v_expansion import expand_transformer
    from modules.synthetic.tiny_model import VARIANTS, _transformer

    return expand_transformer(_transformer(VARIANTS["t2v"]), 4, 32 if clip else None)[0].state_dict()


@pytest.mark.parametrize("variant", ["t2v", "i2v", "ti2v", "a14b", "a14b_i2v", "e2v_t2v"])
def test_original_names_round_trip_through_diffusers_converter(variant):
    """diffusers' own `convert_wan_transformer_to_diffusers` turns our original names back into the exact
    state dict, for every variant's transformer and the E2V-expanded T2V one."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    from modules.synthetic.tiny_model import VARIANTS, _transformer

    state = e2v_expanded_t2v_state() if variant == "e2v_t2v" else _transformer(VARIANTS[variant]).state_dict()
    original = {original_key(name): tensor for name, tensor in state.items()}
    assert len(original) == len(state)
    converted = convert_wan_transformer_to_diffusers(dict(original))
    assert converted.keys() == state.keys()
    assert all(converted[name] is state[name] for name in state)


@pytest.mark.parametrize("variant", ["t2v", "a14b"])
def test_single_file_holds_the_merged_weights_in_bf16(variant, tiny_model, tmp_path):
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    model_dir = tiny_model(variant)
    lora = write_lora(model_dir, variant, tmp_path)
    folder = merge_lora_into_model(MergeInputs(model_dir, lora), tmp_path / "merged", DIFFUSERS)[0]
    files = merge_lora_into_model(MergeInputs(model_dir, lora), tmp_path / "merged.safetensors", COMFY)
    names = ["merged.safetensors"] if variant == "t2v" else ["merged_high_noise.safetensors", "merged_low_noise.safetensors"]
    assert [f.name for f in files] == names
    for expert, file in enumerate(files):
        single = load_file(str(file))
        assert {t.dtype for t in single.values()} == {torch.bfloat16}
        converted = convert_wan_transformer_to_diffusers(single)
        folder_state = base_state(folder, expert)
        assert converted.keys() == folder_state.keys()
        assert all(torch.equal(converted[k], folder_state[k].to(torch.bfloat16)) for k in folder_state)


def comfy_detects(path: Path) -> dict:
    """ComfyUI's rule for a Wan single file, as comfy/model_detection.py `detect_unet_config` has it
    (the `head.modulation` branch, without the VACE/camera/S2V/HuMo/Animate keys we never write) and the
    unet_config that comfy/supported_models.py `WAN21_T2V` / `WAN21_I2V` match."""
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
        assert "head.modulation" in keys  # "Wan 2.1" (also every Wan 2.2 transformer)
        assert {"head.head.weight", "blocks.0.ffn.0.weight"} <= keys  # read by the same branch
        in_dim = f.get_slice("patch_embedding.weight").get_shape()[1]
    model_type = "i2v" if "img_emb.proj.0.bias" in keys else "t2v"
    if model_type == "i2v" and in_dim == 36:
        return {"model_type": model_type, "in_dim": in_dim, "model": "WAN21_I2V"}
    return {"model_type": model_type, "in_dim": in_dim, "model": "WAN21_T2V"}  # 36 channels: concat conditioning


# ------------------------------------------------------------------ E2V export (synthetic LoRA, fast)


def e2v_lora(model_dir: Path, folder: Path, two_experts: bool, clip: bool = True) -> Path:
    """What an E2V run on a T2V base saves (`WanModelSaver.save_lora`): LoRA layers, the expanded and new
    weights in full, and the expanded config in the header. Two experts: only the high-noise expert's.
    `clip` False: the VAE pathway alone (no image cross-attention)."""
    expanded = e2v_expanded_t2v_state(clip)
    g = torch.Generator().manual_seed(5)
    base = base_state(model_dir)
    full = {name: torch.randn(tensor.shape, generator=g) * (0.05 if name in base else 0.5)  # new: the image branch
            for name, tensor in expanded.items() if name not in base or base[name].shape != tensor.shape}
    weights = random_lora(3, {m: base[f"{m}.weight"].shape[1] for m in LORA_MODULES},
                          {m: base[f"{m}.weight"].shape[0] for m in LORA_MODULES})
    weights.full_weights = full
    config = json.loads((model_dir / "transformer" / "config.json").read_text())
    config.update(in_channels=36, **({"image_dim": 32, "added_kv_proj_dim": 32} if clip else {}))
    metadata = {**lora_metadata(VARIANT_TAGS["a14b" if two_experts else "t2v"]), TRANSFORMER_CONFIG_KEY: json.dumps(config)}
    path = folder / ("lora_high_noise.safetensors" if two_experts else "lora.safetensors")
    save_lora(weights, path, DIFFUSERS_LORA, metadata)
    return path


def test_e2v_lora_of_a_t2v_base_exports_as_wan_i2v(tiny_model, tmp_path):
    from diffusers import DiffusionPipeline, WanImageToVideoPipeline

    model_dir = tiny_model("t2v")
    lora = e2v_lora(model_dir, tmp_path, two_experts=False)
    inputs = MergeInputs(model_dir, lora, image_encoder_dir=tiny_model("i2v"))
    written = export_e2v_as_i2v(inputs, tmp_path / "lora")
    assert [p.name for p in written] == ["lora-i2v", "lora-i2v.safetensors"]
    pipe = DiffusionPipeline.from_pretrained(written[0])
    assert isinstance(pipe, WanImageToVideoPipeline)
    assert pipe.transformer.config.in_channels == 36 and pipe.transformer.config.image_dim == 32
    assert pipe.image_encoder is not None and pipe.image_processor is not None
    full = load_file(str(lora))
    state = pipe.transformer.state_dict()
    assert torch.equal(state["patch_embedding.weight"], full["wantrainer_full_weights.patch_embedding.weight"])
    assert comfy_detects(written[1]) == {"model_type": "i2v", "in_dim": 36, "model": "WAN21_I2V"}


def test_vae_pathway_e2v_lora_exports_as_a_wan_i2v_without_clip(tiny_model, tmp_path):
    """Without the CLIP pathway the export has no image branch: no image encoder is needed, and ComfyUI reads
    the file as it reads Wan 2.2 I2V A14B's (a "t2v" kind with 36 input channels, image by concatenation)."""
    from diffusers import WanImageToVideoPipeline

    model_dir = tiny_model("t2v")
    lora = e2v_lora(model_dir, tmp_path, two_experts=False, clip=False)
    written = export_e2v_as_i2v(MergeInputs(model_dir, lora), tmp_path / "lora")
    pipe = WanImageToVideoPipeline.from_pretrained(written[0])
    assert pipe.transformer.config.in_channels == 36 and pipe.transformer.config.image_dim is None
    assert pipe.image_encoder is None
    assert comfy_detects(written[1]) == {"model_type": "t2v", "in_dim": 36, "model": "WAN21_T2V"}


def test_e2v_export_of_a_two_expert_base_expands_the_untrained_expert(tiny_model, tmp_path):
    """A14B trained on the high-noise expert only: the low-noise one is expanded as our sampler expands it
    (new inputs zero, image branch a no-op), so both experts take the 36-channel I2V input."""
    from diffusers import WanImageToVideoPipeline

    model_dir = tiny_model("a14b")
    lora = e2v_lora(model_dir, tmp_path, two_experts=True)
    written = export_e2v_as_i2v(MergeInputs(model_dir, lora, image_encoder_dir=tiny_model("i2v")), tmp_path / "lora")
    assert [p.name for p in written] == ["lora-i2v", "lora-i2v_high_noise.safetensors", "lora-i2v_low_noise.safetensors"]
    pipe = WanImageToVideoPipeline.from_pretrained(written[0])
    low = pipe.transformer_2.state_dict()
    base_low = base_state(model_dir, 1)
    assert torch.equal(low["patch_embedding.weight"][:, :16], base_low["patch_embedding.weight"])
    assert not low["patch_embedding.weight"][:, 16:].any()
    assert not any(low[k].any() for k in low if ".add_v_proj." in k)
    assert all(comfy_detects(p)["model"] == "WAN21_I2V" for p in written[1:])


def test_plain_merges_are_detected_as_their_own_kind(tiny_model, tmp_path):
    for variant, expected in (("t2v", ("t2v", 16)), ("i2v", ("i2v", 36))):
        lora = write_lora(tiny_model(variant), variant, tmp_path / variant)
        file = merge_lora_into_model(MergeInputs(tiny_model(variant), lora), tmp_path / f"{variant}.safetensors", COMFY)[0]
        detected = comfy_detects(file)
        assert (detected["model_type"], detected["in_dim"]) == expected


def test_refusals_name_what_to_do_and_write_nothing(tiny_model, tmp_path):
    from modules.util.errors import UserError

    model_dir = tiny_model("t2v")
    e2v = e2v_lora(model_dir, tmp_path, two_experts=False)
    with pytest.raises(UserError, match="--image-encoder"):  # the I2V folder needs the run's CLIP
        merge_lora_into_model(MergeInputs(model_dir, e2v), tmp_path / "merged", DIFFUSERS)
    other = tmp_path / "notes"
    (other / "keep.txt").parent.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="holds no model"):  # a folder output is replaced: never a user's folder
        merge_lora_into_model(MergeInputs(model_dir, write_lora(model_dir, "t2v", tmp_path)), other, DIFFUSERS)
    with pytest.raises(UserError, match="is the same path as --model"):
        merge_lora_into_model(MergeInputs(model_dir, write_lora(model_dir, "t2v", tmp_path)), model_dir, DIFFUSERS)
    wide = tmp_path / "wide.safetensors"  # a t2v LoRA of a wider model (another size)
    save_lora(LoRAWeights(layers={"blocks.0.attn1.to_q": LoRALayer(torch.zeros(4, 64), torch.zeros(32, 4), 4.0)}),
              wide, COMFY_LORA, lora_metadata("wan-2.1-t2v"))
    with pytest.raises(UserError, match=r"do not fit.*blocks\.0\.attn1\.to_q"):
        merge_lora_into_model(MergeInputs(model_dir, wide), tmp_path / "merged", DIFFUSERS)
    assert not (tmp_path / "merged").exists() and (other / "keep.txt").read_text() == "mine"


# ------------------------------------------------------------------------------------------ (d) CLI


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "merge_lora.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def run_in_process(*args) -> subprocess.CompletedProcess:
    """The same script in this process (test_cli_writes_the_merged_folder runs it as a real one)."""
    return run_script("merge_lora.py", *args)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_cli_writes_the_merged_folder(tiny_model, tmp_path):
    model_dir = tiny_model("t2v")
    lora = write_lora(model_dir, "t2v", tmp_path)
    result = run_cli("--model", model_dir, "--lora", lora, "--strength", "0.5", "--output", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-2000:]
    assert max_error(base_state(tmp_path / "out"), expected_merge(base_state(model_dir), lora, 0.5)) < 1e-6


def test_cli_refuses_bad_inputs_in_one_line(tiny_model, tmp_path):
    model_dir = tiny_model("t2v")
    other = write_lora(tiny_model("i2v"), "i2v", tmp_path)
    (tmp_path / "a_file").write_text("x")
    line = one_line_error(run_in_process("--model", model_dir, "--lora", other, "--output", tmp_path / "out"))
    assert "wan-2.1-i2v" in line and "t2v" in line
    line = one_line_error(run_in_process("--model", model_dir, "--lora", other, "--output",
                                         tmp_path / "a_file" / "out.safetensors"))
    assert "--output" in line and "a_file" in line
    line = one_line_error(run_in_process("--model", model_dir, "--lora", other, "--output", tmp_path / "o", "--format",
                                         "ckpt"))
    assert "--format" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


# ------------------------------------------------------------------- (c) the export against our sampler


def sampler_and_pipeline(tiny_model, lora: Path, export: Path, image: Path):
    """Our E2V sampler with `lora` on the T2V base, and `WanImageToVideoPipeline` on the export, on the same
    inputs: (our denoised latents, our decoded video, the pipeline's latents, its video in [0, 1]).

    The pipeline conditions on one image: with ONE element of repeat 1 our E2V conditioning is exactly Wan
    I2V's (docs/e2v.md §4: P = 1 gives the plain I2V mask, the VAE clip is [image, zero frames], CLIP encodes
    that one image). The image is 32×32, the video size, and our CLIP resolution is set to 32×32 too, so
    both pad_white steps leave the pixels as they are and the pipeline's own image path (its CLIP processor,
    its VAE preprocessing) sees the pixels ours sees. Same seed, steps, CFG (text only, as A2), negative (none) and scheduler (the folder's)."""
    from modules.config.train_config import SampleConfig
    from modules.modelLoader.lora_inference import attach_lora_for_inference
    from modules.modelLoader.WanModelLoader import WanModelLoader
    from modules.modelSampler.WanModelSampler import E2VSamplingOptions, WanModelSampler

    sample = SampleConfig.from_dict({"prompt": "a red circle", "elements": [str(image)], "frames": 9, "height": 32,
                                     "width": 32, "steps": 3, "cfg_scale": 4.0, "seed": 11,
                                     "sampler": "diffusers_default", "negative_prompt": ""}, "sample")
    model = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu"))
    model.image_encoder, model.image_processor = WanModelLoader.load_image_encoder(str(tiny_model("i2v")), model.train_device)
    attach_lora_for_inference(model, lora)
    ours = {}
    decode = model.decode_latents

    def capture(latents):  # what our sampler decodes, before it drops the 4K reference frames
        ours["latents"], ours["video"] = latents.clone(), decode(latents)
        return ours["video"]

    model.decode_latents = capture
    WanModelSampler(model, E2VSamplingOptions(clip_resolution=(32, 32))).generate_e2v(sample, show_progress=False)

    latents, video = pipeline_outputs(export, image)
    return ours["latents"], ours["video"] / 2 + 0.5, latents, video


def pipeline_outputs(export: Path, image: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """`WanImageToVideoPipeline` on the export: (denoised latents, video (1, 3, F, H, W) in [0, 1])."""
    from diffusers import WanImageToVideoPipeline

    pipe = WanImageToVideoPipeline.from_pretrained(export)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(image=Image.open(image), prompt="a red circle", height=32, width=32, num_frames=9,
                  num_inference_steps=3, guidance_scale=4.0)
    latents = pipe(**kwargs, generator=torch.Generator().manual_seed(11), output_type="latent").frames
    video = pipe(**kwargs, generator=torch.Generator().manual_seed(11), output_type="pt").frames  # (1, F, 3, H, W)
    return latents, video.permute(0, 2, 1, 3, 4)


def reference_image(folder: Path) -> Path:
    """A 32×32 RGB image: the video size, so that no preprocessing changes it (see `sampler_and_pipeline`)."""
    path = folder / "reference.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
    return path


def compare(label: str, outputs) -> tuple[float, float]:
    our_latents, our_video, latents, video = outputs
    errors = float((latents - our_latents).abs().max()), float((video - our_video).abs().max())
    print(f"{label}: WanImageToVideoPipeline vs our sampler: latents {errors[0]:.2e}, video {errors[1]:.2e} (max abs)")
    return errors


def test_e2v_export_runs_in_wan_i2v_pipeline_like_our_sampler(tiny_model, tmp_path, monkeypatch):
    """A synthetic E2V LoRA with large new weights, so the image branch and the new input channels change
    the output a lot (checked: zero CLIP embeddings give another video); the export still matches ours."""
    from diffusers import WanImageToVideoPipeline

    lora = e2v_lora(tiny_model("t2v"), tmp_path, two_experts=False)
    export = export_e2v_as_i2v(MergeInputs(tiny_model("t2v"), lora, image_encoder_dir=tiny_model("i2v")),
                               tmp_path / "lora")[0]
    image = reference_image(tmp_path)
    outputs = sampler_and_pipeline(tiny_model, lora, export, image)
    assert max(compare("synthetic E2V LoRA", outputs)) < 1e-4
    monkeypatch.setattr(WanImageToVideoPipeline, "encode_image", lambda self, image, device=None: torch.zeros(1, 257, 32))
    blind, _ = pipeline_outputs(export, image)
    assert float((blind - outputs[2]).abs().max()) > 1e-2  # the CLIP path matters in this comparison


def test_e2v_training_writes_the_i2v_export_that_runs_like_our_sampler(tiny_model, tmp_path):
    """Train an E2V LoRA (dual pathway) on the tiny T2V base: the run writes `<stem>-i2v/` and
    `<stem>-i2v.safetensors` beside the LoRA, and the folder runs in `WanImageToVideoPipeline` like our
    sampler runs the LoRA (see `sampler_and_pipeline` for why these inputs compute the same thing)."""
    from modules.config.train_config import TrainConfig
    from modules.trainer.GenericTrainer import GenericTrainer
    from tests.conftest import e2v_on_t2v_config

    config = e2v_on_t2v_config(tiny_model, tmp_path)
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    trainer.train()
    written = trainer.end()
    out = tmp_path / "output"
    assert written == [out / "lora.safetensors", out / "lora-i2v", out / "lora-i2v.safetensors"]
    assert comfy_detects(written[2])["model"] == "WAN21_I2V"
    # the export is the trained weights, not the bf16 file (output_dtype's default): its float32 folder carries
    # no bf16 rounding, so it runs like our sampler on the same weights written in FLOAT32
    assert trainer.config.output_dtype == DataType.BFLOAT16
    exact = WanModelSaver(trainer.model, trainer.setup, dataclasses.replace(trainer.config, output_dtype=DataType.FLOAT32))
    (f32,) = exact.save_lora(tmp_path / "float32" / "lora.safetensors", trainer.config.output_model_format)
    trained = load_file(str(f32))
    exported = base_state(written[1])
    for key in ("wantrainer_full_weights.patch_embedding.weight",
                "wantrainer_full_weights.blocks.0.attn2.add_k_proj.weight"):
        name = key.removeprefix("wantrainer_full_weights.")
        assert exported[name].dtype == torch.float32 and torch.equal(exported[name], trained[key])
        assert not torch.equal(exported[name], load_file(str(written[0]))[key].float())  # the file is rounded
    outputs = sampler_and_pipeline(tiny_model, f32, written[1], reference_image(tmp_path))
    assert max(compare("trained E2V LoRA", outputs)) < 1e-4


def test_e2v_fine_tune_of_a_t2v_base_is_exported_as_wan_i2v_too(tiny_model, tmp_path):
    """A full fine-tune writes its diffusers folder; the I2V export beside it holds the same transformer in a
    `WanImageToVideoPipeline` folder with the run's image encoder."""
    from diffusers import WanImageToVideoPipeline

    from modules.config.train_config import TrainConfig
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
    from modules.trainer.GenericTrainer import GenericTrainer

    data = write_e2v_dataset(tmp_path / "data", count=1, frames=17, height=32, width=32)
    dataset = tmp_path / "dataset.json"
    dataset.write_text(json.dumps(e2v_dataset_json(data, 32, 32, 17)))
    out = tmp_path / "output" / "model"
    config = train_config_dict(tiny_model("t2v"), dataset, tmp_path, dataset_config=str(dataset), concepts=[],
                               epochs=1, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
                               output_model_destination=str(out), backup_before_save=False,
                               e2v={"image_encoder_model_name": str(tiny_model("i2v"))})
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    trainer.train()
    written = trainer.end()
    assert written == [out, out.with_name("model-i2v"), out.with_name("model-i2v.safetensors")]
    pipe = WanImageToVideoPipeline.from_pretrained(written[1])
    assert pipe.image_encoder is not None
    trained = base_state(out)
    assert max_error(pipe.transformer.state_dict(), {k: v.float() for k, v in trained.items()}) == 0.0
    assert comfy_detects(written[2])["model"] == "WAN21_I2V"
