"""memory_preset AUTO: the cheapest savers that make the estimate fit, in their order of cost; keys the user set are
kept; MANUAL and an unknown GPU size change nothing."""
from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks.gpu_step import transformer_config
from modules.modelSetup.memory_estimate import estimate
from modules.modelSetup.memory_plan import plan_memory
from modules.util.config.train_config import TrainConfig


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
    roomy = plan_memory(config(folder_14b), gpu_gib=80)
    assert roomy.estimate.fits and roomy.changes == {}  # 14B LoRA with checkpointing alone: about 55 GiB
    middle = plan_memory(config(folder_14b), gpu_gib=48)
    assert middle.estimate.fits and middle.changes == {"activation_offload": True}
    card = plan_memory(config(folder_14b), gpu_gib=24)
    assert card.estimate.fits
    assert list(card.changes) == ["activation_offload", "ffn_chunks", "checkpoint_attention", "fp8_base_weights"]
    small = plan_memory(config(folder_14b), gpu_gib=16)
    assert small.estimate.fits and list(small.changes)[:4] == list(card.changes)
    swapped = small.changes["blocks_to_swap"]
    fewer = estimate(dataclasses.replace(small.config, blocks_to_swap=swapped - 1), 16)
    assert not fewer.fits  # the fewest swapped blocks that fit
    assert "memory_preset AUTO for 16.0 GiB" in small.summary() and f"blocks_to_swap={swapped}" in small.summary()


def test_a_key_set_away_from_its_default_is_kept(folder_14b):
    plan = plan_memory(config(folder_14b, ffn_chunks=2, fp8_base_weights=False, activation_offload=False), gpu_gib=24)
    assert plan.config.ffn_chunks == 2 and not plan.config.checkpoint_attention
    assert "ffn_chunks" not in plan.changes


def test_manual_or_no_gpu_size_changes_nothing(folder_14b):
    manual = config(folder_14b, memory_preset="MANUAL")
    assert plan_memory(manual, gpu_gib=8).config is manual
    cpu = config(folder_14b)
    plan = plan_memory(cpu)  # no gpu_memory_gib, no CUDA device here
    assert plan.config is cpu and plan.changes == {} and "no GPU size" in plan.summary()


def test_start_up_applies_the_plan_and_logs_it(folder_14b, caplog):
    import logging

    from modules.modelSetup.memory_plan import apply_memory_plan

    run = config(folder_14b, gpu_memory_gib=24)
    with caplog.at_level(logging.INFO, logger="modules.modelSetup.memory_plan"):
        planned = apply_memory_plan(run)
    assert planned.fp8_base_weights and planned.activation_offload and planned.ffn_chunks == 8
    assert (planned.resolution, planned.frames, planned.blocks_to_swap) == (run.resolution, run.frames, 0)
    assert "memory_preset AUTO for 24.0 GiB" in caplog.text and "fits" in caplog.text
