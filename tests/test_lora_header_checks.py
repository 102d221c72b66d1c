"""A LoRA's header says what it was made for (issue #11, deliverable 2), and the one check that reads it
(`check_lora_matches`, used by sample.py, merge_lora.py and lora_weight_path) refuses what does not fit:
another variant (issue #10), another transformer architecture of the same variant, the other expert."""
from __future__ import annotations

import logging

import pytest

from modules.model.detection import detect_variant
from modules.modelFile.lora_checks import check_lora_file
from modules.modelFile.lora_formats import COMFY_LORA
from modules.modelSaver.WanLoRASaver import LoRAFileInfo, lora_metadata, save_lora
from modules.util.errors import UserError
from tests.faults.test_sample_faults import lora_weights, model_width


def write(path, width: int, **info) -> str:
    save_lora(lora_weights(width), path, COMFY_LORA, lora_metadata(LoRAFileInfo(**info)))
    return str(path)


def test_a_lora_of_another_architecture_of_the_same_variant_is_refused(tiny_model, tmp_path):
    variant = detect_variant(tiny_model("t2v"))
    other = write(tmp_path / "big.safetensors", model_width(tiny_model("t2v")), variant="wan-2.1-t2v",
                  base_model="Wan2.1-T2V-14B-Diffusers", base_transformer_config="0123456789abcdef")
    with pytest.raises(UserError) as error:
        check_lora_file(other, variant, force_option="--force")
    assert str(error.value) == (f"LoRA '{other}' was made for a t2v transformer of another size or architecture "
                                "(trained on 'Wan2.1-T2V-14B-Diffusers'): use a LoRA made for this model, or pass "
                                "--force to apply it anyway")
    same = write(tmp_path / "same.safetensors", model_width(tiny_model("t2v")), variant="wan-2.1-t2v",
                 base_transformer_config=variant.transformer_config_hash)
    assert check_lora_file(same, variant).files == {0: tmp_path / "same.safetensors"}


def test_an_expert_file_named_for_the_other_expert_is_refused(tiny_model, tmp_path, caplog):
    variant = detect_variant(tiny_model("a14b"))
    width = model_width(tiny_model("a14b"))
    common = dict(variant="wan-2.2-a14b-t2v", base_transformer_config=variant.transformer_config_hash)
    high = write(tmp_path / "lora_high_noise.safetensors", width, expert=1, **common)  # a low-noise file, renamed
    write(tmp_path / "lora_low_noise.safetensors", width, expert=1, **common)
    with pytest.raises(UserError, match=r"lora_high_noise\.safetensors' was trained for the low-noise expert, not "
                                        r"the high-noise one it would be applied to \(check the file names\)"):
        check_lora_file(high, variant)
    with caplog.at_level(logging.WARNING):
        checked = check_lora_file(high, variant, force=True, force_option="--force")
    assert sorted(checked.files) == [0, 1] and "applying it anyway (--force)" in caplog.text


def test_matching_expert_files_pass(tiny_model, tmp_path):
    variant = detect_variant(tiny_model("a14b"))
    width = model_width(tiny_model("a14b"))
    common = dict(variant="wan-2.2-a14b-t2v", base_transformer_config=variant.transformer_config_hash,
                  boundary_ratio=variant.boundary_ratio)
    high = write(tmp_path / "lora_high_noise.safetensors", width, expert=0, **common)
    write(tmp_path / "lora_low_noise.safetensors", width, expert=1, **common)
    checked = check_lora_file(high, variant)
    assert [checked.metadata[e]["wantrainer.expert"] for e in (0, 1)] == ["high_noise", "low_noise"]


def test_convert_model_carries_the_header_over_and_names_the_new_key_convention(tmp_path, capsys):
    from safetensors import safe_open

    from tests.test_lora_formats import _load_script

    source = tmp_path / "lora_high_noise.safetensors"
    save_lora(lora_weights(32), source, "DIFFUSERS_LORA",
              lora_metadata(LoRAFileInfo(variant="wan-2.2-a14b-t2v", expert=0, boundary_ratio=0.875, steps=120)))
    target = tmp_path / "comfy_high_noise.safetensors"
    assert _load_script().main(["--input", str(source), "--output", str(target), "--format", "COMFY_LORA"]) == 0
    assert "made for wan-2.2-a14b-t2v, high_noise" in capsys.readouterr().out
    with safe_open(str(target), framework="pt") as f:
        meta = f.metadata()
    assert (meta["wantrainer.expert"], meta["wantrainer.boundary_ratio"], meta["wantrainer.steps"]) == (
        "high_noise", "0.875", "120")
    assert meta["modelspec.implementation"] == "https://github.com/Wan-Video/Wan2.2"  # not the source's diffusers
