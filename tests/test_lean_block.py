"""The lean Wan block (modules/modelSetup/lean_block.py): every family trains with the loss and gradients of diffusers'
own block forward bit for bit, in float32 and under bf16 autocast, with the memory features and adapters around it;
token slices, per-token timesteps, batches of two and trained modulation tables and norms give diffusers' numbers
too; and the block keeps nothing in float32 of the sequence's size for its backward."""
from __future__ import annotations

import copy

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.modelSetup import BaseWanSetup as base_setup
from modules.modelSetup.lean_block import BlockSaves, is_lean, lean_blocks
from modules.trainer.GenericTrainer import GenericTrainer
from tests.conftest import train_config_dict
from tests.trained_steps import losses_and_gradients


def step(config: dict, lean: bool, monkeypatch, steps: int = 1):
    """Losses and every trained gradient of the first `steps` steps (two samples each, where the data has two) of
    `config`, its blocks running the lean forward or diffusers' own."""
    with monkeypatch.context() as patch:
        if not lean:
            patch.setattr(base_setup, "lean_blocks", lambda transformer, saves: lean_blocks(transformer, None))
        trainer = GenericTrainer(TrainConfig.from_dict(config))
        trainer.start()
    blocks = [block for t in trainer.model.transformers() for block in t.blocks]
    assert all(is_lean(block) == lean for block in blocks)
    return losses_and_gradients(trainer, steps)


def assert_bit_for_bit(config: dict, monkeypatch, steps: int = 1, close: str | None = None, rtol: float = 0.0) -> None:
    """The lean block's losses and gradients equal diffusers' block's; those whose name contains `close` (the
    feed-forward's, summed over token slices) within `rtol` of the largest."""
    losses, grads = step(config, True, monkeypatch, steps)
    reference, reference_grads = step(config, False, monkeypatch, steps)
    assert all(torch.equal(a, b) for a, b in zip(losses, reference)), (losses, reference)
    assert grads and grads.keys() == reference_grads.keys()
    differ = [k for k in grads if not torch.equal(grads[k], reference_grads[k])]
    if close is not None:
        assert all(close in k for k in differ), differ[:5]
        for key in differ:
            scale = float(reference_grads[key].abs().max())
            torch.testing.assert_close(grads[key], reference_grads[key], rtol=0, atol=rtol * scale)
        return
    assert not differ, differ[:5]


DTYPES = {"FLOAT32": {"train_dtype": "FLOAT32", "transformer_dtype": "FLOAT32"},
          "BFLOAT16": {"train_dtype": "BFLOAT16", "transformer_dtype": "BFLOAT16", "gradient_checkpointing": True}}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("variant", ["t2v", "i2v", "ti2v", "skyreels_v2"])
def test_each_family_trains_as_diffusers_block_bit_for_bit(variant, dtype, tiny_model, video_dataset, tmp_path,
                                                            monkeypatch):
    """T2V, I2V (CLIP image keys in the cross-attention), TI2V (a timestep per token) and SkyReels-V2."""
    assert_bit_for_bit(train_config_dict(tiny_model(variant), video_dataset, tmp_path, **DTYPES[dtype]), monkeypatch)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_both_a14b_experts_train_as_diffusers_blocks(dtype, tiny_model, video_dataset, tmp_path, monkeypatch):
    config = train_config_dict(tiny_model("a14b"), video_dataset, tmp_path, train_expert="BOTH",
                               expert_step_share=0.5, **DTYPES[dtype])
    assert_bit_for_bit(config, monkeypatch, steps=4)  # steps routed to each expert (checked below)
    losses, grads = step(config, True, monkeypatch, steps=4)
    assert {key.split(".")[0] for key in grads} == {"0", "1"}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_vace_hint_blocks_and_base_blocks_train_as_diffusers(dtype, tiny_model, tmp_path, monkeypatch):
    from tests.test_vace import vace_dataset

    config = train_config_dict(tiny_model("vace"), vace_dataset(tmp_path / "data"), tmp_path, vace_train_blocks="BOTH",
                               vace_context_scale=0.8, **DTYPES[dtype])
    assert_bit_for_bit(config, monkeypatch)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_animate2_trains_both_passes_as_diffusers(dtype, tiny_model, tmp_path, monkeypatch):
    from tests.test_animate2_training import FRAMES, SIZE, triplets

    config = train_config_dict(tiny_model("animate_2"), triplets(tmp_path / "data"), tmp_path, frames=FRAMES,
                               resolution=[SIZE, SIZE], **DTYPES[dtype])
    assert_bit_for_bit(config, monkeypatch)


@pytest.mark.parametrize("dtype, rtol", [("FLOAT32", 1e-6), ("BFLOAT16", 2 ** -7)])
def test_the_feed_forward_in_token_slices_sums_its_slices_gradients(dtype, rtol, tiny_model, video_dataset, tmp_path,
                                                                     monkeypatch):
    """Checkpointed, the lean block's feed-forward runs its backward in slices (`ffn_chunks` 3 here, in place of
    its per-slice checkpoints): the loss, and every gradient but the feed-forward's adapters', are diffusers' bit for
    bit; those are the sum of the slices' gradients (in float32: within float32 rounding of the sum; under bf16
    autocast diffusers sums the slices' bf16 gradients in bf16 before the float32 cast, the lean block the slices'
    float32 casts: within a bf16 rounding of the largest element)."""
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **{**DTYPES[dtype], "ffn_chunks": 3,
                                                                             "checkpoint_attention": True,
                                                                             "gradient_checkpointing": True})
    assert_bit_for_bit(config, monkeypatch, close=".ffn.", rtol=rtol)


