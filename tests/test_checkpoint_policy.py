"""The checkpointing policy (modules/modelSetup/checkpoint_policy.py): every policy trains with the loss and every
gradient of full checkpointing bit for bit — for every family, in float32 and under bf16 autocast, with block swap,
activation offload, fp8 and int8 bases and compile — and skips the recompute it says it skips (the self-attention
kernel under KEEP_ATTENTION, the whole block when kept). The old keys migrate into the group."""
from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from modules.config.checkpointing_config import CheckpointingConfig
from modules.config.loading import migrate
from modules.config.train_config import TrainConfig
from modules.modelSetup import compile as compile_module
from modules.modelSetup.kept_attention import is_self_attention_kernel
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from tests.conftest import train_config_dict
from tests.trained_steps import losses_and_gradients

DTYPES = {"FLOAT32": {"train_dtype": "FLOAT32", "transformer_dtype": "FLOAT32"},
          "BFLOAT16": {"train_dtype": "BFLOAT16", "transformer_dtype": "BFLOAT16"}}
FULL = {"policy": "FULL"}
# on the tiny models' 2 blocks: block 0 kept and block 1 under the selective checkpoint, every block kept, one kept
POLICIES = {"attention+kept": {"policy": "KEEP_ATTENTION", "kept_blocks": 1}, "all_but_ffn": {"policy": "KEEP_ALL_BUT_FFN"},
            "full+kept": {"policy": "FULL", "kept_blocks": 1}}


class AttentionKernels(TorchDispatchMode):
    """Counts the self- and cross-attention kernels that run (forward, recompute and backward alike)."""

    def __init__(self):
        super().__init__()
        self.self_attention = self.cross_attention = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "scaled_dot_product" in func.__name__ and "backward" not in func.__name__:
            if is_self_attention_kernel(func, args):
                self.self_attention += 1
            else:
                self.cross_attention += 1
        return func(*args, **(kwargs or {}))


def _steps(trainer, steps: int):
    # the kernels are counted eagerly only: dynamo does not trace under a Python dispatch mode (it runs eager there)
    kernels = AttentionKernels() if trainer.setup.compile_log is None else contextlib.nullcontext()
    return (*losses_and_gradients(trainer, steps, kernels), kernels)


def policy_runs(config: dict, policies: dict[str, dict], steps: int = 1, rebuild: bool = False) -> dict:
    """(losses, gradients, attention kernels) of `steps` steps under FULL and each of `policies`: one trainer whose
    setup is prepared again for each policy, or (`rebuild`: block swap, compile) a trainer each."""
    results, trainer = {}, None
    for name, group in {"FULL": FULL, **policies}.items():
        if trainer is None or rebuild:
            trainer = GenericTrainer(TrainConfig.from_dict({**config, "checkpointing": group}))
            trainer.start()
        else:
            setup = trainer.setup
            setup.config = dataclasses.replace(setup.config, checkpointing=CheckpointingConfig.from_dict(group))
            setup.prepare_device()
        results[name] = _steps(trainer, steps)
    return results


