"""Memory features of issue #17, deliverable 3, on the CPU: `offload_inactive_expert` trains a two-expert BOTH run
exactly as without it, and the text encoder and CLIP leave the train device after caching with nothing else
holding them."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepRandom
from modules.modelSetup import memory
from modules.modelSetup.memory import ExpertOffloader, is_placement_managed, release_from_device
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from tests.conftest import train_config_dict


def train_both(tiny_model, video_dataset, work, steps=6, **overrides):
    """Losses and routed experts of `steps` optimizer steps of a BOTH run on the tiny A14B model (half the steps
    on each expert, so that the routing switches)."""
    config = TrainConfig.from_dict(train_config_dict(tiny_model("a14b"), video_dataset, work, expert_step_share=0.5,
                                                     **overrides))
    trainer = GenericTrainer(config)
    trainer.start()
    losses, experts, active = [], [], []
    for step in range(steps):
        random = StepRandom.for_micro_step(config.seed, step, 1)
        output = trainer.setup.predict(trainer.data.assemble(trainer.data.load_batch([step % 3], 0), random), random)
        output.loss.backward()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        losses.append(float(output.loss.detach()))
        experts.append(output.expert)
        active.append(trainer.setup.offloader.active if trainer.setup.offloader else None)
    return losses, experts, active, trainer


def test_offloading_the_idle_expert_trains_exactly_as_without(tiny_model, video_dataset, tmp_path):
    plain, plain_experts, _, reference = train_both(tiny_model, video_dataset, tmp_path / "plain")
    losses, experts, active, trainer = train_both(tiny_model, video_dataset, tmp_path / "offload",
                                                  offload_inactive_expert=True)
    assert set(experts) == {0, 1}  # both experts were routed to (the steps cross the boundary)
    assert experts == plain_experts and losses == plain  # bit for bit: the moves are no-ops on the CPU
    assert active == experts  # the routed expert was the one brought in
    offloader = trainer.setup.offloader
    assert offloader.transfers == 1 + sum(a != b for a, b in zip(experts, experts[1:]))  # one per switch
    assert not offloader.pin  # no page-locked memory without CUDA
    assert all(is_placement_managed(t) for t in trainer.model.transformers())
    state, other = trainer.setup.trainable_state(), reference.setup.trainable_state()
    assert all(torch.equal(value, other[name]) for name, value in state.items())


def test_with_block_swap_the_offloader_leaves_the_swapped_blocks_alone(tiny_model, video_dataset, tmp_path):
    plain, *_ = train_both(tiny_model, video_dataset, tmp_path / "plain", steps=3, blocks_to_swap=1,
                           gradient_checkpointing=True)
    losses, _, _, trainer = train_both(tiny_model, video_dataset, tmp_path / "both", steps=3, blocks_to_swap=1,
                                       gradient_checkpointing=True, offload_inactive_expert=True)
    assert losses == plain
    swapped = set().union(*(s.swapped_parameters() for s in trainer.setup.swappers))
    assert swapped and not swapped & {id(param) for pairs in trainer.setup.offloader.host for param, _ in pairs}


def test_the_offloader_keeps_one_experts_frozen_weights_on_the_device_at_a_time(monkeypatch):
    """With device copies simulated (each move makes a new tensor), switching experts drops every reference to
    the idle expert's device copies, so the allocator can reuse them."""
    experts = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
    for expert in experts:
        expert.requires_grad_(False)
    device_copies = []
    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        out = real_to(self, *args, **kwargs)
        if out is self:  # the CPU's no-op move: make it a copy, as a host -> device transfer is
            out = self.clone()
            device_copies.append(weakref.ref(out))
        return out

    offloader = ExpertOffloader(experts, torch.device("cpu"))
    monkeypatch.setattr(torch.Tensor, "to", to)
    experts[0](torch.ones(1, 4))
    first = list(device_copies)
    experts[1](torch.ones(1, 4))
    gc.collect()
    assert len(first) == 2 and all(ref() is None for ref in first)  # weight and bias of expert 0: released
    assert offloader.active == 1 and offloader.transfers == 2


