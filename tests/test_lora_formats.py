"""LoRA file formats: peft <-> LoRAWeights <-> DIFFUSERS_LORA / COMFY_LORA / musubi files, and diffusers loading."""
from __future__ import annotations

import copy
import logging
import os
import subprocess
import sys
import warnings

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from modules.modelFile.lora_formats import (
    ALPHA_MAP_KEY,
    COMFY_LORA,
    DIFFUSERS_LORA,
    MUSUBI_LORA,
    LoRAFormatError,
    LoRALayer,
    LoRAWeights,
    apply_to_peft,
    detect_format,
    diffusers_to_wan_name,
    expert_lora_paths,
    extract_from_peft,
    from_state_dict,
    to_state_dict,
)
from modules.modelFile.lora_reading import load_lora_file
from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT

FORMATS = [DIFFUSERS_LORA, COMFY_LORA]
BLOCK_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"]
# every Linear of Wan that has an original name, with a rank and an alpha pattern
I2V_TARGETS = BLOCK_TARGETS + [
    "add_k_proj",
    "add_v_proj",
    "proj_out",
    "time_proj",
    "linear_1",
    "linear_2",
    "image_embedder.ff.net.0.proj",
    "image_embedder.ff.net.2",
]
WAN_ORIGINAL_LEAVES = {"q", "k", "v", "o", "k_img", "v_img", "0", "2", "1", "3", "head"}


class _Case:
    """A tiny Wan transformer, its base copy, the LoRA config and a peft-trained model with random lora_B."""

    def __init__(self, i2v: bool):
        from diffusers import WanTransformer3DModel
        from peft import LoraConfig

        torch.manual_seed(0)
        kwargs = dict(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=36 if i2v else 16,
            out_channels=16,
            text_dim=32,
            freq_dim=32,
            ffn_dim=32,
            num_layers=2,
            rope_max_seq_len=32,
        )
        if i2v:
            kwargs.update(image_dim=16, added_kv_proj_dim=16)
        self.base = WanTransformer3DModel(**kwargs).eval()
        if i2v:
            self.config = LoraConfig(
                r=4,
                lora_alpha=8,
                target_modules=I2V_TARGETS,
                rank_pattern={"blocks.1.attn1.to_q": 2},
                alpha_pattern={"proj_out": 3},
            )
        else:
            self.config = LoraConfig(r=4, lora_alpha=8, target_modules=BLOCK_TARGETS)
        self.trained = self.fresh()
        with torch.no_grad():
            for name, param in self.trained.named_parameters():
                if "lora_" in name:
                    param.normal_(std=0.3)
        self.inputs = dict(
            hidden_states=torch.randn(1, kwargs["in_channels"], 2, 4, 4),
            timestep=torch.tensor([500]),
            encoder_hidden_states=torch.randn(1, 5, 32),
            encoder_hidden_states_image=torch.randn(1, 3, 16) if i2v else None,
            return_dict=False,
        )
        self.expected = self.run(self.trained)
        assert (self.expected - self.run(self.base)).abs().max() > 1e-2  # the LoRA has an effect
        self.weights = extract_from_peft(self.trained)

    def fresh(self, config=None):
        model = copy.deepcopy(self.base)
        model.add_adapter(config or self.config)
        return model

    def run(self, model) -> torch.Tensor:
        with torch.no_grad():
            return model(**self.inputs)[0]


@pytest.fixture(scope="module")
def cases():
    return {"t2v": _Case(i2v=False), "i2v": _Case(i2v=True)}


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _lora_module_names(model) -> set[str]:
    from peft.tuners.lora import LoraLayer

    return {name for name, module in model.named_modules() if isinstance(module, LoraLayer) and module.lora_A}


def _save(weights, tmp_path, fmt, name="lora"):
    path = tmp_path / f"{name}_{fmt}.safetensors"
    save_lora(weights, path, fmt, lora_metadata("wan-2.1-t2v", base_model="tiny", config_hash="abc"))
    return path