def assert_as_full(results: dict) -> None:
    losses, grads, _ = results["FULL"]
    assert grads
    for name, (other_losses, other_grads, _) in results.items():
        assert all(torch.equal(a, b) for a, b in zip(losses, other_losses)), (name, losses, other_losses)
        assert other_grads.keys() == grads.keys(), name
        differ = [k for k in grads if not torch.equal(grads[k], other_grads[k])]
        assert not differ, (name, differ[:5])


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("variant", ["t2v", "i2v", "ti2v", "skyreels_v2"])
def test_every_policy_trains_as_full_checkpointing_bit_for_bit(variant, dtype, tiny_model, video_dataset, tmp_path):
    """T2V, I2V (CLIP image keys), TI2V (a timestep per token), SkyReels-V2; and the kernels each policy skips."""
    results = policy_runs(train_config_dict(tiny_model(variant), video_dataset, tmp_path, **DTYPES[dtype]), POLICIES)
    assert_as_full(results)
    kernels = {name: result[2] for name, result in results.items()}
    blocks = 2
    assert kernels["FULL"].self_attention == 2 * blocks  # forward and recompute
    assert kernels["attention+kept"].self_attention == blocks  # the kept block's and the kept kernel: once each
    assert kernels["all_but_ffn"].self_attention == blocks  # nothing recomputed
    once = kernels["all_but_ffn"].cross_attention  # (I2V: two a block, text and image)
    assert kernels["full+kept"].self_attention == blocks + 1  # block 1 recomputed, block 0 kept
    assert kernels["FULL"].cross_attention == 2 * once and kernels["attention+kept"].cross_attention == once * 3 // 2


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_both_a14b_experts_train_as_full_checkpointing(dtype, tiny_model, video_dataset, tmp_path):
    config = train_config_dict(tiny_model("a14b"), video_dataset, tmp_path, train_expert="BOTH",
                               expert_step_share=0.5, **DTYPES[dtype])
    results = policy_runs(config, POLICIES, steps=4)
    assert_as_full(results)
    assert {key.split(".")[0] for key in results["FULL"][1]} == {"0", "1"}  # steps routed to each expert


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_vace_trains_as_full_checkpointing(dtype, tiny_model, tmp_path):
    from tests.test_vace import vace_dataset

    config = train_config_dict(tiny_model("vace"), vace_dataset(tmp_path / "data"), tmp_path, vace_train_blocks="BOTH",
                               vace_context_scale=0.8, **DTYPES[dtype])
    assert_as_full(policy_runs(config, POLICIES))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_animate2_trains_both_passes_as_full_checkpointing(dtype, tiny_model, tmp_path):
    """Animate-2's blocks take keywords: its own checkpoint function gives way to the policy's (KEEP_ATTENTION is
    refused: its attention is flex's)."""
    from tests.test_animate2_training import FRAMES, SIZE, triplets

    config = train_config_dict(tiny_model("animate_2"), triplets(tmp_path / "data"), tmp_path, frames=FRAMES,
                               resolution=[SIZE, SIZE], **DTYPES[dtype])
    policies = {k: v for k, v in POLICIES.items() if v["policy"] != "KEEP_ATTENTION"}
    assert_as_full(policy_runs(config, policies))


@pytest.fixture
def aot_eager(monkeypatch):
    monkeypatch.setattr(compile_module, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("overrides", [
    {"activation_offload": True, "blocks_to_swap": 1},
    {"base_weight_format": "FP8", "fp8_scale": "CHANNEL"},
    {"base_weight_format": "INT8_CONVROT"},
], ids=["offload+swap", "fp8", "int8"])
def test_memory_features_train_as_full_checkpointing_under_every_policy(overrides, tiny_model, video_dataset,
                                                                        tmp_path):
    """Under bf16 autocast; block swap keeps its swapped last block checkpointed (KEEP_ALL_BUT_FFN is refused with
    it: a kept block's frozen weights could not leave)."""
    policies = POLICIES if not overrides.get("blocks_to_swap") else {
        k: v for k, v in POLICIES.items() if v["policy"] != "KEEP_ALL_BUT_FFN"}
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **DTYPES["BFLOAT16"], **overrides)
    assert_as_full(policy_runs(config, policies, rebuild=bool(overrides.get("blocks_to_swap"))))


@pytest.mark.slow
def test_compiled_blocks_train_as_full_checkpointing_under_every_policy(aot_eager, tiny_model, video_dataset,
                                                                       tmp_path):
    """compile (dynamo's aot_eager, as tests/test_compile.py): a kept block runs its compiled forward outside any
    checkpoint, the selective checkpoint sees the fused attention as an extern kernel call. The first compilation is
    most of its ~30 s; the policies after it reuse the graphs."""
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, compile=True, **DTYPES["BFLOAT16"])
    # one trainer, prepared again for the policy: the compiled blocks stay, the checkpoint function around them changes
    assert_as_full(policy_runs(config, POLICIES))
    assert compile_module.compiled_graphs() > 0  # the blocks ran compiled


