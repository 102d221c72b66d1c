"""The VRAM estimate's terms against hand-computed values for the real Wan 2.1 1.3B and 14B configs."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from modules.config.train_config import TrainConfig
from modules.modelSetup.memory_estimate import GIB, LEAN_WORKING_SET, adapter_parameters, estimate, transformer_counts
from tests.conftest import REPO_ROOT
from tests.fixtures.wan_configs import TRANSFORMER_1_3B, TRANSFORMER_14B, write_config_folder

TOKENS_832x480x81 = 21 * (480 // 16) * (832 // 16)  # latent frames x h/8/2 x w/8/2 = 32760


def block_parameters(d: int, f: int) -> int:
    """A Wan T2V block: two attentions (q, k, v, out with biases; RMS q/k norms), the cross-attention LayerNorm,
    the FFN and the 6 x d modulation table."""
    return 2 * (4 * (d * d + d) + 2 * d) + 2 * d + (d * f + f + f * d + d) + 6 * d


def embedding_parameters(d: int) -> int:
    patch = 16 * d * 4 + d
    time = 256 * d + d + d * d + d + 6 * d * d + 6 * d
    text = 4096 * d + d + d * d + d
    return patch + time + text + (d * 64 + 64) + 2 * d


@pytest.mark.parametrize("config, d, f, layers", [(TRANSFORMER_1_3B, 1536, 8960, 30),
                                                   (TRANSFORMER_14B, 5120, 13824, 40)])
def test_parameter_counts_of_the_real_configs(config, d, f, layers):
    expected = layers * block_parameters(d, f) + embedding_parameters(d)
    assert transformer_counts(config)["total"] == expected
    assert expected in (1_418_996_800, 14_288_491_584)  # Wan 2.1 1.3B and 14B


def test_lora_r32_on_the_default_targets_of_the_1_3b():
    train = TrainConfig.from_dict({"lora_rank": 32})
    d, f = 1536, 8960
    per_block = 8 * 32 * (d + d) + 32 * (d + f) + 32 * (f + d)  # 8 attention Linears, the 2 FFN Linears
    assert adapter_parameters(TRANSFORMER_1_3B, train) == 30 * per_block


def test_terms_of_a_1_3b_lora_at_832x480x81(tmp_path):
    folder = write_config_folder(tmp_path / "wan-1.3b", TRANSFORMER_1_3B)
    train = TrainConfig.from_dict({"base_model_name": str(folder), "lora_rank": 32, "resolution": [480, 832],
                                   "frames": 81, "transformer_dtype": "BFLOAT16", "train_dtype": "BFLOAT16"})
    result = estimate(train, gpu_gib=24)
    terms = result.phases["training"]
    assert terms["transformer_weights"] == pytest.approx(1_418_996_800 * 2 / GIB)
    lora = 30 * (8 * 32 * 3072 + 2 * 32 * (1536 + 8960))
    assert terms["trained_parameters"] == pytest.approx(lora * 4 / GIB)
    assert terms["gradients"] == pytest.approx(lora * 4 / GIB)
    assert terms["optimizer_state"] == pytest.approx(lora * 8 / GIB)  # AdamW: two fp32 moments
    assert terms["activations.block_inputs"] == pytest.approx(TOKENS_832x480x81 * 1536 * 2 * 30 / GIB)
    # the measured constants (memory_estimate.LEAN_WORKING_SET: bytes per token x width under bf16 autocast, and the
    # slices' GiB beside them)
    assert terms["activations.one_block"] == pytest.approx(TOKENS_832x480x81 * 38.3 * 1536 / GIB + 0.20)
    # one encoder at a time: the caching peak is UMT5's weights with its activations on a 512-token caption
    assert result.phases["caching"]["text_encoder_weights"] == pytest.approx(5_680_910_336 * 2 / GIB + 0.12)
    assert result.phases["caching"]["vae_encode"] == 0
    assert result.fits and result.suggestions == []


def test_a_14b_lora_that_does_not_fit_gets_suggestions_and_the_memory_features_shrink_it(tmp_path):
    folder = write_config_folder(tmp_path / "wan-14b", TRANSFORMER_14B)
    common = {"base_model_name": str(folder), "lora_rank": 32, "resolution": [480, 832], "frames": 81,
              "transformer_dtype": "BFLOAT16", "train_dtype": "BFLOAT16", "ema": "GPU"}
    plain = estimate(TrainConfig.from_dict(common), gpu_gib=24)
    assert not plain.fits and plain.peak_phase == "training"
    assert any(s.startswith("base_weight_format: FP8") for s in plain.suggestions)
    assert any(s.startswith("ema: CPU") for s in plain.suggestions)
    light = estimate(TrainConfig.from_dict({**common, "ema": "OFF", "base_weight_format": "FP8", "blocks_to_swap": 30,
                                            "activation_offload": True}), gpu_gib=24)
    weights = light.phases["training"]["transformer_weights"]
    assert weights < plain.phases["training"]["transformer_weights"] / 2
    assert light.phases["training"]["activations.block_inputs"] == 0
    assert light.peak_gib < plain.peak_gib


def test_the_script_prints_json(tmp_path):
    folder = write_config_folder(tmp_path / "wan-1.3b", TRANSFORMER_1_3B)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"base_model_name": str(folder), "frames": 81, "resolution": [480, 832]}))
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "estimate_vram.py"), "--config-path",
                             str(config), "--gpu-gib", "80", "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["fits"] is True and report["peak_gib"] > 2 and "training.transformer_weights" in report["terms"]


def test_the_gui_estimate_follows_the_config(tmp_path):
    from modules.ui.controllers.app_controller import AppController

    folder = write_config_folder(tmp_path / "wan-1.3b", TRANSFORMER_1_3B)
    app = AppController(tmp_path / "presets")
    app.vram.detect = False
    app.vram.gpu_gib = 10.0
    app.config.set("memory_preset", "MANUAL")  # the estimate of the keys as set (AUTO's plan: the test below)
    app.config.set("base_model_name", str(folder))
    app.config.set("frames", "81")
    app.config.set("resolution", "480, 832")
    first = app.vram.wait()
    assert first.startswith("VRAM ≈ ") and "over 10 GiB: " in first
    assert "training 8.2 / caching 10.7" in first  # both phases; the first suggestion is the peak phase's
    app.config.set("resolution", "240, 416")
    smaller = app.vram.wait()
    # the training phase follows the size (the peak here is the caching phase's UMT5, which does not)
    training = [float(text.split("(training ")[1].split()[0]) for text in (first, smaller)]
    assert smaller != first and training[1] < training[0]
    app.config.set("base_model_name", str(tmp_path / "nowhere"))
    assert app.vram.wait().startswith("VRAM: no estimate")


def test_an_embedding_run_keeps_umt5_on_the_gpu_and_trains_a_few_vectors(tmp_path):
    folder = write_config_folder(tmp_path / "wan-1.3b", TRANSFORMER_1_3B)
    common = {"base_model_name": str(folder), "resolution": [480, 832], "frames": 81,
              "transformer_dtype": "BFLOAT16", "text_encoder_dtype": "BFLOAT16", "train_dtype": "BFLOAT16"}
    embedding = estimate(TrainConfig.from_dict({**common, "training_method": "EMBEDDING", "base_weight_format": "FP8",
                                                "embedding": {"placeholder": "<sks>", "token_count": 4}}))
    terms = embedding.phases["training"]
    assert terms["text_encoder_weights"] == pytest.approx(5_680_910_336 * 2 / GIB)  # UMT5 runs in each step
    assert terms["trained_parameters"] == pytest.approx(4 * 4096 * 4 / GIB)  # 4 fp32 vectors of width 4096
    assert terms["optimizer_state"] == pytest.approx(4 * 4096 * 8 / GIB)
    counts = transformer_counts(TRANSFORMER_1_3B)  # frozen: fp8 storage applies as under a LoRA
    assert terms["transformer_weights"] == pytest.approx(
        (counts["block_linear"] + (counts["total"] - counts["block_linear"]) * 2) / GIB)
    lora = estimate(TrainConfig.from_dict(common)).phases["training"]
    assert lora["text_encoder_weights"] == 0.0  # cached captions: UMT5 leaves the GPU


def test_the_gui_and_the_script_show_autos_plan_and_both_phases(tmp_path, monkeypatch):
    from modules.modelSetup import host_memory_estimate
    from modules.ui.controllers.app_controller import AppController

    monkeypatch.setattr(host_memory_estimate, "machine_ram_gib", lambda: 64.0)  # the plan below offloads the inputs
    folder = write_config_folder(tmp_path / "wan-14b", TRANSFORMER_14B)
    app = AppController(tmp_path / "presets")
    app.vram.detect = False
    app.vram.gpu_gib = 24.0
    app.config.set("base_model_name", str(folder))
    app.config.set("frames", "81")
    app.config.set("resolution", "480, 832")
    text = app.vram.wait()
    assert "training " in text and "caching " in text and "fits 24 GiB" in text
    assert "AUTO: activation_offload True, base_weight_format FP8" in text
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"base_model_name": str(folder), "frames": 81, "resolution": [480, 832]}))
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "estimate_vram.py"), "--config-path",
                             str(config), "--gpu-gib", "24", "--ram-gib", "64", "--json"], capture_output=True, text=True,
                            timeout=120)
    report = json.loads(result.stdout)
    assert report["fits"] and report["memory_plan"]["base_weight_format"] == "FP8"
    # on an RTX 3090 (sm_86), where int8 ConvRot was measured faster, the plan stores the base in int8 instead
    app.vram.capability = (8, 6)
    text = app.vram.wait()
    assert "activation_offload True, base_weight_format INT8_CONVROT" in text and "fits 24 GiB" in text
    assert app.config.display("base_weight_format") == "INT8_CONVROT"
    assert app.config.auto_note("base_weight_format").startswith("chosen by AUTO for 24 GiB")
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "estimate_vram.py"), "--config-path",
                             str(config), "--gpu-gib", "24", "--ram-gib", "64", "--compute-capability", "8.6"],
                            capture_output=True,
                            text=True, timeout=120)
    assert "base_weight_format=INT8_CONVROT" in result.stdout, result.stdout + result.stderr
    assert "base weights: INT8_CONVROT; sm_86: int8 ConvRot measured faster (others'" in result.stdout


def _e2v_dataset(path, elements: int):
    names = ("subject", "object", "background")[:elements]
    dataset = {"datasets": [{"data_root": str(path.parent), "target_resolution": [480, 832], "max_frames": 81,
                             "elements": [{"name": n, "suffixes": [f"_{n}.png"], "vae": {"repeat": 1, "position": i}}
                                          for i, n in enumerate(names)]}]}
    path.write_text(json.dumps(dataset))
    return str(path)


@pytest.mark.parametrize("layout, class_name, extra", [
    ("skyreels_v3", "WanTransformer3DModel", 4),  # SkyReels-V3: 4 slots after the video, empty ones zero
    ("a2", "WanVACETransformer3DModel", 3),  # VACE: one leading latent frame per element (3 here)
    ("a2", "WanTransformer3DModel", 0),  # A2: the references sit inside the clip's 81 frames
])
def test_an_e2v_run_counts_the_reference_latent_frames_beside_the_video(tmp_path, layout, class_name, extra):
    from modules.config.e2v_dataset_config import with_dataset_shapes

    folder = write_config_folder(tmp_path / "wan", {**TRANSFORMER_1_3B, "_class_name": class_name})
    common = {"base_model_name": str(folder), "transformer_dtype": "BFLOAT16", "train_dtype": "BFLOAT16"}
    e2v = with_dataset_shapes(TrainConfig.from_dict({
        **common, "dataset_config": _e2v_dataset(tmp_path / "e2v.json", 3), "e2v": {"reference_layout": layout}}))
    plain = TrainConfig.from_dict({**common, "resolution": [480, 832], "frames": 81})
    per_frame = TOKENS_832x480x81 // 21
    inputs = estimate(e2v).phases["training"]["activations.block_inputs"]
    assert inputs == pytest.approx((21 + extra) * per_frame * 1536 * 2 * 30 / GIB)
    # the activations are those of a plain clip with as many more latent frames (the per-token model is the same);
    # the VAE still encodes the 81-frame video
    longer = TrainConfig.from_dict({**common, "resolution": [480, 832], "frames": 81 + 4 * extra})
    assert estimate(e2v).phases["training"]["activations.one_block"] == pytest.approx(
        estimate(longer).phases["training"]["activations.one_block"])
    assert estimate(e2v).phases["caching"]["vae_encode"] == estimate(plain).phases["caching"]["vae_encode"]


def test_sequence_parallel_estimates_one_rank_with_its_share_of_the_tokens(tmp_path):
    """sequence_parallel N: a rank holds the whole model and the activations of ceil(tokens / N) tokens (14B LoRA at
    1280x720x81: 75,600 tokens, 18,900 a rank at N = 4; the fake-CUDA rows measure 71.8 and 39.8 GiB)."""
    folder = write_config_folder(tmp_path / "wan-14b", TRANSFORMER_14B)
    values = {"base_model_name": str(folder), "lora_rank": 32, "resolution": [720, 1280], "frames": 81,
              "transformer_dtype": "BFLOAT16", "train_dtype": "BFLOAT16", "gradient_checkpointing": True}
    one = estimate(TrainConfig.from_dict(values)).phases["training"]
    rank = estimate(TrainConfig.from_dict({**values, "sequence_parallel": 4})).phases["training"]
    tokens = 21 * (720 // 16) * (1280 // 16)
    assert tokens == 75600
    assert rank["transformer_weights"] == one["transformer_weights"]
    assert one["activations.block_inputs"] == pytest.approx(tokens * 5120 * 2 * 40 / GIB)
    assert rank["activations.block_inputs"] == pytest.approx(18900 * 5120 * 2 * 40 / GIB)
    beside = LEAN_WORKING_SET[False][1]  # the lean block's slices: the same on every rank
    assert rank["activations.one_block"] - beside == pytest.approx((one["activations.one_block"] - beside) / 4)
    eight = estimate(TrainConfig.from_dict({**values, "sequence_parallel": 8})).phases["training"]
    assert eight["activations.block_inputs"] == pytest.approx(9450 * 5120 * 2 * 40 / GIB)  # 75,600 / 8
    assert sum(rank.values()) < 70 < sum(one.values())