@pytest.mark.parametrize("overrides", [
    {"keep_self_attention": True},
    {"activation_offload": True, "blocks_to_swap": 1},
    {"base_weight_format": "FP8", "peft_type": "LOKR", "lora_rank": 4},
    {"base_weight_format": "INT8_CONVROT"},
    {"training_method": "FINE_TUNE", "optimizer": "ADAMW", "output_model_format": "DIFFUSERS"},
], ids=["kept_attention", "offload+swap", "fp8+lokr", "int8", "fine_tune"])
def test_memory_features_adapters_and_full_fine_tunes_run_the_lean_block_as_diffusers(
        overrides, tiny_model, video_dataset, tmp_path, monkeypatch):
    """Under bf16 autocast and gradient checkpointing; a full fine-tune trains the modulation tables and the
    cross-attention norms (their gradients: sums over every token)."""
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, **DTYPES["BFLOAT16"], **overrides)
    assert_bit_for_bit(config, monkeypatch)


def _block(family: str, width: int = 32):
    from diffusers.models.transformers.transformer_skyreels_v2 import SkyReelsV2TransformerBlock
    from diffusers.models.transformers.transformer_wan import WanTransformerBlock

    torch.manual_seed(0)
    cls = SkyReelsV2TransformerBlock if family == "skyreels" else WanTransformerBlock
    block = cls(width, 2 * width, 2, cross_attn_norm=True)
    with torch.no_grad():
        for param in block.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return block


def _block_grads(block, x, context, temb, family: str, dtype):
    inputs = [t.detach().requires_grad_() for t in (x, context, temb)]
    extra = (None, None) if family == "skyreels" else (None,)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        out = block(*inputs, *extra)
    out.float().pow(2).sum().backward()
    return out.detach(), [t.grad for t in inputs] + [p.grad for p in block.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family, temb_shape", [
    ("wan", (2, 6, 32)), ("wan", (2, 11, 6, 32)),  # a timestep per sample; per token (TI2V)
    ("skyreels", (2, 6, 32)), ("skyreels", (2, 6, 11, 32)),  # SkyReels-V2's diffusion forcing: (B, 6, L, D)
])
def test_token_slices_batches_and_trained_modulation_give_diffusers_numbers(family, temb_shape, dtype):
    """One block trained whole (its modulation table and cross-attention norm too) on a batch of two, the
    timestep per sample or per token, with the arithmetic in slices of 3 tokens: output and every gradient (the
    input's, the context's, the timestep projection's and each parameter's) equal diffusers' bit for bit, but for
    one: SkyReels-V2's table under diffusion forcing, whose gradient diffusers sums over samples and tokens of a
    (B, 6, L, D) tensor and the lean block over (B, L, D) slices of it (the same terms in another order: within
    float32 rounding; the project trains SkyReels-V2 with one timestep per sample)."""
    block = _block(family)
    block.requires_grad_(True)
    lean = copy.deepcopy(block)
    holder = torch.nn.Module()
    holder.blocks = torch.nn.ModuleList([lean])
    assert lean_blocks(holder, BlockSaves(slice_bytes=3 * 2 * 32 * 4)) == 1  # 3 tokens of a batch of 2
    torch.manual_seed(1)
    x, context, temb = torch.randn(2, 11, 32), torch.randn(2, 5, 32), torch.randn(*temb_shape)
    x, context, temb = (t.to(dtype) for t in (x, context, temb))
    out, grads = _block_grads(block, x, context, temb, family, dtype)
    lean_out, lean_grads = _block_grads(lean, x, context, temb, family, dtype)
    assert torch.equal(out, lean_out)
    names = ["x", "context", "temb"] + [name for name, _ in block.named_parameters()]
    differ = [name for name, a, b in zip(names, grads, lean_grads, strict=True) if not torch.equal(a, b)]
    if family == "skyreels" and len(temb_shape) == 4:
        assert differ in ([], ["scale_shift_table"])
        table = names.index("scale_shift_table")
        torch.testing.assert_close(lean_grads[table], grads[table], rtol=1e-5, atol=1e-5)
    else:
        assert differ == []


def test_the_block_keeps_no_float32_tensor_of_the_sequences_size():
    """What autograd keeps for a block's backward (bf16 block, bf16 input, frozen weights, input with gradient, the
    project's attention processor as training installs it): diffusers' block keeps its three norms' float32 inputs;
    the lean one keeps bf16 tensors, the norms' per-token statistics and attention's log-sum-exp only."""
    from modules.model.attention.attention_processor import install

    block = _block("wan").to(torch.bfloat16)
    block.requires_grad_(False)
    holder = torch.nn.Module()
    holder.blocks = torch.nn.ModuleList([block])
    install(holder)
    x = torch.randn(1, 64, 32, dtype=torch.bfloat16, requires_grad=True)
    context, temb = torch.randn(1, 5, 32, dtype=torch.bfloat16), torch.randn(1, 6, 32, dtype=torch.bfloat16)

    def float32_saved(module) -> int:
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            module(x, context, temb, None)
        return sum(1 for t in saved if t.dtype == torch.float32 and t.numel() >= x.numel())

    assert float32_saved(block) >= 3
    lean_blocks(holder)
    assert float32_saved(block) == 0
