"""Speed and training options on CUDA against the same run without them (tests/cuda/runs.py): each attention
backend available here, `compile` (inductor on the GPU), each optimizer (the 8-bit one where bitsandbytes is
installed) and EMA on the GPU and on the CPU."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from modules.optimizer.registry import OPTIMIZERS
from modules.util.attention_kernels import unavailable
from modules.util.enum import AttentionBackend
from tests.cuda.device import DEVICE, MARKS, ON_GPU
from tests.cuda.runs import BF16_GRAD, BF16_LOSS, assert_close_step, relative_distance, release

pytestmark = MARKS

GC = {"checkpointing": {"policy": "FULL"}}
BACKENDS = [b.name for b in AttentionBackend if b not in (AttentionBackend.AUTO, AttentionBackend.NATIVE)]


@pytest.fixture(scope="module")
def native_step(cuda_run, tmp_path_factory):
    return cuda_run(tmp_path_factory.mktemp("native"), **GC).first_step()


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_backend_trains_within_bf16_tolerance_of_native(cuda_run, tmp_path, native_step, backend):
    problem = unavailable(AttentionBackend[backend], DEVICE, training=True) if DEVICE else "no device"
    if problem:
        pytest.skip(f"{backend}: {problem}")
    settings = cuda_run(tmp_path, attention_backend=backend, **GC)
    assert_close_step(settings.first_step(), native_step, BF16_LOSS, BF16_GRAD)
    result = settings.train()
    used = {getattr(m.processor, "_attention_backend", None) for m in result.trainer.model.transformer.modules()
            if hasattr(m, "processor")}
    assert len(used) == 1 and None not in used, used
    assert all(torch.isfinite(torch.tensor(result.losses)))
    release(result.trainer)


@pytest.fixture
def compile_backend(monkeypatch):
    """inductor on the GPU (what users get); on the CPU dynamo's aot_eager, as tests/test_compile.py explains."""
    from modules.modelSetup import compile as compile_module

    if not ON_GPU:
        monkeypatch.setattr(compile_module, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    yield compile_module
    torch._dynamo.reset()


def test_compiled_blocks_train_within_bf16_tolerance_of_eager(cuda_run, tmp_path, native_step, compile_backend):
    """The first step only: each new trainer compiles its blocks again (a minute of inductor on the GPU)."""
    assert_close_step(cuda_run(tmp_path, compile=True, **GC).first_step(), native_step, BF16_LOSS, BF16_GRAD)
    assert compile_backend.compiled_graphs() > 0  # the blocks ran compiled (a forward and a backward graph at least)


# Step sizes that move the tiny LoRA in 4 steps (Prodigy estimates its own).
LEARNING_RATES = {"PRODIGY": 1.0}
# Adam-like first steps move each weight by about the sign of its gradient: an element whose gradient is near
# zero can take either sign on two devices. 10 % of the update's norm allows a few such flips; a state kept on the
# wrong device, a dtype mix-up or a missing step is far off.
UPDATE_TOLERANCE = 0.1


def optimizer_run(cuda_run, work, name: str, device: str):
    return cuda_run(work, optimizer=name, learning_rate=LEARNING_RATES.get(name, 1e-3), train_device=device,
                    train_dtype="FLOAT32", transformer_dtype="FLOAT32").train()


@pytest.mark.parametrize("name", [n for n in OPTIMIZERS if n != "ADAMW_8BIT"])
def test_optimizer_on_cuda_trains_as_on_the_cpu(cuda_run, tmp_path, name):
    if OPTIMIZERS[name].missing():
        pytest.skip(f"{name} {OPTIMIZERS[name].missing()}")
    on_device = optimizer_run(cuda_run, tmp_path / "device", name, DEVICE)
    state = [v for s in on_device.trainer.optimizer.state_dict()["state"].values() for v in s.values()
             if isinstance(v, torch.Tensor) and v.numel() > 1]
    assert all(v.device.type == torch.device(DEVICE).type for v in state), "optimizer state off the train device"
    release(on_device.trainer)
    on_cpu = optimizer_run(cuda_run, tmp_path / "cpu", name, "cpu")
    release(on_cpu.trainer)
    assert on_device.losses == pytest.approx(on_cpu.losses, rel=1e-3)
    assert relative_distance(on_device.update(), on_cpu.update()) <= UPDATE_TOLERANCE


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed")
def test_adamw_8bit_trains_close_to_adamw(cuda_run, tmp_path):
    """8-bit state (block-wise quantised moments): the same direction as AdamW's, within quantisation error."""
    eight = optimizer_run(cuda_run, tmp_path / "8bit", "ADAMW_8BIT", DEVICE)
    release(eight.trainer)
    full = optimizer_run(cuda_run, tmp_path / "full", "ADAMW", DEVICE)
    release(full.trainer)
    assert eight.losses == pytest.approx(full.losses, rel=2e-2)
    assert relative_distance(eight.update(), full.update()) <= 2 * UPDATE_TOLERANCE


DECAY = 0.8


def ema_run(cuda_run, work, mode: str):
    """A run with EMA `mode`, the trained weights recorded after every step (as EMA keys)."""
    settings = cuda_run(work, ema=mode, ema_decay=DECAY)
    trainer = settings.trainer()
    history = []
    record = lambda: history.append({"0." + k.removeprefix("transformer."): v.detach().float().cpu().clone()  # noqa: E731
                                     for k, v in trainer.setup.trainable_state().items()})
    trainer.start()
    record()
    trainer.callbacks.on_update = lambda update: record()
    trainer.train()
    return trainer, history


def test_ema_on_the_gpu_and_on_the_cpu_average_alike_and_leave_training_alone(cuda_run, tmp_path):
    plain = cuda_run(tmp_path / "off").train()
    release(plain.trainer)
    averages = {}
    for mode, device in (("GPU", DEVICE), ("CPU", "cpu")):
        trainer, history = ema_run(cuda_run, tmp_path / mode, mode)
        # where the average lives while training (state_dict() is the backup's copy, always on the CPU)
        assert {v.device.type for v in trainer.ema.shadow.values()} == {torch.device(device).type}, mode
        state = trainer.ema.state_dict()
        expected = dict(history[0])
        for weights in history[1:]:
            expected = {k: DECAY * expected[k] + (1 - DECAY) * weights[k] for k in expected}
        averages[mode] = {k: v.float().cpu() for k, v in state.items()}
        assert averages[mode].keys() == expected.keys()
        assert relative_distance(averages[mode], expected) < 1e-6, mode
        trained = {"transformer." + k.removeprefix("0."): v for k, v in history[-1].items()}
        assert all(torch.equal(trained[k], plain.state[k]) for k in plain.state), f"EMA {mode} changed training"
        release(trainer)
    assert all(torch.allclose(averages["GPU"][k], averages["CPU"][k], rtol=0, atol=1e-6) for k in averages["CPU"])