@pytest.mark.parametrize(("old", "policy"), [
    ({"gradient_checkpointing": False}, "NONE"), ({"gradient_checkpointing": True}, "AUTO"),
    ({"checkpoint_attention": True}, "SPLIT_ATTENTION"),
    ({"gradient_checkpointing": True, "keep_self_attention": True}, "KEEP_ATTENTION"),
])
def test_the_old_keys_migrate_into_the_checkpointing_group(old, policy):
    """A version-4 file, a file without a version, and a record read directly (a GUI row)."""
    assert migrate({"config_version": 4, **old}, "x.json")["checkpointing"] == {"policy": policy}
    assert migrate(dict(old), "x.json") == {"checkpointing": {"policy": policy}}
    assert TrainConfig.from_dict(dict(old)).checkpointing.policy.name == policy


@pytest.mark.parametrize(("values", "words"), [
    ({"keep_self_attention": True, "gradient_checkpointing": False}, "'keep_self_attention' needs"),
    ({"keep_self_attention": True, "checkpoint_attention": True}, "set one of them false"),
    ({"gradient_checkpointing": True, "checkpointing": {"policy": "FULL"}}, "old spelling of 'checkpointing'"),
    ({"checkpointing": {"policy": "SPLIT_ATTENTION", "kept_blocks": 2}}, "'checkpointing.kept_blocks' applies"),
    ({"checkpointing": {"policy": "KEEP_ALL_BUT_FFN"}, "blocks_to_swap": 2}, "'blocks_to_swap' needs checkpointed"),
])
def test_contradictions_are_refused_in_one_line_naming_the_key(values, words):
    with pytest.raises(ConfigError) as error:
        TrainConfig.from_dict(values)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_kept_blocks_cannot_be_swapped_ones(tiny_model, video_dataset, tmp_path):
    from modules.util.errors import UserError

    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, blocks_to_swap=1,
                               checkpointing={"policy": "FULL", "kept_blocks": 2})
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    with pytest.raises(UserError, match="checkpointing.kept_blocks' is 2, but with blocks_to_swap 1"):
        trainer.start()


def test_the_presets_use_the_group():
    from pathlib import Path

    for preset in (Path(__file__).resolve().parents[1] / "training_presets").glob("*.json"):
        data = json.loads(preset.read_text(encoding="utf-8"))
        assert not {"gradient_checkpointing", "checkpoint_attention", "keep_self_attention"} & data.keys(), preset


@pytest.fixture(scope="module")
def folder_13b(tmp_path_factory):
    """A model folder with only Wan 2.1 1.3B's transformer and VAE configs (the estimate reads no weights)."""
    from benchmarks.gpu_step import transformer_config

    folder = tmp_path_factory.mktemp("wan13b")
    for part, values in (("transformer", {"_class_name": "WanTransformer3DModel", **transformer_config("1.3b")}),
                         ("vae", {"z_dim": 16})):
        (folder / part).mkdir()
        (folder / part / "config.json").write_text(json.dumps(values))
    return folder


def full_size(folder, **values) -> TrainConfig:
    return TrainConfig.from_dict({"base_model_name": str(folder), "resolution": [480, 832], "frames": 81,
                                  "train_dtype": "BFLOAT16", "transformer_dtype": "BFLOAT16", "lora_rank": 32,
                                  **values})


def test_the_estimate_counts_what_each_policy_keeps(folder_13b):
    from modules.modelSetup.memory_estimate import GIB, KEPT_BLOCK_PER_TOKEN, estimate

    tokens, dim, layers = 21 * 30 * 52, 1536, 30  # 1.3B at 832x480x81: 32,760 tokens, 12 heads of 128
    full = estimate(full_size(folder_13b, checkpointing={"policy": "FULL"}), 24.0).phases["training"]
    kept = estimate(full_size(folder_13b, checkpointing={"policy": "KEEP_ATTENTION"}), 24.0).phases["training"]
    per_block = tokens * (dim * 2 + 12 * 4)  # the bf16 output and the float32 log-sum-exp of each head
    assert kept["activations.kept_self_attention"] == pytest.approx(per_block * (layers - 1) / GIB)
    assert {k: v for k, v in kept.items() if k != "activations.kept_self_attention"} == full
    three = estimate(full_size(folder_13b, checkpointing={"policy": "FULL", "kept_blocks": 3}), 24.0)
    three = three.phases["training"]
    assert three["activations.kept_blocks"] == pytest.approx(3 * tokens * KEPT_BLOCK_PER_TOKEN * dim / GIB)
    assert three["activations.block_inputs"] == pytest.approx(full["activations.block_inputs"] * 27 / 30)
    every = estimate(full_size(folder_13b, checkpointing={"policy": "KEEP_ALL_BUT_FFN"}), 24.0).phases["training"]
    assert every["activations.block_inputs"] == 0 and every["activations.kept_blocks"] == pytest.approx(
        29 * tokens * KEPT_BLOCK_PER_TOKEN * dim / GIB)  # the last block's: its backward's working set


