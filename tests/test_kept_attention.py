"""keep_self_attention: under gradient checkpointing each block's self-attention output is kept from the forward,
so the backward's recompute does not run the attention kernel again; the loss and every gradient are those of plain
checkpointing bit for bit, in float32 and under bf16 autocast (where the attention's norm + rotary run under their own
nested checkpoint)."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.modelSetup.kept_attention import is_self_attention_kernel
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from tests.conftest import train_config_dict


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


def step(tiny_model, video_dataset, work, **overrides):
    """Loss, LoRA gradients and the attention kernels counted over one checkpointed step on the tiny T2V."""
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, work,
                                                     gradient_checkpointing=True, **overrides))
    trainer = GenericTrainer(config)
    trainer.start()
    random = StepRandom.for_micro_step(0, 0, 2)
    inputs = trainer.data.assemble(trainer.data.load_batch([0, 1], 0), random)
    with AttentionKernels() as kernels:
        output = trainer.setup.predict(inputs, random)
        output.loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.transformer.named_parameters() if p.grad is not None}
    return output.loss.detach(), grads, kernels, trainer.setup.kept_attention


@pytest.mark.parametrize("dtype", ["FLOAT32", "BFLOAT16"])
def test_kept_self_attention_trains_bit_for_bit_and_runs_the_kernel_once(tiny_model, video_dataset, tmp_path, dtype):
    dtypes = {"train_dtype": dtype, "transformer_dtype": dtype}
    loss, grads, plain, _ = step(tiny_model, video_dataset, tmp_path / "plain", **dtypes)
    kept_loss, kept_grads, kept, (kept_attention,) = step(tiny_model, video_dataset, tmp_path / "kept",
                                                          keep_self_attention=True, **dtypes)
    assert torch.equal(loss, kept_loss)
    assert grads.keys() == kept_grads.keys() and all(torch.equal(grads[k], kept_grads[k]) for k in grads)
    blocks = len(tiny_model_blocks(tiny_model))
    assert plain.self_attention == 2 * blocks  # forward and recompute
    assert kept.self_attention == blocks and kept_attention.matched == blocks  # the recompute took the kept output
    assert kept.cross_attention == plain.cross_attention == 2 * blocks  # cross-attention is recomputed as before


def tiny_model_blocks(tiny_model):
    import json

    config = json.loads((tiny_model("t2v") / "transformer" / "config.json").read_text())
    return range(config["num_layers"])


@pytest.mark.parametrize(("overrides", "words"), [
    ({"keep_self_attention": True}, "set gradient_checkpointing true"),
    ({"keep_self_attention": True, "gradient_checkpointing": True, "checkpoint_attention": True}, "set one of them"),
])
def test_keep_self_attention_needs_checkpointing_and_refuses_checkpoint_attention(tiny_model, video_dataset,
                                                                                tmp_path, overrides, words):
    values = {**train_config_dict(tiny_model("t2v"), video_dataset, tmp_path), **overrides}
    with pytest.raises(ConfigError, match="keep_self_attention") as error:
        TrainConfig.from_dict(values)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_the_estimate_counts_each_blocks_kept_output_and_auto_keeps_the_users_choice(tmp_path):
    import json

    from benchmarks.gpu_step import transformer_config
    from modules.modelSetup.memory_estimate import estimate
    from modules.modelSetup.memory_plan import plan_memory

    (tmp_path / "transformer").mkdir()  # the estimate reads configs, no weights
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(
        {"_class_name": "WanTransformer3DModel", **transformer_config("1.3b")}))
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text(json.dumps({"z_dim": 16}))
    values = {"base_model_name": str(tmp_path), "resolution": [480, 832], "frames": 81, "train_dtype": "BFLOAT16",
              "transformer_dtype": "BFLOAT16", "gradient_checkpointing": True}
    plain = estimate(TrainConfig.from_dict(values), 24.0).phases["training"]
    config = TrainConfig.from_dict({**values, "keep_self_attention": True})
    kept = estimate(config, 24.0).phases["training"]
    tokens, dim, layers = 21 * 30 * 52, 1536, 30  # 1.3B at 832x480x81: 32,760 tokens, 12 heads of 128
    per_block = tokens * (dim * 2 + 12 * 4)  # the bf16 output and the float32 log-sum-exp of each head
    assert kept["activations.kept_self_attention"] == pytest.approx(per_block * (layers - 1) / 2**30)
    assert {k: v for k, v in kept.items() if k != "activations.kept_self_attention"} == plain
    small = plan_memory(config, gpu_gib=8.0, ram_gib=64)  # AUTO keeps what the user set and splits nothing
    assert small.config.keep_self_attention and not small.config.checkpoint_attention
    assert small.config.ffn_chunks == 0 and small.changes
