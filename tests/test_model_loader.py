"""WanModelLoader: components, dtypes and single-file transformer overrides."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.util.enum import DataType
from modules.util.errors import UserError

CPU = torch.device("cpu")

# diffusers -> original Wan names (the inverse of diffusers' convert_wan_transformer_to_diffusers).
_TO_ORIGINAL = [
    ("condition_embedder.time_embedder.linear_1", "time_embedding.0"),
    ("condition_embedder.time_embedder.linear_2", "time_embedding.2"),
    ("condition_embedder.text_embedder.linear_1", "text_embedding.0"),
    ("condition_embedder.text_embedder.linear_2", "text_embedding.2"),
    ("condition_embedder.time_proj", "time_projection.1"),
    ("condition_embedder.image_embedder.norm1", "img_emb.proj.0"),
    ("condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.1"),
    ("condition_embedder.image_embedder.ff.net.2", "img_emb.proj.3"),
    ("condition_embedder.image_embedder.norm2", "img_emb.proj.4"),
    ("attn2", "cross_attn"), ("attn1", "self_attn"),
    (".to_out.0.", ".o."), (".to_q.", ".q."), (".to_k.", ".k."), (".to_v.", ".v."),
    (".add_k_proj.", ".k_img."), (".add_v_proj.", ".v_img."), (".norm_added_k.", ".norm_k_img."),
    ("ffn.net.0.proj", "ffn.0"), ("ffn.net.2", "ffn.2"), ("proj_out", "head.head"),
    ("norm2", "norm__tmp"), ("norm3", "norm2"), ("norm__tmp", "norm3"),
]


def to_original_names(state: dict) -> dict:
    out = {}
    for key, value in state.items():
        if key == "scale_shift_table":
            key = "head.modulation"
        elif key.endswith(".scale_shift_table"):
            key = key.replace(".scale_shift_table", ".modulation")
        for a, b in _TO_ORIGINAL:
            key = key.replace(a, b)
        out["model.diffusion_model." + key] = value
    return out


def perturbed_state(model):
    return {k: v + 0.5 for k, v in model.transformer.state_dict().items()}


@pytest.mark.parametrize("variant", ["t2v", "i2v", "ti2v", "a14b"])
def test_loads_every_component_of_each_variant(tiny_model, variant):
    model = WanModelLoader().load(str(tiny_model(variant)), CPU)
    assert (model.transformer_2 is not None) == (variant == "a14b")
    assert (model.image_encoder is not None) == (variant == "i2v")
    assert not any(p.requires_grad for p in model.transformer.parameters())


def test_component_dtypes_are_applied(tiny_model):
    model = WanModelLoader().load(str(tiny_model("t2v")), CPU, transformer_dtype=DataType.BFLOAT16,
                                  text_encoder_dtype=DataType.FLOAT16)
    assert model.transformer.dtype == torch.bfloat16 and model.text_encoder.dtype == torch.float16
    assert model.vae.dtype == torch.float32


@pytest.mark.parametrize("naming", ["diffusers", "original"])
def test_single_file_transformer_override(tiny_model, tmp_path, naming):
    base = WanModelLoader().load(str(tiny_model("i2v")), CPU)
    state = perturbed_state(base)
    file = tmp_path / "transformer.safetensors"
    save_file(to_original_names(state) if naming == "original" else state, str(file))
    model = WanModelLoader().load(str(tiny_model("i2v")), CPU, transformer_override=str(file))
    loaded = model.transformer.state_dict()
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_override_of_another_variant_is_a_clear_error(tiny_model, tmp_path):
    other = WanModelLoader().load(str(tiny_model("t2v")), CPU)
    file = tmp_path / "t2v.safetensors"
    save_file(other.transformer.state_dict(), str(file))
    with pytest.raises(UserError, match="does not match the base model's transformer"):
        WanModelLoader().load(str(tiny_model("i2v")), CPU, transformer_override=str(file))


def test_missing_override_file_is_a_clear_error(tiny_model, tmp_path):
    with pytest.raises(UserError, match="transformer_override"):
        WanModelLoader().load(str(tiny_model("t2v")), CPU, transformer_override=str(tmp_path / "none.safetensors"))


def test_prompt_embeddings_match_the_diffusers_pipeline(tiny_model):
    from diffusers import DiffusionPipeline

    model = WanModelLoader().load(str(tiny_model("t2v")), CPU)
    pipe = DiffusionPipeline.from_pretrained(tiny_model("t2v"))
    expected, _ = pipe.encode_prompt("a red circle", do_classifier_free_guidance=False, max_sequence_length=512)
    assert torch.allclose(model.encode_prompts(["a red circle"]), expected, atol=1e-5)


@pytest.mark.parametrize("component", ["text_encoder", "transformer"])
def test_a_pickle_only_component_is_refused_and_never_unpickled(tiny_model, tmp_path, monkeypatch, component):
    """A base folder whose component holds only a pickle (`pytorch_model.bin`) is one line naming the file and
    the conversion; torch.load (even its restricted loader) never runs. A folder with a pickle beside the
    safetensors loads from the safetensors."""
    import shutil

    from safetensors.torch import load_file

    folder = tmp_path / "base"
    shutil.copytree(tiny_model("t2v"), folder)
    weights = folder / component / ("model.safetensors" if component == "text_encoder"
                                    else "diffusion_pytorch_model.safetensors")
    pickle = weights.with_name("pytorch_model.bin" if component == "text_encoder" else "diffusion_pytorch_model.bin")
    torch.save(load_file(str(weights)), pickle)

    def no_unpickling(*args, **kwargs):
        raise AssertionError("a pickle was loaded")

    monkeypatch.setattr(torch, "load", no_unpickling)
    assert WanModelLoader().load(str(folder), torch.device("cpu")).text_encoder is not None  # both: safetensors read
    weights.unlink()
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5EncoderModel

    for cls in (AutoencoderKLWan, WanTransformer3DModel, UMT5EncoderModel):  # refused before any component loads
        monkeypatch.setattr(cls, "from_pretrained", no_unpickling)
    with pytest.raises(UserError) as caught:
        WanModelLoader().load(str(folder), torch.device("cpu"))
    message = str(caught.value)
    assert "\n" not in message and str(pickle) in message and "is a pickle" in message
    assert ".save_pretrained(" in message and "use_safetensors=False" in message and f"{component}_override" in message


def test_the_conversion_the_refusal_names_gives_a_folder_that_loads(tiny_model, tmp_path):
    """The one-line conversion the refusal prints works (run here on a file we trust)."""
    import re
    import shutil
    import subprocess
    import sys

    from safetensors.torch import load_file

    folder = tmp_path / "base"
    shutil.copytree(tiny_model("t2v"), folder)
    weights = folder / "text_encoder" / "model.safetensors"
    torch.save(load_file(str(weights)), folder / "text_encoder" / "pytorch_model.bin")
    weights.unlink()
    with pytest.raises(UserError) as caught:
        WanModelLoader().load(str(folder), torch.device("cpu"))
    command = re.search(r'python -c "(.*?)"', str(caught.value)).group(1)
    subprocess.run([sys.executable, "-c", command], check=True, capture_output=True)
    assert weights.is_file()
    assert WanModelLoader().load(str(folder), torch.device("cpu")).text_encoder is not None