def test_auto_spends_spare_memory_on_the_fastest_policy_that_fits_and_says_why(folder_13b):
    """1.3B LoRA at 832x480x81: full checkpointing needs about 8.5 GiB; on larger cards AUTO keeps the attention and
    then whole blocks, the modelled step falling as the card grows, each plan within the card; a user's policy and a
    MANUAL preset stay as set."""
    from modules.modelSetup.memory_plan import plan_memory
    from modules.modelSetup.spare_memory import modelled_time

    times = []
    for gib in (12, 16, 24, 48, 80):
        plan = plan_memory(full_size(folder_13b), gpu_gib=gib, ram_gib=256)
        assert plan.estimate.fits and "checkpointing" in plan.changes and plan.why in plan.summary()
        times.append(modelled_time(plan.config).seconds)
        assert "the fastest that fits" in plan.why and f"of {gib:.1f} GiB" in plan.why
    assert times == sorted(times, reverse=True) and times[0] > times[-1]
    assert plan.config.checkpointing.policy.name == "KEEP_ALL_BUT_FFN"  # 80 GiB: nothing recomputed
    tight = plan_memory(full_size(folder_13b), gpu_gib=10, ram_gib=256)
    assert tight.config.checkpointing.resolved().name in ("FULL", "SPLIT_ATTENTION")
    assert "nothing that keeps more fits" in tight.why
    for values in ({"checkpointing": {"policy": "FULL"}}, {"memory_preset": "MANUAL"}):
        assert "checkpointing" not in plan_memory(full_size(folder_13b, **values), gpu_gib=80, ram_gib=256).changes


def test_auto_keeps_no_swapped_or_offloaded_block(folder_13b):
    """Kept blocks are never swapped ones (their frozen weights must leave), and none is kept under activation offload
    (it would copy everything such a block saves to the host and back)."""
    from modules.modelSetup.memory_plan import plan_memory

    swapped = plan_memory(full_size(folder_13b, blocks_to_swap=20), gpu_gib=48, ram_gib=256)
    assert swapped.config.checkpointing.kept_blocks <= 10 and swapped.config.checkpointing.policy.name != "NONE"
    assert swapped.config.checkpointing.policy.name != "KEEP_ALL_BUT_FFN"
    offloaded = plan_memory(full_size(folder_13b, activation_offload=True), gpu_gib=48, ram_gib=256)
    assert offloaded.config.checkpointing.kept_blocks == 0


def test_the_step_model_counts_the_recompute_each_policy_skips():
    from modules.modelSetup.step_time import block_flops, step_time
    from modules.util.enum import CheckpointPolicy as P

    flops = block_flops(32760, 1536, 8960)
    time = {policy: step_time(flops, 30, policy, 0, 0.0) for policy in P if policy != P.AUTO}
    assert time[P.NONE].recompute_flops == 0
    assert time[P.KEEP_ALL_BUT_FFN].recompute_flops == pytest.approx(30 * flops.feed_forward)
    assert time[P.FULL].recompute_flops - time[P.KEEP_ATTENTION].recompute_flops == pytest.approx(
        30 * flops.self_attention_kernel)
    order = [P.NONE, P.KEEP_ALL_BUT_FFN, P.KEEP_ATTENTION, P.FULL, P.SPLIT_ATTENTION]
    assert [time[p].seconds for p in order] == sorted(time[p].seconds for p in order)
    kept = step_time(flops, 30, P.FULL, 10, 0.0)
    assert time[P.KEEP_ALL_BUT_FFN].seconds < kept.seconds < time[P.FULL].seconds
    # host copies overlap the compute: they cost only beyond it
    assert step_time(flops, 30, P.FULL, 0, 1e9).seconds == time[P.FULL].seconds
    assert step_time(flops, 30, P.FULL, 0, 1e12).seconds == pytest.approx(1e12 / 25e9)