def test_extract_reads_rank_and_alpha_patterns(cases):
    w = cases["i2v"].weights
    assert len(w.layers) == 2 * 12 + 8
    assert w.layers["blocks.0.attn1.to_q"].alpha == 8.0 and w.layers["blocks.0.attn1.to_q"].rank == 4
    assert w.layers["blocks.1.attn1.to_q"].rank == 2 and w.layers["blocks.1.attn1.to_q"].alpha == 8.0
    assert w.layers["proj_out"].alpha == 3.0
    assert "condition_embedder.image_embedder.ff.net.2" in w.layers


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", ["t2v", "i2v"])
def test_round_trip(cases, tmp_path, fmt, case):
    c = cases[case]
    path = _save(c.weights, tmp_path, fmt)
    loaded, metadata = load_lora_file(path)
    assert metadata["wantrainer.format"] == fmt
    assert set(loaded.layers) == set(c.weights.layers)
    for name, layer in c.weights.layers.items():
        assert loaded.layers[name].alpha == pytest.approx(layer.alpha)
        assert torch.equal(loaded.layers[name].down, layer.down)
        if layer.scale in (0.5, 1.0, 2.0):  # baking/unbaking by a power of two is exact
            assert torch.equal(loaded.layers[name].up, layer.up), name
    model = c.fresh()
    apply_to_peft(model, loaded)
    torch.testing.assert_close(c.run(model), c.expected, atol=1e-5, rtol=0)
    if case == "t2v":
        assert torch.equal(c.run(model), c.expected)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", ["t2v", "i2v"])
def test_diffusers_loads_our_file(cases, tmp_path, fmt, case):
    from diffusers import WanPipeline
    from diffusers.loaders import WanLoraLoaderMixin

    c = cases[case]
    path = _save(c.weights, tmp_path, fmt)
    records = _Records()
    logger = logging.getLogger("diffusers")
    logger.addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state_dict = WanLoraLoaderMixin.lora_state_dict(str(path))
            pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=None, transformer=copy.deepcopy(c.base))
            pipe.load_lora_weights(str(path))
    finally:
        logger.removeHandler(records)
    expected_keys = {f"transformer.{m}.lora_{x}.weight" for m in c.weights.layers for x in "AB"}
    assert set(state_dict) == expected_keys
    assert records.messages == []
    assert not [w for w in caught if "lora" in str(w.message).lower() or "key" in str(w.message).lower()]
    assert _lora_module_names(pipe.transformer) == set(c.weights.layers)
    torch.testing.assert_close(c.run(pipe.transformer), c.expected, atol=1e-5, rtol=0)


def test_comfy_file_uses_wan_original_names(cases, tmp_path):
    path = _save(cases["i2v"].weights, tmp_path, COMFY_LORA)
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
        alphas = {k: f.get_tensor(k) for k in keys if k.endswith(".alpha")}
    assert keys and all(k.startswith("diffusion_model.") for k in keys)
    for bad in ("attn1", "attn2", "to_q", "to_out", "add_k_proj", "net.0", "condition_embedder", "proj_out"):
        assert not any(bad in k for k in keys), bad
    modules = {k.removeprefix("diffusion_model.").rsplit(".", 2)[0] for k in keys if "lora_" in k}
    assert all(m.rsplit(".", 1)[1] in WAN_ORIGINAL_LEAVES for m in modules)
    assert "blocks.0.self_attn.q" in modules and "blocks.1.cross_attn.v_img" in modules
    assert {"head.head", "time_projection.1", "text_embedding.0", "time_embedding.2", "img_emb.proj.3"} <= modules
    # every block module carries an explicit alpha; the others have it baked in (diffusers' converter
    # does not consume their .alpha)
    assert {k.removeprefix("diffusion_model.").removesuffix(".alpha") for k in alphas} == {
        m for m in modules if m.startswith("blocks.")
    }
    assert all(t.ndim == 0 and t.item() == 8.0 for t in alphas.values())
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()[ALPHA_MAP_KEY] == '{"*":8.0,"proj_out":3.0}'  # to un-bake head.head & co.
    assert detect_format(dict.fromkeys(keys)) == COMFY_LORA


