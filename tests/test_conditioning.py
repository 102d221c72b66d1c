"""One conditioning object per variant family (issue #12, deliverable 3): the training step and the sampler
loop feed the transformer through the same `VariantConditioning`. For every variant the sampler is run and every
transformer call recorded; the training step is then driven at each of those noise levels, and both must have
routed to the same expert and fed the same timestep tensor and hidden-state layout. E2V on a T2V base runs on the
model the trainer builds for it (expanded to the I2V layout by `prepare_e2v_model`)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from modules.config.train_config import SampleConfig, TrainConfig
from modules.dataLoader.e2v.sampling_options import a2_layout
from modules.model.conditioning import TRAIN_TIMESTEPS, ConditionPayload, conditioning_for
from modules.model.step_inputs import StepInputs, StepRandom
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.e2v_sampling import build_conditioning, sample_latents
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.modelSetup.e2v_expansion import prepare_e2v_model
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)

FRAMES, SIZE = 9, 32
# E2V runs on i2v, ti2v and a14b_i2v as they are; "e2v_" + a T2V base is that base expanded for E2V
VARIANTS = ["t2v", "i2v", "ti2v", "a14b_t2v", "a14b_i2v", "e2v_t2v", "e2v_a14b_t2v", "skyreels_v2", "skyreels_v2_i2v"]


def load(variant: str, tiny_model):
    """The model of `variant`; an `e2v_` T2V base gets the I2V input layout as the trainer gives it (the 2.1 base
    with CLIP from the tiny I2V folder, the A14B base, which has no image encoder, VAE only)."""
    base = variant.removeprefix("e2v_")
    model = WanModelLoader().load(str(tiny_model(base)), torch.device("cpu"))
    if variant != base:
        if base == "t2v":
            model.image_encoder, model.image_processor = WanModelLoader.load_image_encoder(
                str(tiny_model("i2v")), torch.device("cpu"))
        assert prepare_e2v_model(model, TrainConfig())  # expanded: new input channels train
    return model


class Recorder:
    """Records every transformer call: (expert index, keyword arguments), through forward pre-hooks."""

    def __init__(self, model):
        self.calls: list[tuple[int, dict]] = []
        for index, transformer in enumerate(model.transformers()):
            transformer.register_forward_pre_hook(self._hook(index), with_kwargs=True)

    def _hook(self, index: int):
        def record(module, args, kwargs):
            names = ("hidden_states", "timestep", "encoder_hidden_states")
            fed = {**dict(zip(names, args)), **kwargs}
            self.calls.append((index, {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                                       for k, v in fed.items()}))
        return record


class FixedSigma:
    """A σ sampler that draws one value, so the training step runs at the noise level of a sampler step."""

    def __init__(self, sigma: float):
        self.sigma = sigma

    def sample(self, n: int, generator, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        assert low <= self.sigma <= high, "the step's expert range must hold the σ it was routed by"
        return torch.full((n,), self.sigma)


def sampled_calls(model):
    """Runs the E2V sampler loop (every family; T2V bases without references) recording the transformer calls."""
    references = [np.full((24, 24, 3), 200, np.uint8)]
    uses_vae = model.conditioning.channel_concat or model.conditioning.per_token_timesteps
    uses_clip = model.image_encoder is not None and model.variant.has_clip_branch
    e2v = build_conditioning(model, references, a2_layout(1), FRAMES, SIZE, SIZE, uses_vae, uses_clip, (32, 32))
    recorder = Recorder(model)
    # Shift 2 puts steps on both sides of the two-expert boundary (0.875 / 0.9) and none on it (timesteps 999,
    # 857, 667, 400): exactly at it, training's float32 σ and the sampler's integer timestep differ by rounding.
    sample = SampleConfig.from_dict({"prompt": "a red circle", "frames": FRAMES, "height": SIZE, "width": SIZE,
                                     "steps": 4, "cfg_scale": 1.0, "seed": 3, "shift": 2.0}, "sample")
    latents = sample_latents(model, e2v, sample)
    return recorder, e2v, latents


@pytest.mark.parametrize("variant", VARIANTS)
def test_training_and_sampling_route_and_feed_the_transformer_alike(variant, tiny_model):
    model = load(variant, tiny_model)
    family = model.conditioning
    assert family == conditioning_for(model.variant)
    recorder, e2v, latents = sampled_calls(model)
    calls = list(recorder.calls)
    experts = len(model.transformers())
    assert len(calls) == 4
    if experts == 2:  # the shift put steps on both sides of the boundary
        assert {expert for expert, _ in calls} == {0, 1}

    setup = BaseWanSetup(model, TrainConfig())
    c = family.latent_channels
    clean = e2v.reference_latents if family.per_token_timesteps else 0
    for expert, fed in calls:
        timestep = fed["timestep"].flatten()[-1]  # the noisy tokens' timestep
        sigma = float(timestep) / TRAIN_TIMESTEPS
        # the sampler's call, by the shared routing and timestep rule
        assert expert == family.expert_for_timestep(timestep, experts) == family.expert_for_sigma(sigma, experts)
        assert torch.equal(fed["timestep"], family.timesteps(timestep.expand(1), latents.shape, clean))
        # the training step at the same σ, with the sampler's condition channels as its payload
        payload = ConditionPayload(condition=fed["hidden_states"][:, c:] if family.channel_concat else None,
                                   clip_embeds=fed.get("encoder_hidden_states_image"), clean_frames=clean)
        inputs = StepInputs(x0=torch.randn(latents.shape), prompt_embeds=fed["encoder_hidden_states"], payload=payload)
        setup.sigma_sampler = FixedSigma(sigma)
        recorder.calls.clear()
        output = setup.predict(inputs, StepRandom.for_micro_step(0, 0, 1))
        (trained_expert, trained), = recorder.calls
        assert trained_expert == output.expert == expert
        assert torch.allclose(trained["timestep"].float(), fed["timestep"].float(), rtol=0, atol=1e-3)  # σ·1000 vs t
        assert trained["hidden_states"].shape == fed["hidden_states"].shape
        if family.channel_concat:  # the references' mask and latents, not the zero condition
            assert fed["hidden_states"][:, c:c + 4].eq(1).any()
            assert torch.equal(trained["hidden_states"][:, c:], fed["hidden_states"][:, c:])
        if clean:  # the clean reference frames enter as they are and leave the loss
            assert torch.equal(trained["hidden_states"][:, :, :clean], inputs.x0[:, :, :clean])
            assert family.loss_weights(latents.shape[2], payload, torch.device("cpu"))[:clean].eq(0).all()
        assert (fed.get("encoder_hidden_states_image") is not None) == family.image_context
        assert (trained.get("encoder_hidden_states_image") is None) == (fed.get("encoder_hidden_states_image") is None)
        assert trained.get("fps") == fed.get("fps") == ([1] if variant == "skyreels_v2" else None)  # 24 fps: index 1


@pytest.mark.parametrize("variant, expected", [
    ("t2v", dict(channel_concat=False, per_token_timesteps=False, image_context=False, boundary_sigma=None)),
    ("i2v", dict(channel_concat=True, per_token_timesteps=False, image_context=True, boundary_sigma=None)),
    ("ti2v", dict(channel_concat=False, per_token_timesteps=True, image_context=False, boundary_sigma=None)),
    ("a14b_t2v", dict(channel_concat=False, per_token_timesteps=False, image_context=False, boundary_sigma=0.875)),
    ("a14b_i2v", dict(channel_concat=True, per_token_timesteps=False, image_context=False, boundary_sigma=0.9)),
    ("e2v_t2v", dict(channel_concat=True, per_token_timesteps=False, image_context=True, boundary_sigma=None)),
    ("e2v_a14b_t2v", dict(channel_concat=True, per_token_timesteps=False, image_context=False, boundary_sigma=0.875)),
])
def test_each_family_is_an_instance_read_from_the_checkpoint(variant, expected, tiny_model):
    model = load(variant, tiny_model)
    family = model.conditioning
    assert {key: getattr(family, key) for key in expected} == expected
    if family.boundary_sigma is not None:
        b = family.boundary_sigma
        assert family.expert_for_sigma(b) == 0 and family.expert_for_sigma(b - 1e-6) == 1
        assert family.sigma_range(0) == (b, 1.0) and family.sigma_range(1) == (0.0, b)
        assert family.expert_for_sigma(0.1, experts=1) == 0  # one expert trained or loaded: no routing


@pytest.mark.parametrize("variant", ["vace", "a14b_vace"])
def test_vace_training_and_sampling_feed_the_control_branch_alike(variant, tiny_model, tmp_path):
    """VACE: the sampler (a control video and one reference image) and the training step at the same σ route to
    the same expert and feed the same VACE context at the same scale; the reference's leading latent frame is in
    the latents and out of the loss."""
    from PIL import Image

    from modules.modelSampler.e2v_sampling import E2VConditioning
    from modules.modelSampler.vace_sampling import build_vace_context
    from modules.util.video_write import write_video

    model = load(variant, tiny_model)
    family = model.conditioning
    assert family.vace_layers == 2 and not family.channel_concat
    write_video(tmp_path / "control.mp4", np.full((FRAMES, SIZE, SIZE, 3), 90, np.uint8), 16.0)
    sample = SampleConfig.from_dict({"prompt": "a red circle", "frames": FRAMES, "height": SIZE, "width": SIZE,
                                     "steps": 4, "cfg_scale": 1.0, "seed": 3, "shift": 2.0, "vace_scale": 0.7,
                                     "control_video": str(tmp_path / "control.mp4")}, "sample")
    context = build_vace_context(model, sample, [np.full((24, 24, 3), 200, np.uint8)])
    conditioning = E2VConditioning(None, None, None, None, 0, 0, np.zeros((0, 1, 1, 3), np.uint8),
                                   control=context, control_references=1)
    recorder = Recorder(model)
    latents = sample_latents(model, conditioning, sample)
    calls, experts = list(recorder.calls), len(model.transformers())
    assert len(calls) == 4 and latents.shape[2] == (FRAMES - 1) // 4 + 1  # the reference frame is dropped
    if experts == 2:
        assert {expert for expert, _ in calls} == {0, 1}
    setup = BaseWanSetup(model, TrainConfig())
    for expert, fed in calls:
        assert fed["hidden_states"].shape[2] == latents.shape[2] + 1 == fed["control_hidden_states"].shape[2]
        assert torch.equal(fed["control_hidden_states"], context)
        assert torch.allclose(fed["control_hidden_states_scale"], torch.full((2,), 0.7))
        sigma = float(fed["timestep"].flatten()[-1]) / TRAIN_TIMESTEPS
        payload = ConditionPayload(control=context, control_scale=0.7, dropped_frames=1)
        inputs = StepInputs(x0=torch.randn(fed["hidden_states"].shape), prompt_embeds=fed["encoder_hidden_states"],
                            payload=payload)
        setup.sigma_sampler = FixedSigma(sigma)
        recorder.calls.clear()
        output = setup.predict(inputs, StepRandom.for_micro_step(0, 0, 1))
        (trained_expert, trained), = recorder.calls
        assert trained_expert == output.expert == expert
        assert torch.allclose(trained["timestep"].float(), fed["timestep"].float(), rtol=0, atol=1e-3)
        assert torch.equal(trained["control_hidden_states"], fed["control_hidden_states"])
        assert torch.equal(trained["control_hidden_states_scale"], fed["control_hidden_states_scale"])
        weights = family.loss_weights(inputs.x0.shape[2], payload, torch.device("cpu"))
        assert weights[0] == 0 and weights[1:].eq(1).all()


@pytest.mark.parametrize("variant", ["vace", "a14b_vace"])
def test_an_e2v_dataset_on_vace_feeds_the_context_the_sampler_builds(variant, tiny_model, tmp_path):
    """E2V on a VACE base: the training step's VACE context, built from a sample's element images (layout order) and
    its control video and mask, is the tensor the sampler builds from the same images and files; x0 carries the
    references' latents as its R leading frames, which stay out of the loss; the step at a sampler step's σ feeds the
    transformer what the sampler fed it."""
    import json

    from modules.dataLoader.video_io import read_image, read_video_frames
    from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader
    from modules.modelSampler.e2v_sampling import E2VConditioning
    from modules.modelSampler.vace_sampling import build_vace_context
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
    from modules.util.video_write import write_video
    from tests.conftest import train_config_dict

    frames = 17
    data = write_e2v_dataset(tmp_path / "data", count=1, frames=frames, height=SIZE, width=SIZE)
    clip, _ = read_video_frames(data / "001.mp4")
    write_video(data / "001_control.mp4", 255 - clip, 16.0)
    mask = np.zeros((SIZE, SIZE, 3), np.uint8)
    mask[8:24, 4:20] = 255
    write_video(data / "001_control_mask.mp4", np.repeat(mask[None], frames, 0), 16.0)
    (tmp_path / "dataset.json").write_text(json.dumps(e2v_dataset_json(data, SIZE, SIZE, frames)))
    config = TrainConfig.from_dict(train_config_dict(tiny_model(variant), data, tmp_path, concepts=[],
                                                     dataset_config=str(tmp_path / "dataset.json"),
                                                     vace_context_scale=0.7))
    model = load(variant, tiny_model)
    assert prepare_e2v_model(model, config) == {}  # nothing to expand: the elements are VACE's references
    loader = WanE2VDataLoader(config, model)
    loader.prepare()
    assert len(loader.items) == 1  # the control files are no samples
    batch = loader.load_batch([0], 0)
    inputs = loader.assemble(batch, StepRandom.for_micro_step(0, 0, 1))

    sample = SampleConfig.from_dict({"prompt": "a red circle", "frames": frames, "height": SIZE, "width": SIZE,
                                     "steps": 2, "cfg_scale": 1.0, "seed": 3, "shift": 2.0, "vace_scale": 0.7,
                                     "control_video": str(data / "001_control.mp4"),
                                     "control_mask": str(data / "001_control_mask.mp4")}, "sample")
    images = [read_image(data / f"001_{name}.png") for name in ("subject", "object", "background")]
    context = build_vace_context(model, sample, images)
    assert context.shape == (1, 96, 3 + 5, SIZE // 8, SIZE // 8)  # three references lead five video frames
    assert torch.equal(batch["vace_context"], context)
    payload = inputs.payload
    assert torch.equal(payload.control, context) and payload.dropped_frames == 3 and payload.control_scale == 0.7
    assert torch.equal(inputs.x0[:, :, :3], context[:, :16, :3])  # the references' latents lead x0
    assert inputs.x0.shape == (1, 16, 8, SIZE // 8, SIZE // 8)
    weights = model.conditioning.loss_weights(8, payload, torch.device("cpu"))
    assert weights[:3].eq(0).all() and weights[3:].eq(1).all()

    recorder = Recorder(model)
    conditioning = E2VConditioning(None, None, None, None, 0, 0, np.zeros((0, 1, 1, 3), np.uint8),
                                   control=context, control_references=3)
    assert sample_latents(model, conditioning, sample).shape[2] == 5  # the references' frames dropped
    calls = list(recorder.calls)
    setup = BaseWanSetup(model, config)
    for expert, fed in calls:
        setup.sigma_sampler = FixedSigma(float(fed["timestep"].flatten()[-1]) / TRAIN_TIMESTEPS)
        recorder.calls.clear()
        setup.predict(inputs, StepRandom.for_micro_step(0, 0, 1))
        (trained_expert, trained), = recorder.calls
        assert trained_expert == expert
        assert trained["hidden_states"].shape == fed["hidden_states"].shape
        assert torch.equal(trained["control_hidden_states"], fed["control_hidden_states"])
        assert torch.equal(trained["control_hidden_states_scale"], fed["control_hidden_states_scale"])
