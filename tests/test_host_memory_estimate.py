"""Host RAM: the estimate's terms for the real 14B config, AUTO's refusal of a plan over the machine's RAM, and
estimate_vram.py's host line and --json on the 8 GiB plan (UMT5 encoding on the CPU: it crashed on the enum)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from modules.config.train_config import TrainConfig
from modules.modelSetup import host_memory_estimate, memory_plan
from modules.modelSetup.host_memory_estimate import GIB, host_estimate
from modules.modelSetup.memory_plan import apply_memory_plan, plan_memory
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT
from tests.fixtures.wan_configs import TRANSFORMER_1_3B, TRANSFORMER_14B, write_config_folder

TOKENS_832x480x81 = 21 * 30 * 52


def _light(folder, **extra) -> TrainConfig:
    return TrainConfig.from_dict({"base_model_name": str(folder), "frames": 81, "resolution": [480, 832],
                                  "memory_preset": "MANUAL", "base_weight_format": "FP8", "blocks_to_swap": 30,
                                  "activation_offload": True, **extra})


def test_14b_light_holds_its_swapped_fp8_blocks_and_offloaded_inputs(tmp_path):
    folder = write_config_folder(tmp_path / "wan-14b", TRANSFORMER_14B)
    result = host_estimate(_light(folder), ram_gib=64)
    terms = result.terms
    dim, ffn = 5120, 13824
    linear = 8 * dim * dim + 2 * dim * ffn  # a block's Linear weights, one byte each in fp8
    assert linear * 30 / GIB < terms["swapped_blocks"] < 1.1 * linear * 30 / GIB  # the arena's power-of-two slabs
    inputs = TOKENS_832x480x81 * dim * 2 * 40 / GIB  # each block's saved input in bf16
    assert inputs <= terms["offloaded_activations"] < inputs + 0.25
    umt5 = 5_680_910_336 * 2 / GIB  # UMT5-XXL in bf16
    assert terms["text_encoder"] == 0 and terms["image_encoder"] == 0  # freed after caching
    assert result.caching == pytest.approx({"process": 3.0, "text_encoder": umt5, "image_encoder": 0.0})
    assert result.peak_phase == "training" and result.total_gib == pytest.approx(sum(terms.values()))
    assert result.fits and "RAM ≈ " in result.line() and result.refusal() is None


def test_auto_trades_activation_offload_for_swapped_blocks_when_the_ram_is_short(tmp_path):
    """14B on a 24 GiB card: with RAM to spare AUTO offloads the block inputs (cheapest); with a GiB less RAM than
    that plan needs it keeps them on the GPU and swaps blocks instead, both fitting."""
    folder = write_config_folder(tmp_path / "wan-14b", TRANSFORMER_14B)
    config = TrainConfig.from_dict({"base_model_name": str(folder), "frames": 81, "resolution": [480, 832]})
    roomy = plan_memory(config, gpu_gib=24, ram_gib=256)
    assert roomy.changes.get("activation_offload") and not roomy.changes.get("blocks_to_swap")
    tight = plan_memory(config, gpu_gib=24, ram_gib=roomy.host.total_gib - 1)
    assert tight.refusal is None and tight.estimate.fits and tight.host.fits
    assert not tight.config.activation_offload and tight.changes["blocks_to_swap"] > 0
    assert tight.host.terms["offloaded_activations"] == 0 < tight.host.terms["swapped_blocks"]


@pytest.mark.parametrize("keys, text, image", [
    ({}, False, False),  # freed after caching
    ({"latent_caching": False}, False, False),  # encodes in each step, on the GPU
    ({"latent_caching": False, "text_encoder_caching_device": "CPU"}, True, False),  # ... on the CPU
    ({"text_encoder_caching_device": "CPU"}, False, False),  # only while caching
    ({"training_method": "EMBEDDING", "embedding": {"placeholder": "<sks>"}}, False, False),  # UMT5 on the GPU for the placeholder captions
    ({"sample_metrics": True, "tensorboard": True}, False, True),  # CLIP measures each sample
])
def test_the_encoders_count_in_training_only_where_they_stay_in_host_memory(tmp_path, keys, text, image):
    from tests.fixtures.wan_configs import CLIP_VIT_H

    folder = write_config_folder(tmp_path / "wan-14b-clip", TRANSFORMER_14B, image_encoder=CLIP_VIT_H)
    result = host_estimate(_light(folder, **keys), ram_gib=64)
    umt5, clip = 5_680_910_336 * 2 / GIB, result.caching.get("image_encoder", 0)
    assert result.terms["text_encoder"] == pytest.approx(umt5 if text else 0)
    assert result.terms["image_encoder"] == pytest.approx(clip if image else 0)
    cached = keys.get("latent_caching", True)
    assert (clip > 2 and result.caching["text_encoder"] == pytest.approx(umt5)) if cached else result.caching == {}


def test_the_caching_phase_is_the_peak_of_a_light_run(tmp_path):
    folder = write_config_folder(tmp_path / "wan-1.3b", TRANSFORMER_1_3B)
    result = host_estimate(TrainConfig.from_dict({"base_model_name": str(folder), "memory_preset": "MANUAL"}),
                           ram_gib=8)
    assert result.peak_phase == "caching" and result.total_gib > 13 and not result.fits
    assert result.line().startswith("RAM ≈ 13.6 GiB while caching (text_encoder 10.6)")
    assert "while caching" in result.refusal() and "text_encoder holds 10.6 GiB" in result.refusal()
    assert host_estimate(TrainConfig.from_dict({"base_model_name": str(folder), "memory_preset": "MANUAL",
                                                "text_encoder_fp8": True}), ram_gib=9).fits


def test_auto_refuses_only_when_no_plan_fits_the_ram_and_names_what_would(tmp_path, monkeypatch):
    folder = write_config_folder(tmp_path / "wan-14b", TRANSFORMER_14B)
    config = TrainConfig.from_dict({"base_model_name": str(folder), "frames": 81, "resolution": [480, 832],
                                    "gpu_memory_gib": 16})
    plan = plan_memory(config, ram_gib=8)
    assert plan.estimate.fits and plan.host.total_gib > 8  # the GPU's plan that needs the least RAM
    assert plan.refusal.startswith("host RAM: the run needs about ") and "\n" not in plan.refusal
    assert "of the plans that fit a 16.0 GiB GPU this one needs the least RAM" in plan.refusal
    assert f"a machine with {math.ceil(plan.host.total_gib)} GiB of RAM would run it" in plan.refusal
    every = plan_memory(config, ram_gib=256)
    assert every.refusal is None and every.changes.get("blocks_to_swap")
    monkeypatch.setattr(host_memory_estimate, "machine_ram_gib", lambda: 8.0)
    with pytest.raises(UserError, match="memory_preset AUTO: host RAM: .* holds .* GiB: "):
        apply_memory_plan(config)
    monkeypatch.setattr(host_memory_estimate, "machine_ram_gib", lambda: 256.0)
    assert apply_memory_plan(config).blocks_to_swap == every.changes["blocks_to_swap"]
    assert memory_plan.plan_memory(TrainConfig.from_dict({"base_model_name": str(folder)}), None).host is None


def test_estimate_vram_json_on_the_8_gib_plan_with_umt5_on_the_cpu(tmp_path):
    folder = write_config_folder(tmp_path / "wan-1.3b", TRANSFORMER_1_3B)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"base_model_name": str(folder), "frames": 81, "resolution": [480, 832]}))
    script = str(REPO_ROOT / "scripts" / "estimate_vram.py")
    result = subprocess.run([sys.executable, script, "--config-path", str(config), "--gpu-gib", "8", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["memory_plan"]["text_encoder_caching_device"] == "CPU"  # the enum, by name
    assert report["ram_caching_terms"]["text_encoder"] > 10 and report["ram_terms"]["text_encoder"] == 0
    assert report["ram_phase"] == "caching" and report["ram_gib"] > report["ram_caching_terms"]["text_encoder"]
    assert "refusal" in report and "machine_ram_gib" in report
    text = subprocess.run([sys.executable, script, "--config-path", str(config), "--gpu-gib", "8"],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "\nhost RAM ≈ " in text.stdout and "text_encoder" in text.stdout
    assert "  caching: " in text.stdout and "  training: " in text.stdout


def test_the_gui_shows_the_host_ram_beside_the_vram(tmp_path, monkeypatch):
    from modules.ui.controllers.app_controller import AppController

    monkeypatch.setattr(host_memory_estimate, "machine_ram_gib", lambda: 64.0)  # AUTO's plan offloads the inputs
    folder = write_config_folder(tmp_path / "wan-14b", TRANSFORMER_14B)
    app = AppController(tmp_path / "presets")
    app.vram.detect = False
    app.vram.gpu_gib = 24.0
    app.config.set("base_model_name", str(folder))
    app.config.set("frames", "81")
    app.config.set("resolution", "480, 832")
    vram, ram = app.vram.wait().split("\n")
    assert vram.startswith("VRAM ≈ ") and ram.startswith("RAM ≈ ") and "offloaded_activations" in ram