def test_diffusers_file_bakes_alpha_and_carries_metadata(cases, tmp_path):
    c = cases["i2v"]
    path = _save(c.weights, tmp_path, DIFFUSERS_LORA)
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
        metadata = f.metadata()
        up = f.get_tensor("transformer.blocks.0.attn1.to_q.lora_B.weight")
    assert keys == {f"transformer.{m}.lora_{x}.weight" for m in c.weights.layers for x in "AB"}
    assert torch.equal(up, c.weights.layers["blocks.0.attn1.to_q"].up * 2)  # alpha 8 / rank 4
    assert "lora_adapter_metadata" not in metadata
    assert metadata[ALPHA_MAP_KEY] == '{"*":8.0,"proj_out":3.0}'
    assert metadata["modelspec.sai_model_spec"] == "1.0.0"
    assert metadata["modelspec.architecture"] == "wan-2.1-t2v/lora"
    assert metadata["modelspec.implementation"] == "https://github.com/huggingface/diffusers"
    assert metadata["modelspec.title"] == path.stem
    assert metadata["wantrainer.rank"] == "4" and metadata["wantrainer.alpha"] == "8"
    assert metadata["wantrainer.base_model"] == "tiny" and metadata["wantrainer.config_hash"] == "abc"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind


def test_reads_musubi_file(cases, tmp_path):
    w = cases["i2v"].weights
    sd = {}
    for name, layer in w.layers.items():
        key = "lora_unet_" + diffusers_to_wan_name(name).replace(".", "_")
        sd[f"{key}.lora_down.weight"] = layer.down.contiguous()
        sd[f"{key}.lora_up.weight"] = layer.up.contiguous()
        sd[f"{key}.alpha"] = torch.tensor(layer.alpha, dtype=torch.bfloat16)
    assert "lora_unet_blocks_0_self_attn_q.alpha" in sd and "lora_unet_blocks_1_cross_attn_k_img.alpha" in sd
    assert detect_format(sd) == MUSUBI_LORA
    path = tmp_path / "musubi.safetensors"
    save_file(sd, str(path))
    loaded, _ = load_lora_file(path)
    assert set(loaded.layers) == set(w.layers)
    for name, layer in w.layers.items():
        assert loaded.layers[name].alpha == layer.alpha
        assert torch.equal(loaded.layers[name].down, layer.down) and torch.equal(loaded.layers[name].up, layer.up)


def _load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("convert_model", REPO_ROOT / "scripts" / "convert_model.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _run_convert(*args):
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "convert_model.py"), *args],
        capture_output=True,
        text=True,
        cwd=str(REPO_ROOT.parent),  # the script must find the repo by itself
        timeout=120,
    )


def test_convert_script_round_trips(cases, tmp_path):
    c = cases["i2v"]
    src = _save(c.weights, tmp_path, DIFFUSERS_LORA)
    comfy = tmp_path / "comfy.safetensors"
    back = tmp_path / "back.safetensors"
    r = _run_convert("--input", str(src), "--output", str(comfy), "--format", "COMFY_LORA")
    assert r.returncode == 0, r.stderr
    assert "COMFY_LORA" in r.stdout
    # and back, in-process (a second subprocess would only cost seconds of imports)
    assert _load_script().main(["--input", str(comfy), "--output", str(back), "--format", "DIFFUSERS_LORA"]) == 0

    comfy_weights, comfy_meta = load_lora_file(comfy)
    assert comfy_meta["wantrainer.format"] == COMFY_LORA and comfy_meta["wantrainer.base_model"] == "tiny"
    assert comfy_weights.layers["blocks.0.attn1.to_q"].alpha == 8.0  # the trained alpha, un-baked
    for path in (comfy, back):
        weights, _ = load_lora_file(path)
        model = c.fresh()
        apply_to_peft(model, weights)
        torch.testing.assert_close(c.run(model), c.expected, atol=1e-5, rtol=0)


