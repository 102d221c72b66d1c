"""Each memory feature on CUDA against the same run without it (tests/cuda/runs.py says how runs are compared):
the learning-size tiny T2V (and A14B for expert offload) trained with the project's own trainer."""
from __future__ import annotations

import pytest
import torch

from tests.cuda.device import MARKS, needs_gpu
from tests.cuda.runs import BF16_GRAD, BF16_LOSS, FP8_GRAD, FP8_LOSS, assert_close_step, assert_same_run, release

pytestmark = MARKS

GC = {"checkpointing": {"policy": "FULL"}}


@pytest.fixture(scope="module")
def plain(cuda_run, tmp_path_factory):
    """The run every bit-exact comparison is against: gradient checkpointing off, nothing offloaded."""
    result = cuda_run(tmp_path_factory.mktemp("plain")).train()
    release(result.trainer)
    return result


@pytest.fixture(scope="module")
def checkpointed(cuda_run, tmp_path_factory):
    result = cuda_run(tmp_path_factory.mktemp("checkpointed"), **GC).train()
    release(result.trainer)
    return result


@pytest.fixture(scope="module")
def plain_step(cuda_run, tmp_path_factory):
    return cuda_run(tmp_path_factory.mktemp("plain-step"), **GC).first_step()


def test_gradient_checkpointing_trains_bit_for_bit_as_without(plain, checkpointed):
    assert_same_run(checkpointed, plain)


def test_activation_offload_trains_bit_for_bit_as_without(cuda_run, tmp_path, checkpointed):
    result = cuda_run(tmp_path, activation_offload=True, **GC).train()
    assert result.trainer.setup.config.activation_offload
    assert_same_run(result, checkpointed)
    release(result.trainer)


@pytest.mark.parametrize("swapped", [1, 3])
def test_block_swap_n_gives_the_weights_of_block_swap_0(cuda_run, tmp_path, checkpointed, swapped):
    """The swapped blocks' frozen weights stream in on a copy stream each step: a missing wait gives other numbers,
    a copy back that lands late other frozen weights; both show here."""
    result = cuda_run(tmp_path, blocks_to_swap=swapped, **GC).train()
    assert_same_run(result, checkpointed)
    setup = result.trainer.setup
    (swapper,) = setup.swappers
    assert len(swapper.blocks) == swapped and swapper.demand_loads == len(result.losses)  # one wait per step only
    blocks = result.trainer.model.transformer.blocks
    frozen = {name: p for name, p in blocks.named_parameters() if not p.requires_grad}
    assert all(p.device.type == "cpu" for block in swapper.blocks for p in block.parameters()
               if not p.requires_grad), "swapped frozen weights are left on the device after the step"
    reference = cuda_run(tmp_path / "loaded").trainer()
    reference.start()
    loaded = dict(reference.model.transformer.blocks.named_parameters())
    assert all(torch.equal(p.detach().cpu(), loaded[name].detach().cpu()) for name, p in frozen.items()), \
        "a swapped block's frozen weights changed on their way between host and device"
    release(reference)
    release(result.trainer)


def test_split_block_recompute_stays_within_bf16_tolerance(cuda_run, tmp_path, plain_step):
    """ffn_chunks runs the FFN's matmuls on token chunks: other GEMM shapes, another summation order."""
    step = cuda_run(tmp_path, ffn_chunks=3, checkpoint_attention=True, **GC).first_step()
    assert_close_step(step, plain_step, BF16_LOSS, BF16_GRAD)


def test_checkpoint_attention_alone_is_bit_exact(cuda_run, tmp_path, checkpointed):
    result = cuda_run(tmp_path, checkpoint_attention=True, **GC).train()
    assert_same_run(result, checkpointed)
    release(result.trainer)


@pytest.mark.parametrize("backend", ["NATIVE", pytest.param("CUDNN", marks=needs_gpu("cuDNN attention"))])
def test_checkpointing_policies_train_bit_for_bit_as_full_checkpointing(cuda_run, tmp_path, checkpointed, backend):
    """KEEP_ATTENTION with one kept block: block 0 is not recomputed, the others' recompute takes the forward's
    attention output (the same kernel on the same inputs): equal bit for bit, and every checkpointed block's
    self-attention kernel matched (else this backend's kernel is not one torch's SDPA runs)."""
    reference = checkpointed if backend == "NATIVE" else cuda_run(tmp_path / "ref", attention_backend=backend,
                                                                  **GC).train()
    result = cuda_run(tmp_path / "kept", checkpointing={"policy": "KEEP_ATTENTION", "kept_blocks": 1},
                      attention_backend=backend).train()
    (kept,) = result.trainer.setup.checkpoints
    assert kept.matched == (len(result.trainer.model.transformer.blocks) - 1) * len(result.losses)
    assert_same_run(result, reference)
    release(result.trainer)
    if reference is not checkpointed:
        release(reference.trainer)


@pytest.mark.parametrize("scale", ["NONE", "TENSOR", "CHANNEL"])
def test_fp8_storage_stays_within_fp8_tolerance_and_trains_the_lora_in_float32(cuda_run, tmp_path, plain_step,
                                                                               scale):
    settings = cuda_run(tmp_path, base_weight_format="FP8", fp8_scale=scale, **GC)
    loss, grads = settings.first_step()
    assert_close_step((loss, grads), plain_step, FP8_LOSS, FP8_GRAD)
    result = settings.train()
    stored = {p.dtype for t in result.trainer.model.transformers() for p in t.blocks.parameters()
              if not p.requires_grad and p.ndim == 2}
    assert stored == {torch.float8_e4m3fn}, stored
    assert all(v.dtype == torch.float32 for v in result.trainer.setup.trainable_state().values())
    assert all(torch.isfinite(torch.tensor(result.losses)))
    release(result.trainer)


def test_expert_offload_trains_both_experts_bit_for_bit_as_resident(cuda_run, tmp_path):
    both = dict(expert_step_share=0.5, **GC)
    resident = cuda_run(tmp_path / "resident", variant="a14b", **both).train()
    release(resident.trainer)
    offload = cuda_run(tmp_path / "offload", variant="a14b", offload_inactive_expert=True, **both).train()
    offloader = offload.trainer.setup.offloader
    assert offloader is not None and offloader.transfers >= 2, "the steps never switched experts"
    assert offloader.pin == torch.cuda.is_available()  # page-locked host copies on a GPU
    assert_same_run(offload, resident)
    idle = offload.trainer.model.transformers()[1 - offloader.active]
    assert all(p.device.type == "cpu" for p in idle.parameters() if not p.requires_grad)
    release(offload.trainer)


def test_cuda_training_matches_the_cpu_in_float32(cuda_run, tmp_path):
    """The baseline itself: the same first step on CUDA and on the CPU in float32 (TF32 off)."""
    from tests.cuda.device import ON_GPU

    if not ON_GPU:
        pytest.skip("compares CUDA with the CPU")
    f32 = dict(train_dtype="FLOAT32", transformer_dtype="FLOAT32")
    on_gpu = cuda_run(tmp_path / "gpu", **f32).first_step()
    on_cpu = cuda_run(tmp_path / "cpu", train_device="cpu", **f32).first_step()
    assert_close_step(on_gpu, on_cpu, 1e-4, 1e-3)  # float32 kernels, other summation orders
