"""Memory features leave the training math unchanged (on the CPU; measured on GPUs by benchmarks/)."""
from __future__ import annotations

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from tests.conftest import train_config_dict


def first_step(tiny_model, video_dataset, work, **overrides):
    """Loss and LoRA gradients of one step on the tiny i2v model."""
    config = TrainConfig.from_dict(train_config_dict(tiny_model("i2v"), video_dataset, work, **overrides))
    trainer = GenericTrainer(config)
    trainer.start()
    batch = trainer.data.load_batch([0, 1], 0)
    random = StepRandom.for_micro_step(0, 0, 2)
    output = trainer.setup.predict(trainer.data.assemble(batch, random), random)
    output.loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.transformer.named_parameters() if p.grad is not None}
    return output.loss.detach(), grads


@pytest.fixture(scope="module")
def reference(tiny_model, video_dataset, tmp_path_factory):
    return first_step(tiny_model, video_dataset, tmp_path_factory.mktemp("reference"))


@pytest.mark.parametrize("overrides", [
    {"blocks_to_swap": 1, "gradient_checkpointing": True},
    {"gradient_checkpointing": True, "ffn_chunks": 3},
    {"gradient_checkpointing": True, "checkpoint_attention": True, "ffn_chunks": 2},
    {"ffn_chunks": 2, "checkpoint_attention": True},
    {"activation_offload": True},
    {"gradient_checkpointing": True, "activation_offload": True},
    {"vae_tiling": True},
])
def test_feature_gives_the_same_loss_and_gradients(tiny_model, video_dataset, tmp_path, reference, overrides):
    loss, grads = first_step(tiny_model, video_dataset, tmp_path, **overrides)
    ref_loss, ref_grads = reference
    assert torch.allclose(loss, ref_loss, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    assert all(torch.allclose(grads[k], ref_grads[k], atol=1e-6) for k in grads)


def test_fp8_storage_stays_close_and_keeps_lora_in_full_precision(tiny_model, video_dataset, tmp_path, reference):
    loss, grads = first_step(tiny_model, video_dataset, tmp_path, base_weight_format="FP8")
    assert abs(float(loss) - float(reference[0])) < 0.05 * float(reference[0])
    assert grads and all(g.dtype == torch.float32 for g in grads.values())


def test_block_swap_keeps_swapped_frozen_weights_off_the_train_device(tiny_model, video_dataset, tmp_path):
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, blocks_to_swap=1,
                                                     gradient_checkpointing=True))
    trainer = GenericTrainer(config)
    trainer.start()
    swapper = trainer.setup.swappers[0]
    assert swapper.blocks == [trainer.model.transformer.blocks[-1]]
    assert all(not p.requires_grad for pairs in swapper.host for p, _ in pairs)


def test_block_swap_without_checkpointing_is_refused_at_start_up():
    with pytest.raises(ConfigError, match="config key 'blocks_to_swap' needs checkpointed blocks"):
        TrainConfig.from_dict({"blocks_to_swap": 2, "gradient_checkpointing": False})


def test_fine_tune_refuses_block_swap():
    with pytest.raises(ConfigError, match="blocks_to_swap"):
        TrainConfig.from_dict({"training_method": "FINE_TUNE", "output_model_format": "DIFFUSERS", "blocks_to_swap": 2})


def _tiny_block_stack(seed: int = 0):
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                  out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=4, rope_max_seq_len=32)
    model.requires_grad_(False)
    model.proj_out.requires_grad_(True)
    for block in model.blocks:  # gradients flow through every block, their big weights stay frozen (as under LoRA)
        block.scale_shift_table.requires_grad_(True)
    model.enable_gradient_checkpointing()
    return model


def _loss_and_grad(model):
    generator = torch.Generator().manual_seed(1)
    x, text = torch.randn(1, 4, 3, 8, 8, generator=generator), torch.randn(1, 5, 16, generator=generator)
    output = model(hidden_states=x, timestep=torch.tensor([500.0]), encoder_hidden_states=text, return_dict=False)[0]
    loss = output.pow(2).mean()
    loss.backward()
    return loss.detach(), model.proj_out.weight.grad.clone()


def test_block_swap_prefetches_in_both_directions():
    """With checkpointing the backward recomputes the swapped blocks in reverse order; each one's weights
    are already on their way (prefetched by the block before it), so only the very first block of a step
    waits for its copy."""
    from modules.modelSetup.memory import BlockSwapper

    reference = _loss_and_grad(_tiny_block_stack())
    model = _tiny_block_stack()
    swapper = BlockSwapper(model, 3, torch.device("cpu"))
    for step in range(2):
        loss, grad = _loss_and_grad(model)
        assert swapper.demand_loads == step + 1
        assert not swapper.ready  # nothing left resident after the step
        swapped = [(p, cpu) for index in range(3) for p, cpu in swapper.host[index]]
        assert all(p.data_ptr() == cpu.data_ptr() for p, cpu in swapped)
    assert torch.allclose(loss, reference[0], atol=1e-6) and torch.allclose(grad, reference[1] * 2, atol=1e-6)


def test_adapters_without_peft_input_cast_give_the_same_loss_and_gradients(tiny_model, video_dataset, tmp_path,
                                                                             monkeypatch):
    """Under bf16 autocast the adapted layers take their input as it is (no float32 copy): autocast casts it back to
    bf16 for the matmul either way, so the loss and the gradients are bit for bit those with peft's cast."""
    import modules.modelSetup.WanLoRASetup as lora_setup

    bf16 = {"train_dtype": "BFLOAT16", "transformer_dtype": "BFLOAT16"}
    loss, grads = first_step(tiny_model, video_dataset, tmp_path / "kept", **bf16)
    monkeypatch.setattr(lora_setup, "keep_input_dtype", lambda transformer: None)  # peft's own cast to float32
    cast_loss, cast_grads = first_step(tiny_model, video_dataset, tmp_path / "cast", **bf16)
    assert torch.equal(loss, cast_loss)
    assert grads.keys() == cast_grads.keys() and all(torch.equal(grads[k], cast_grads[k]) for k in grads)
