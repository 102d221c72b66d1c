"""`compile: true` on the CPU: the compiled (lean) blocks train as the eager ones, with gradient checkpointing, block
swap, LoRA/LoKr adapters, bf16 autocast, scaled fp8 storage (diffusers' layerwise-casting hooks, which re-cast
parameters inside the compiled forward, failed the checkpoint's recompute check here) and an int8 ConvRot base (its
autograd.Function failed inside dynamo; its forward and input gradient are custom ops now), and a new bucket shape adds
graphs once, not per
step.

dynamo's "aot_eager" backend stands in for inductor here: the same tracing, functionalisation and autograd
graphs, without inductor's C++ codegen, which takes minutes on the 2-core CI machine (inductor itself gave the
same losses within 2e-7 relative on a tiny model here; the GPU commands in docs/performance.md use it)."""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.modelSetup import compile as compile_module
from modules.trainer.GenericTrainer import GenericTrainer
from tests.conftest import train_config_dict


@pytest.fixture(autouse=True)
def aot_eager(monkeypatch):
    monkeypatch.setattr(compile_module, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def losses(tiny_model, video_dataset, work, steps=3, **overrides):
    """The losses of `steps` training steps on the tiny T2V model (fp32) and the trained weights."""
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, work, **overrides))
    trainer = GenericTrainer(config)
    trainer.start()
    out = []
    for step in range(steps):
        random = StepRandom.for_micro_step(config.seed, step, 2)
        output = trainer.setup.predict(trainer.data.assemble(trainer.data.load_batch([step % 3, (step + 1) % 3], 0),
                                                             random), random)
        output.loss.backward()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        out.append(float(output.loss.detach()))
    return out, trainer


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    {"gradient_checkpointing": True},
    {"gradient_checkpointing": True, "blocks_to_swap": 1, "peft_type": "LOKR", "lora_rank": 4},
    {"gradient_checkpointing": True, "base_weight_format": "FP8", "fp8_scale": "CHANNEL"},
    {"gradient_checkpointing": True, "base_weight_format": "INT8_CONVROT"},
    # bf16 autocast: the lean block's autograd functions and the q/k norm's checkpoint traced under autocast
    {"gradient_checkpointing": True, "train_dtype": "BFLOAT16", "transformer_dtype": "BFLOAT16"},
], ids=["lora+checkpointing", "lokr+checkpointing+block_swap", "checkpointing+scaled_fp8", "checkpointing+int8",
        "bf16+checkpointing"])
def test_compiled_blocks_train_as_the_eager_ones(tiny_model, video_dataset, tmp_path, overrides):
    eager, _ = losses(tiny_model, video_dataset, tmp_path / "eager", **overrides)
    compiled, trainer = losses(tiny_model, video_dataset, tmp_path / "compiled", compile=True, **overrides)
    blocks = trainer.model.transformer.blocks
    assert all(getattr(block, "_wan_compiled", False) for block in blocks)
    # the same kernels (aot_eager): equal up to float32 summation order
    assert compiled == pytest.approx(eager, rel=1e-5, abs=1e-7), (compiled, eager)


@pytest.mark.slow
def test_new_bucket_shapes_add_graphs_once_not_per_step(tiny_model, video_dataset, tmp_path):
    """Three buckets (two square, one not), each visited twice: graphs are added by the first step of a shape
    only (dynamic shapes), never by a repeat."""
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, compile=True,
                                                     gradient_checkpointing=True))
    trainer = GenericTrainer(config)
    trainer.start()
    setup = trainer.setup
    batch = trainer.data.assemble(trainer.data.load_batch([0], 0), StepRandom.for_micro_step(0, 0, 1))
    shapes = [(3, 2, 2), (3, 2, 4), (2, 4, 4), (3, 2, 2), (3, 2, 4), (2, 4, 4)]
    added = []
    for step, (t, h, w) in enumerate(shapes):
        before = compile_module.compiled_graphs()
        x0 = torch.randn(1, 16, t, 2 * h, 2 * w)
        inputs = dataclasses.replace(batch, x0=x0)
        random = StepRandom.for_micro_step(0, step, 1)
        setup.predict(inputs, random).loss.backward()
        added.append(compile_module.compiled_graphs() - before)
    assert added[3:] == [0, 0, 0], added  # a known shape compiles nothing
    assert sum(added[:3]) <= 6, added  # grad / no-grad input of block 0, and square vs not: no storm
    # each new shape logged once, at the step after it (when its graphs are known)
    assert [m.split(" (")[0] for m in setup.compile_log.messages] == [
        "compile: new shape [1, 16, 3, 4, 4]", "compile: new shape [1, 16, 3, 4, 8]", "compile: new shape [1, 16, 2, 8, 8]"]