def test_offload_inactive_expert_is_checked_at_start_up():
    with pytest.raises(ConfigError, match="config key 'offload_inactive_expert' applies to train_expert BOTH"):
        TrainConfig.from_dict({"offload_inactive_expert": True, "train_expert": "HIGH"})
    with pytest.raises(ConfigError, match="config key 'offload_inactive_expert' moves frozen weights"):
        TrainConfig.from_dict({"offload_inactive_expert": True, "training_method": "FINE_TUNE",
                               "output_model_format": "DIFFUSERS"})


def test_the_encoders_leave_the_train_device_after_caching_and_nothing_keeps_them(tiny_model, video_dataset,
                                                                                   tmp_path):
    config = TrainConfig.from_dict(train_config_dict(tiny_model("i2v"), video_dataset, tmp_path, max_steps=1))
    trainer = GenericTrainer(config)
    trainer.start()
    model = trainer.model
    # freed after caching (the samples' inputs were encoded ahead): no weights left, shapes and configs kept
    assert all(t.device.type == "meta" for encoder in (model.text_encoder, model.image_encoder)
               for t in list(encoder.parameters()) + list(encoder.buffers()))
    # no data loader, pipeline module or cache holds the encoders (or pieces of them) past caching: once the
    # model lets go, they are collected, so parking them frees their device memory
    refs = [weakref.ref(model.text_encoder), weakref.ref(model.image_encoder),
            weakref.ref(next(model.text_encoder.parameters()))]
    model.text_encoder = model.image_encoder = None
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]


def test_releasing_on_a_gpu_collects_and_empties_the_cache(monkeypatch):
    """What runs on CUDA/ROCm (faked here): the move, a garbage collection, then the caching allocator's
    empty_cache, and the freed bytes are measured; on the CPU only the move (no device memory to give back, and a
    full collection costs ~0.5 s of each start-up)."""
    calls = []
    allocated = iter([3 * 2 ** 30, 1 * 2 ** 30, 1 * 2 ** 30])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: next(allocated))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(gc, "collect", lambda: calls.append("collect"))
    encoder = torch.nn.Linear(2, 2)
    monkeypatch.setattr(encoder, "to", lambda device: calls.append(f"to {device}"))
    assert release_from_device([encoder, None], torch.device("cuda", 0)) == 2 * 2 ** 30
    assert calls == ["to cpu", "collect", "empty_cache"]
    calls.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert release_from_device([encoder], torch.device("cpu")) == 0
    assert calls == ["to cpu"]


def test_pinned_memory_only_beside_a_cuda_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not memory.can_pin_memory(torch.device("cuda"))  # a CUDA config on a machine without one
    assert not memory.can_pin_memory(torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # CUDA or ROCm (torch.cuda is HIP there)
    assert memory.can_pin_memory(torch.device("cuda"))
    assert not memory.can_pin_memory(torch.device("cpu"))


def test_sampling_during_an_offloaded_run_routes_both_experts_in_and_leaves_placement_alone(
        tiny_model, video_dataset, tmp_path):
    """The sampler moves whole modules to the device, except the transformers a memory feature places: the
    offloader's hooks bring each expert in as the pipeline switches at the boundary."""
    sample = {"prompt": "a red ball", "frames": 5, "height": 32, "width": 32, "steps": 4, "cfg_scale": 1.0}
    *_, trainer = train_both(tiny_model, video_dataset, tmp_path, steps=1, offload_inactive_expert=True,
                             samples=[sample], sample_at_end=False)
    offloader = trainer.setup.offloader
    before = offloader.transfers
    paths = trainer.sample()
    assert len(paths) == 1 and paths[0].exists()
    assert offloader.transfers >= before + 1 and offloader.active == 1  # high noise first, then the low-noise expert


def test_the_vram_estimate_counts_one_experts_weights_with_offload(tiny_model):
    from modules.modelSetup.memory_estimate import estimate

    base = {"base_model_name": str(tiny_model("a14b")), "train_device": "cpu"}
    both = estimate(TrainConfig.from_dict(base)).phases["training"]["transformer_weights"]
    offloaded = estimate(TrainConfig.from_dict({**base, "offload_inactive_expert": True}))
    assert offloaded.phases["training"]["transformer_weights"] == pytest.approx(both / 2)  # two equal experts
    assert offloaded.both_experts
    small_gpu = estimate(TrainConfig.from_dict(base), gpu_gib=0.001)
    assert any(s.startswith("offload_inactive_expert: true") for s in small_gpu.suggestions)
