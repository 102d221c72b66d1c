"""The default LoRA file loads everywhere (issue #11, deliverable 1): ComfyUI maps only
`diffusion_model.<Wan original module name>` (comfy/lora.py `model_lora_keys_unet`: every `.weight` of its
Wan model's state dict, in Wan's own names), so every key of a default file must be such a name.

The set of names is not written by hand: it is the transformer's state dict in Wan's original names
(`modules.modelFile.original_keys`, what a ComfyUI single file holds), checked here to be exactly what
diffusers' own single-file converter (`convert_wan_transformer_to_diffusers`) turns back into the
diffusers state dict. That diffusers' `load_lora_weights` consumes every key of the default file and
changes the output is checked by tests/test_end_to_end.py, which trains with defaults.
"""
from __future__ import annotations

import re

import pytest
import torch
from diffusers import WanTransformer3DModel
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers
from safetensors import safe_open

from modules.config.train_config import TrainConfig
from modules.modelFile.original_keys import original_key
from modules.trainer.GenericTrainer import GenericTrainer
from tests.conftest import train_config_dict

_KEY = re.compile(r"^diffusion_model\.(?P<module>.+)\.(?:lora_down\.weight|lora_up\.weight|alpha)$")


def comfy_module_names(transformer: WanTransformer3DModel) -> set[str]:
    """The modules ComfyUI's Wan model has a `.weight` of, in its (Wan's original) names."""
    state = transformer.state_dict()
    original = {original_key(key): tensor for key, tensor in state.items()}
    assert set(convert_wan_transformer_to_diffusers(dict(original))) == set(state)  # diffusers' inverse, exactly
    return {key.removesuffix(".weight") for key in original if key.endswith(".weight")}


def test_the_name_set_holds_wan_names_not_diffusers_names(tiny_model):
    names = comfy_module_names(WanTransformer3DModel.from_pretrained(tiny_model("i2v") / "transformer"))
    assert {"blocks.0.self_attn.q", "blocks.1.cross_attn.v_img", "head.head", "img_emb.proj.1"} <= names
    assert not any("attn1" in name or "to_q" in name or "proj_out" in name for name in names)


@pytest.mark.parametrize("variant", ["t2v", "i2v", "a14b"])
def test_a_default_run_writes_only_keys_comfyui_maps(tiny_model, video_dataset, tmp_path, variant):
    config = train_config_dict(tiny_model(variant), video_dataset, tmp_path, epochs=1, max_steps=1,
                               lora_target_modules=["attn1.to_q", "attn2.to_v", "attn2.add_k_proj",
                                                    "attn2.add_v_proj", "ffn.net.2", "proj_out"])
    assert "output_model_format" not in config
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    trainer.train()
    outputs = trainer.end()
    assert len(outputs) == (2 if variant == "a14b" else 1)
    folders = ["transformer", "transformer_2"][:len(outputs)]
    for path, folder in zip(outputs, folders):
        transformer = WanTransformer3DModel.from_pretrained(tiny_model(variant) / folder)  # without the LoRA
        with safe_open(str(path), framework="pt") as f:
            keys, metadata = list(f.keys()), f.metadata()
        assert metadata["wantrainer.format"] == "COMFY_LORA"
        assert [key for key in keys if not _KEY.match(key)] == []  # every key has the ComfyUI shape
        modules = {_KEY.match(key)["module"] for key in keys}
        assert sorted(modules - comfy_module_names(transformer)) == []
        assert any(key.endswith(".alpha") for key in keys)
