"""memory_preset AUTO: the cheapest savers that make the estimate fit, in their order of cost; keys the user set are
kept; MANUAL and an unknown GPU size change nothing; the fake-CUDA rows of AUTO's plans are its plans."""
from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks.gpu_step import transformer_config
from modules.config.train_config import TrainConfig
from modules.modelSetup.memory_estimate import estimate
from modules.modelSetup.memory_plan import plan_memory
from modules.util.enum import BaseWeightFormat


@pytest.fixture(autouse=True)
def ample_ram(monkeypatch):
    """The plans here are the GPU's: the machine's RAM holds any of them (tests/test_host_memory_estimate.py plans
    for short RAM)."""
    from modules.modelSetup import host_memory_estimate

    monkeypatch.setattr(host_memory_estimate, "machine_ram_gib", lambda: 256.0)


@pytest.fixture(scope="module")
def folder_14b(tmp_path_factory):
    """A model folder with only Wan 2.1 14B's transformer and VAE configs (the estimate reads no weights)."""
    folder = tmp_path_factory.mktemp("wan14b")
    (folder / "transformer").mkdir()
    (folder / "transformer" / "config.json").write_text(json.dumps(
        {"_class_name": "WanTransformer3DModel", **transformer_config("14b")}))
    (folder / "vae").mkdir()
    (folder / "vae" / "config.json").write_text(json.dumps({"z_dim": 16}))
    return folder


def config(folder, **values) -> TrainConfig:
    return TrainConfig.from_dict({"base_model_name": str(folder), "resolution": [480, 832], "frames": 81,
                                  "train_dtype": "BFLOAT16", "transformer_dtype": "BFLOAT16", **values})


def test_auto_adds_savers_in_order_of_cost_until_the_estimate_fits(folder_14b):
    roomy = plan_memory(config(folder_14b), gpu_gib=80, ram_gib=256)  # 14B LoRA, checkpointing alone: about 48 GiB
    assert roomy.estimate.fits and list(roomy.changes) == ["checkpointing"]  # the rest spent on speed
    exact = plan_memory(config(folder_14b, checkpointing={"policy": "FULL"}), gpu_gib=80, ram_gib=256)
    assert exact.changes == {}  # a policy the user set is kept
    middle = plan_memory(config(folder_14b), gpu_gib=40, ram_gib=256)
    assert middle.estimate.fits and middle.changes == {"activation_offload": True}
    card = plan_memory(config(folder_14b), gpu_gib=24, ram_gib=256)
    assert card.estimate.fits and card.changes == {"activation_offload": True, "base_weight_format": BaseWeightFormat.FP8}
    small = plan_memory(config(folder_14b), gpu_gib=16, ram_gib=256)
    assert small.estimate.fits
    assert list(small.changes) == ["activation_offload", "checkpointing", "base_weight_format", "blocks_to_swap"]
    assert small.config.checkpointing.policy.name == "SPLIT_ATTENTION"
    swapped = small.changes["blocks_to_swap"]
    fewer = estimate(dataclasses.replace(small.config, blocks_to_swap=swapped - 1), 16)
    assert not fewer.fits  # the fewest swapped blocks that fit
    assert "memory_preset AUTO for 16.0 GiB" in small.summary() and f"blocks_to_swap={swapped}" in small.summary()


def row_checkpointing(row) -> tuple[str, int]:
    """A fake-CUDA row's checkpointing policy and kept blocks (older rows spell the policy with the old flags)."""
    if row.checkpoint_policy:
        return row.checkpoint_policy, row.kept_blocks
    return ("SPLIT_ATTENTION" if row.checkpoint_attention else "KEEP_ATTENTION" if row.keep_self_attention
            else "FULL"), 0


@pytest.mark.parametrize("name, gpu_gib, experts", [("14b_auto12", 12, 1), ("14b_auto24", 24, 1),
                                                     ("a14b_auto16", 16, 2), ("14b_auto80", 80, 1),
                                                     ("1.3b_auto24", 24, 1), ("1.3b_all_but_ffn", 80, 1)])