def test_convert_script_user_error_is_one_line(tmp_path, capsys):
    script = _load_script()
    out = tmp_path / "o.safetensors"
    rc = script.main(["--input", str(tmp_path / "missing.safetensors"), "--output", str(out), "--format", "comfy_lora"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.strip().count("\n") == 0 and "missing.safetensors" in err and "Traceback" not in err
    assert not out.exists()
    with pytest.raises(SystemExit) as info:
        script.main(["--input", "a", "--output", "b", "--format", "CKPT"])
    assert info.value.code == 1 and capsys.readouterr().err.strip().count("\n") == 0


def test_load_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.safetensors"
    with pytest.raises(UserError, match="not found: .*nope.safetensors"):
        load_lora_file(missing)
    full_model = tmp_path / "model.safetensors"
    save_file({"blocks.0.attn1.to_q.weight": torch.zeros(2, 2)}, str(full_model))
    with pytest.raises(UserError, match=r"model\.safetensors is not a usable LoRA file: not a LoRA"):
        load_lora_file(full_model)
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(UserError, match="corrupt.safetensors") as info:
        load_lora_file(corrupt)
    assert "\n" not in str(info.value)


def test_comfy_refuses_what_it_cannot_hold():
    layer = LoRALayer(down=torch.zeros(2, 8), up=torch.zeros(8, 2), alpha=2.0)
    unknown = LoRAWeights(layers={"blocks.0.attn1.to_q": layer, "patch_embedding": layer})
    with pytest.raises(LoRAFormatError, match="patch_embedding.*DIFFUSERS_LORA"):
        to_state_dict(unknown, COMFY_LORA)
    assert set(to_state_dict(unknown, DIFFUSERS_LORA)) >= {"transformer.patch_embedding.lora_A.weight"}
    only_k_img = LoRAWeights(layers={"blocks.0.attn1.to_q": layer, "blocks.0.attn2.add_k_proj": layer})
    with pytest.raises(LoRAFormatError, match="add_k_proj/add_v_proj"):
        to_state_dict(only_k_img, COMFY_LORA)
    no_blocks = LoRAWeights(layers={"proj_out": layer})
    with pytest.raises(LoRAFormatError, match="DIFFUSERS_LORA"):
        to_state_dict(no_blocks, COMFY_LORA)


def test_apply_checks_modules_and_rescales_alpha(cases):
    from peft import LoraConfig

    c = cases["t2v"]
    partial = LoRAWeights(layers=dict(c.weights.layers))
    del partial.layers["blocks.1.ffn.net.2"]
    partial.layers["blocks.9.attn1.to_q"] = c.weights.layers["blocks.0.attn1.to_q"]
    with pytest.raises(LoRAFormatError, match=r"missing from the LoRA: blocks\.1\.ffn\.net\.2.*not in the adapter: blocks\.9"):
        apply_to_peft(c.fresh(), partial)
    with pytest.raises(LoRAFormatError, match="no LoRA adapter named 'other'"):
        apply_to_peft(c.fresh(), c.weights, adapter_name="other")
    # an adapter with another alpha (and rsLoRA) reproduces the same effect
    other = LoraConfig(r=4, lora_alpha=4, use_rslora=True, target_modules=BLOCK_TARGETS)
    model = c.fresh(other)
    apply_to_peft(model, c.weights)
    torch.testing.assert_close(c.run(model), c.expected, atol=1e-5, rtol=0)
    again = extract_from_peft(model)
    assert again.layers["blocks.0.attn1.to_q"].alpha == pytest.approx(8.0)  # 4 * sqrt(4)


def test_full_weights_round_trip(cases, tmp_path):
    c = cases["t2v"]
    model = c.fresh()
    apply_to_peft(model, c.weights)
    with torch.no_grad():
        model.patch_embedding.weight.add_(1.0)
    weights = extract_from_peft(model, full_weight_names=["patch_embedding.weight", "blocks.0.attn1.to_q.weight"])
    assert set(weights.full_weights) == {"patch_embedding.weight", "blocks.0.attn1.to_q.weight"}
    for fmt in FORMATS:
        path = _save(weights, tmp_path, fmt, name="full")
        loaded, _ = load_lora_file(path)
        assert set(loaded.full_weights) == set(weights.full_weights)
        target = c.fresh()
        apply_to_peft(target, loaded)
        assert torch.equal(target.patch_embedding.weight, model.patch_embedding.weight)
        torch.testing.assert_close(c.run(target), c.run(model), atol=1e-5, rtol=0)


def test_expert_lora_paths_and_format_names():
    high, low = expert_lora_paths(os.path.join("out", "my_lora.safetensors"))
    assert high == os.path.join("out", "my_lora_high_noise.safetensors")
    assert low == os.path.join("out", "my_lora_low_noise.safetensors")
    assert expert_lora_paths("x") == ("x_high_noise.safetensors", "x_low_noise.safetensors")
    layer = LoRALayer(down=torch.ones(2, 8), up=torch.ones(8, 2), alpha=4.0)
    from modules.util.enum import ModelFormat

    sd = to_state_dict(LoRAWeights(layers={"blocks.0.attn1.to_q": layer}), ModelFormat.COMFY_LORA)
    assert from_state_dict(sd).layers["blocks.0.attn1.to_q"].alpha == 4.0
    with pytest.raises(LoRAFormatError, match="only be read"):
        to_state_dict(LoRAWeights(), MUSUBI_LORA)
