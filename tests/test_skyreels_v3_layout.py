"""E2V in SkyReels-V3's reference layout (issue #27, deliverable 4; docs/e2v.md §9), checked against what its
reference-to-video pipeline does (skyreels_v3/pipelines/reference_to_video_pipeline.py at SkyworkAI/SkyReels-V3
28c771e): each reference VAE-encoded alone as ONE latent frame and normalised, appended after the noisy latents
along time, zero latent frames up to 4 slots, the same timestep on every frame, the references' prediction cut
off; the dual guidance u + s_img·(u_text − u) + s_text·(c − u_text), u with all-zero references. The data loader,
the training step and the sampler are driven on tiny models and compared with tensors built here."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from modules.config.train_config import SampleConfig, TrainConfig
from modules.dataLoader.e2v.sampling_options import V3_ELEMENT, E2VSamplingOptions
from modules.model.conditioning import TRAIN_TIMESTEPS, ConditionPayload
from modules.model.reference_slots import SKYREELS_V3_SLOTS, dual_guidance, pad_reference_slots
from modules.model.step_inputs import StepInputs, StepRandom
from modules.modelSampler import e2v_sampling
from modules.modelSampler.e2v_sampling import build_reference_slots, sample_latents
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.test_conditioning import FixedSigma, load
from tests.test_e2v_loader import SAMPLES, F, Reference, data_root, dataset_json, make_loader  # noqa: F401

T = (F - 1) // 4 + 1
SIZE = 32


class Calls:
    """Every transformer call of a model: (keyword inputs, output), through forward hooks."""

    def __init__(self, model):
        self.calls: list[tuple[dict, torch.Tensor]] = []
        for transformer in model.transformers():
            transformer.register_forward_hook(self._record, with_kwargs=True)

    def _record(self, module, args, kwargs, output):
        self.calls.append(({k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()},
                           output[0]))


def test_reference_slots_pad_with_zero_frames_and_guidance_is_skyreels_v3s():
    references = torch.randn(2, 16, 3, 4, 5)
    padded = pad_reference_slots(references)
    assert padded.shape == (2, 16, SKYREELS_V3_SLOTS, 4, 5)
    assert torch.equal(padded[:, :, :3], references) and padded[:, :, 3:].eq(0).all()
    with pytest.raises(ValueError, match="5 references do not fit the model's 4"):
        pad_reference_slots(torch.randn(1, 16, 5, 4, 5))
    c, u_text, u = torch.randn(3, 2, 16, 3, 4, 5).unbind(0)
    # SkyReels-V3's expression, as its pipeline writes it
    expected = u + 5.0 * (u_text - u) + 7.5 * (c - u_text)
    assert torch.allclose(dual_guidance(c, u_text, u, 7.5, 5.0), expected)
    assert torch.allclose(dual_guidance(c, u_text, u, 1.0, 1.0), c, atol=1e-6)


@pytest.fixture(scope="module")
def t2v(tiny_model):
    return load("t2v", tiny_model)


def test_loader_appends_each_reference_encoded_alone_after_the_whole_video(t2v, data_root, tmp_path):  # noqa: F811
    """The loader's step inputs against tensors built here from the PNGs and the mp4 with the model's own VAE: x0 is
    the whole clip's latents; each present element's frame is encoded on its own, normalised, in layout order, and
    zero frames fill the 4 slots."""
    loader = make_loader(t2v, tmp_path, dataset_json(data_root, "off"), tmp_path / "cache",
                         reference_layout="skyreels_v3")
    assert loader.e2v_type == "vae" and not loader.uses_clip
    reference = Reference(t2v, data_root)
    for sample_id, present in SAMPLES.items():
        tensors, _ = loader.preview(sample_id)
        assert torch.allclose(tensors["target_latents"], reference.video_latents(sample_id, F), atol=1e-5)
        frames = [reference.encode(reference.element_frame(sample_id, name)[:, None])
                  for name, _ in reference.layout(sample_id, "off")]
        assert len(frames) == len(present)
        h, w = frames[0].shape[2:]
        expected = torch.cat(frames + [torch.zeros(16, SKYREELS_V3_SLOTS - len(frames), h, w)], dim=1)
        assert torch.allclose(tensors["condition_latents"], expected, atol=1e-5)
        assert "mask" not in tensors and "clip_embeds" not in tensors
    # a batch: the payload carries only the appended slots (no condition channels, no CLIP, every frame in the loss)
    index = next(i for i, item in enumerate(loader.items) if item.source["sample_id"] == "002")
    inputs = loader.assemble(loader.load_batch([index], 0), StepRandom.for_micro_step(0, 0, 1))
    payload = inputs.payload
    assert payload.condition is None and payload.clip_embeds is None and payload.loss_frame_weights is None
    assert inputs.x0.shape[2] == T and payload.appended.shape[2] == SKYREELS_V3_SLOTS
    assert payload.appended[:, :, 2:].eq(0).all() and payload.appended[:, :, :2].ne(0).any()


def test_training_step_feeds_references_after_the_latents_and_leaves_them_out_of_the_loss(t2v):
    family = t2v.conditioning
    h = w = SIZE // 8
    x0, noise = torch.randn(1, 16, T, h, w), torch.randn(1, 16, T, h, w)
    payload = ConditionPayload(appended=pad_reference_slots(torch.randn(1, 16, 2, h, w)))
    setup = BaseWanSetup(t2v, TrainConfig())
    captured = {}

    def hook(module, args, kwargs, output):
        out = output[0]
        out.retain_grad() if out.requires_grad else out.requires_grad_()
        captured.update(kwargs, output=out)

    handle = t2v.transformer.register_forward_hook(hook, with_kwargs=True)
    try:
        prompt_embeds = torch.randn(1, 512, t2v.text_encoder.config.d_model)
        result = setup.predict_at(StepInputs(x0=x0, prompt_embeds=prompt_embeds, payload=payload),
                                  torch.tensor([0.4]), noise, 0)
    finally:
        handle.remove()
    hidden = captured["hidden_states"]
    assert hidden.shape == (1, 16, T + SKYREELS_V3_SLOTS, h, w)
    assert torch.allclose(hidden[:, :, :T], 0.6 * x0 + 0.4 * noise, atol=1e-6)  # x_t, then the slots
    assert torch.equal(hidden[:, :, T:], payload.appended)
    assert torch.allclose(captured["timestep"], torch.tensor([0.4 * TRAIN_TIMESTEPS]))  # one t for every frame
    assert result.predicted.shape == x0.shape
    output = captured["output"]
    assert torch.allclose(result.loss, ((output[:, :, :T] - (noise - x0)) ** 2).mean())
    result.loss.backward()
    assert output.grad[:, :, T:].eq(0).all() and output.grad[:, :, :T].ne(0).any()
    assert family.loss_weights(T, payload, torch.device("cpu")).eq(1).all()


@pytest.mark.parametrize("variant", ["t2v", "a14b_t2v", "ti2v", "skyreels_v2"])
def test_sampler_dual_guidance_and_training_step_feed_the_transformer_alike(variant, tiny_model, monkeypatch):
    """Two references through `build_reference_slots` and `sample_latents` with text scale 3 and image scale 2: per
    step three calls (prompt + references, negative + references, negative + zero slots) whose video outputs
    combine by SkyReels-V3's formula into what the scheduler steps with; the training step at each step's σ feeds
    the same layout and timestep and routes to the same expert."""
    model = load(variant, tiny_model)
    family = model.conditioning
    images = [np.full((24, 20, 3), 200, np.uint8), np.full((20, 24, 3), 40, np.uint8)]
    conditioning = build_reference_slots(model, images, [V3_ELEMENT] * 2, SIZE, SIZE)
    for index, image in enumerate(conditioning.references_preview):  # each encoded alone as one latent frame
        alone, _ = model.encode_video(torch.from_numpy(image).permute(2, 0, 1)[None, :, None].float() / 127.5 - 1)
        assert torch.allclose(conditioning.posterior_mean[:, :, index:index + 1], alone, atol=1e-6)
    stepped = []

    def recording_scheduler(*args):
        scheduler = sample_scheduler(*args)
        step = scheduler.step
        scheduler.step = lambda output, *rest, **kwargs: stepped.append(output.clone()) or step(output, *rest, **kwargs)
        return scheduler

    sample_scheduler = e2v_sampling.sample_scheduler
    monkeypatch.setattr(e2v_sampling, "sample_scheduler", recording_scheduler)
    calls = Calls(model)
    sample = SampleConfig.from_dict({"prompt": "a red circle", "negative_prompt": "blur", "elements": ["a", "b"],
                                     "frames": 9, "height": SIZE, "width": SIZE, "steps": 3, "cfg_scale": 3.0,
                                     "image_guidance_scale": 2.0, "seed": 3, "shift": 2.0}, "sample")
    latents = sample_latents(model, conditioning, sample)
    sampled, t = list(calls.calls), latents.shape[2]
    assert t == 3 and len(sampled) == 9 and len(stepped) == 3
    references = model.normalize_latents(conditioning.posterior_mean)  # mode posterior (the sample's default)
    setup = BaseWanSetup(model, TrainConfig())
    experts = len(model.transformers())
    for step in range(3):
        (cond, c), (text_unc, u_text), (unc, u) = sampled[3 * step: 3 * step + 3]
        assert torch.equal(cond["hidden_states"][:, :, t:t + 2], references)
        assert cond["hidden_states"][:, :, t + 2:].eq(0).all()
        assert torch.equal(text_unc["hidden_states"], cond["hidden_states"])  # the text branch keeps the references
        assert unc["hidden_states"][:, :, t:].eq(0).all()  # the image branch: all-zero reference slots
        assert torch.equal(unc["hidden_states"][:, :, :t], cond["hidden_states"][:, :, :t])
        assert torch.equal(text_unc["encoder_hidden_states"], unc["encoder_hidden_states"])
        assert not torch.equal(cond["encoder_hidden_states"], unc["encoder_hidden_states"])
        expected = u[:, :, :t] + 2.0 * (u_text[:, :, :t] - u[:, :, :t]) + 3.0 * (c[:, :, :t] - u_text[:, :, :t])
        assert torch.allclose(stepped[step], expected.float(), atol=1e-5)
        # the training step at this σ, with the sampler's reference slots as its payload
        timestep = cond["timestep"].flatten()[-1]
        sigma = float(timestep) / TRAIN_TIMESTEPS
        assert cond["timestep"].eq(timestep).all()  # the appended frames' tokens too (TI2V: per token)
        payload = ConditionPayload(appended=cond["hidden_states"][:, :, t:])
        inputs = StepInputs(x0=torch.randn(latents.shape), prompt_embeds=cond["encoder_hidden_states"], payload=payload)
        setup.sigma_sampler = FixedSigma(sigma)
        calls.calls.clear()
        output = setup.predict(inputs, StepRandom.for_micro_step(0, 0, 1))
        (trained, _), = calls.calls
        assert output.expert == family.expert_for_sigma(sigma, experts)
        assert trained["hidden_states"].shape == cond["hidden_states"].shape
        assert torch.equal(trained["hidden_states"][:, :, t:], cond["hidden_states"][:, :, t:])
        assert torch.allclose(trained["timestep"].float(), cond["timestep"].float(), rtol=0, atol=1e-3)


def test_samplers_take_the_layout_from_the_lora_header():
    from modules.modelSampler.e2v_options import reference_layout_of

    v3 = {0: {"wantrainer.e2v_reference_layout": "skyreels_v3"}}
    assert reference_layout_of("auto", v3) == "skyreels_v3"
    assert reference_layout_of("auto", {0: {}}) == reference_layout_of("auto", None) == "a2"
    assert reference_layout_of("a2", v3) == "a2"  # named on the command line: that one
    assert reference_layout_of("auto", {0: {"wantrainer.e2v_reference_layout": "other"}}) == "a2"
    with pytest.raises(UserError, match="SkyReels-V3's layout takes 1 to 4"):
        E2VSamplingOptions(reference_layout="skyreels_v3").check_frames(9, 5)


def test_reference_dropout_trains_some_samples_on_all_zero_slots(t2v, data_root, tmp_path):  # noqa: F811
    """`e2v.reference_dropout_probability`: per sample and epoch (a fixed draw), the slots are all zero, the
    condition the image guidance's unconditional branch feeds; validation never drops them."""
    from modules.util.enum import ConceptType

    loader = make_loader(t2v, tmp_path, dataset_json(data_root, "off"), tmp_path / "cache",
                         reference_layout="skyreels_v3", reference_dropout_probability=0.5)
    dropped = []
    for epoch in range(4):
        for index in range(len(loader.items)):
            batch = loader.load_batch([index], epoch)
            slots = loader.assemble(batch, StepRandom.for_micro_step(0, 0, 1)).payload.appended
            assert slots.eq(0).all() == batch["references_dropped"][0]
            assert loader.load_batch([index], epoch)["references_dropped"] == batch["references_dropped"]  # fixed
            dropped.append(batch["references_dropped"][0])
    assert any(dropped) and not all(dropped)
    loader.concept_type = ConceptType.VALIDATION
    assert not any(loader.load_batch([i], 0)["references_dropped"][0] for i in range(len(loader.items)))
    with pytest.raises(ConfigError, match="reference_dropout_probability' applies to reference_layout 'skyreels_v3'"):
        TrainConfig.from_dict({"e2v": {"reference_dropout_probability": 0.1}})