def test_compile_on_a_gpu_needs_triton(monkeypatch):
    """Checked at start-up (CUDA and ROCm builds both compile through triton); the CPU needs none."""
    from modules.config import train_config
    from modules.util.base_config import ConfigError

    real = train_config.importlib.util.find_spec
    monkeypatch.setattr(train_config.importlib.util, "find_spec", lambda name: None if name == "triton" else real(name))
    with pytest.raises(ConfigError, match="config key 'compile' is ON, which needs the 'triton' package on a GPU"):
        TrainConfig.from_dict({"compile": True, "train_device": "cuda"})
    assert TrainConfig.from_dict({"compile": True, "train_device": "cpu"}).compile.name == "ON"
    assert TrainConfig.from_dict({"train_device": "cuda"}).compile.name == "AUTO"  # AUTO: off without triton


def test_blocks_are_found_by_their_class_ancestry_as_fsdp_renames_them(tiny_model):
    """fully_shard (FSDP2) swaps each block's class for a subclass named FSDPWanTransformerBlock; the blocks must
    still be compiled (tests/test_distributed.py runs compile under FSDP end to end)."""
    from modules.modelLoader.WanModelLoader import WanModelLoader

    transformer = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu")).transformer
    for block in transformer.blocks:  # what fully_shard does to the class of a module it shards
        block.__class__ = type(f"FSDP{type(block).__name__}", (type(block),), {})
    assert compile_module.compile_blocks(transformer) == len(transformer.blocks) > 0
    assert compile_module.compile_blocks(transformer) == 0  # a second call compiles nothing more


def test_compile_auto_compiles_on_a_cuda_gpu_with_triton_and_caches_graphs_across_runs(monkeypatch, tmp_path):
    """compile AUTO: on for a CUDA device with triton (not the CPU, not ROCm, not an int8 base); ON / OFF as set, the
    old true / false read as them; the graph caches (inductor's FX graph and AOTAutograd's) on, in a folder that
    outlives the run (not inductor's temporary default)."""
    import importlib.util

    from modules.util.enum import CompileMode

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "triton" else None)
    monkeypatch.setattr(torch.version, "hip", None)
    auto = TrainConfig()
    assert auto.compile == CompileMode.AUTO
    assert compile_module.compile_wanted(auto, cuda)[0] and not compile_module.compile_wanted(auto, cpu)[0]
    int8 = TrainConfig.from_dict({"base_weight_format": "INT8_CONVROT"})
    assert "int8" in compile_module.compile_wanted(int8, cuda)[1] and not compile_module.compile_wanted(int8, cuda)[0]
    assert TrainConfig.from_dict({"compile": True}).compile == CompileMode.ON
    assert not compile_module.compile_wanted(TrainConfig.from_dict({"compile": False}), cuda)[0]
    assert compile_module.compile_wanted(TrainConfig.from_dict({"compile": "ON"}), cpu)[0]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert "triton" in compile_module.compile_wanted(auto, cuda)[1] and not compile_module.compile_wanted(auto, cuda)[0]

    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)
    folder = compile_module.enable_graph_cache()
    assert folder == tmp_path / "wantrainer" / "torch_compile" and folder.is_dir()
    assert inductor_config.fx_graph_cache and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(folder)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # inductor's own default, written by it
    assert compile_module.enable_graph_cache() == folder
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))  # the user's folder wins
    assert compile_module.enable_graph_cache() == tmp_path / "mine"