def test_the_fake_cuda_rows_of_autos_plans_are_the_plans_it_makes(name, gpu_gib, experts, folder_14b, tmp_path):
    """benchmarks/memory_fullsize.py measures AUTO's plans for 12, 16 and 24 GiB cards at 832x480x81 (the goals'
    rows): each row's memory keys are what AUTO picks for that card."""
    from benchmarks.memory_fullsize import CONFIGS

    folder = folder_14b
    if name.startswith("1.3b"):
        folder = tmp_path / "wan13b"
        for part, values in (("transformer", {"_class_name": "WanTransformer3DModel", **transformer_config("1.3b")}),
                             ("vae", {"z_dim": 16})):
            (folder / part).mkdir(parents=True)
            (folder / part / "config.json").write_text(json.dumps(values))
    if experts == 2:  # Wan 2.2 A14B: the same transformer twice
        folder = tmp_path / "a14b"
        for part in ("transformer", "transformer_2", "vae"):
            (folder / part).mkdir(parents=True)
            (folder / part / "config.json").write_text((folder_14b / ("vae" if part == "vae" else "transformer")
                                                        / "config.json").read_text())
    plan = plan_memory(config(folder, train_expert="BOTH", lora_rank=32), gpu_gib=gpu_gib, ram_gib=256)
    row = CONFIGS[name]
    assert plan.estimate.fits and row.experts == experts
    assert {key: getattr(plan.config, key) for key in ("activation_offload", "offload_inactive_expert",
                                                       "blocks_to_swap")} == \
           {"activation_offload": row.activation_offload, "offload_inactive_expert": row.offload_inactive_expert,
            "blocks_to_swap": row.blocks_to_swap}
    checkpointing = plan.config.checkpointing
    assert (checkpointing.resolved().name, checkpointing.kept_blocks) == row_checkpointing(row)
    assert plan.config.fp8_base() == row.fp8 and plan.config.ffn_chunks == row.ffn_chunks == 0


def test_a_key_set_away_from_its_default_is_kept(folder_14b):
    plan = plan_memory(config(folder_14b, ffn_chunks=2, activation_offload=False,
                              checkpoint_attention=True), gpu_gib=24, ram_gib=256)
    assert plan.config.ffn_chunks == 2 and plan.config.checkpointing.policy.name == "SPLIT_ATTENTION"
    assert not {"ffn_chunks", "checkpointing"} & plan.changes.keys() and plan.estimate.fits


def test_manual_or_no_gpu_size_changes_nothing(folder_14b):
    manual = config(folder_14b, memory_preset="MANUAL")
    assert plan_memory(manual, gpu_gib=8).config is manual
    cpu = config(folder_14b)
    plan = plan_memory(cpu)  # no gpu_memory_gib, no CUDA device here
    assert plan.config is cpu and plan.changes == {} and "no GPU size" in plan.summary()


def test_start_up_applies_the_plan_and_logs_it(folder_14b, caplog, monkeypatch):
    import logging

    from modules.modelSetup.memory_plan import apply_memory_plan

    run = config(folder_14b, gpu_memory_gib=24)
    with caplog.at_level(logging.INFO, logger="modules.modelSetup.memory_plan"):
        planned = apply_memory_plan(run)
    assert planned.base_weight_format == BaseWeightFormat.FP8 and planned.activation_offload and planned.ffn_chunks == 0
    assert (planned.resolution, planned.frames, planned.blocks_to_swap) == (run.resolution, run.frames, 0)
    assert "memory_preset AUTO for 24.0 GiB" in caplog.text and "fits" in caplog.text


def test_the_vae_encodes_in_float32_unless_the_caching_phase_would_not_fit(folder_14b):
    """The VAE's float32 default stays while its encode fits; on a small card AUTO tiles it, then takes bf16, and says
    so in the plan."""
    roomy = plan_memory(config(folder_14b, text_encoder_caching_device="CPU"), gpu_gib=80)
    assert "vae_dtype" not in roomy.changes and "vae_tiling" not in roomy.changes
    frames = dict(resolution=[720, 1280], frames=121, text_encoder_caching_device="CPU")
    fp32 = estimate(config(folder_14b, **frames), 12).phases["caching"]
    assert sum(fp32.values()) + 0.5 > 12  # an untiled float32 encode of 1280x720x121 does not fit 12 GiB
    tight = plan_memory(config(folder_14b, **frames), gpu_gib=12)
    assert tight.changes.get("vae_tiling") is True and sum(tight.estimate.phases["caching"].values()) + 0.5 <= 12
    assert "vae_tiling=True" in tight.summary()
    tiny = plan_memory(config(folder_14b, **frames, vae_tiling=False, memory_preset="AUTO"), gpu_gib=2.5)
    assert tiny.changes.get("vae_dtype").name == "BFLOAT16" and "vae_dtype=BFLOAT16" in tiny.summary()


def test_auto_stores_the_base_in_int8_only_on_a_card_where_int8_was_measured_faster(folder_14b):
    """INT8_FASTER by compute capability: an RTX 3090 (8.6, measured faster than fp8) gets INT8_CONVROT where fp8
    would go; Hopper (9.0, measured slower than bf16), an unmeasured card (8.9) and no known card get fp8. Keys that
    decide the base (base_loras) and compile keep fp8."""

    ampere = plan_memory(config(folder_14b), gpu_gib=24, capability=(8, 6))
    assert ampere.estimate.fits and ampere.config.int8_base() and not ampere.config.fp8_base()
    assert ampere.changes["base_weight_format"] == BaseWeightFormat.INT8_CONVROT
    assert list(ampere.changes) == ["activation_offload", "base_weight_format"]
    assert "base_weight_format INT8_CONVROT" in ampere.short()
    for capability in [(9, 0), (8, 9), None]:
        other = plan_memory(config(folder_14b), gpu_gib=24, capability=capability)
        assert other.changes.get("base_weight_format") == BaseWeightFormat.FP8 and not other.config.int8_base(), capability
    for kept in [dict(compile=True),
                 dict(base_loras=[{"path": "speed.safetensors", "strength": 1.0}])]:
        plan = plan_memory(config(folder_14b, **kept), gpu_gib=24, capability=(8, 6))
        assert not plan.config.int8_base(), kept
    roomy = plan_memory(config(folder_14b), gpu_gib=80, capability=(8, 6))
    assert roomy.changes.keys() == {"checkpointing"}  # int8 is a saver: a run that fits keeps its bf16 base


def test_auto_for_the_14b_on_12_gib_stores_the_base_in_fp8_with_the_figures_it_had(folder_14b):
    """base_weight_format FP8 is what fp8_base_weights true was: AUTO's plan for the 14B on a 12 GiB card chooses it,
    and its device and host figures are those the plan had under the old key (11.87 GiB training, 26.22 GiB RAM)."""
    plan = plan_memory(config(folder_14b, train_expert="BOTH", lora_rank=32), gpu_gib=12, ram_gib=256)
    assert plan.changes_json() == {"activation_offload": True, "checkpointing": {"policy": "SPLIT_ATTENTION",
                                   "kept_blocks": 0}, "base_weight_format": "FP8", "blocks_to_swap": 32}
    assert plan.config.fp8_base() and plan.config.fp8_scale_mode().name == "NONE"
    assert plan.estimate.peak_gib == pytest.approx(11.8654, abs=1e-4) and plan.estimate.peak_phase == "training"
    assert plan.host.to_json()["ram_gib"] == pytest.approx(26.22, abs=0.005)
    assert "base_weight_format=FP8, blocks_to_swap=32; estimate 11.9 GiB (training), fits" in plan.summary()
    assert "fp8_base_weights" not in plan.summary() + plan.short()
