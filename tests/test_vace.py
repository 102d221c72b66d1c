"""Wan VACE (issue #27): the VACE context equals diffusers' `WanVACEPipeline`'s, a LoRA run with control videos, a
mask and references trains, resumes exactly, saves files ComfyUI's VACE model and diffusers' pipeline load, and
samples through our sampler; its header keeps it off a plain base."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open

from modules.config.train_config import SampleConfig, TrainConfig
from modules.model.vace import reference_canvas, vace_context
from modules.modelFile.lora_formats import DIFFUSERS_LORA
from modules.modelFile.lora_reading import load_lora_file
from modules.modelLoader.lora_inference import attach_lora_for_inference
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.modelSaver.WanLoRASaver import save_lora
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.errors import UserError
from modules.util.video_write import write_video
from tests.conftest import train_config_dict, trains_and_resumes_exactly
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.script_runner import run_script


def test_the_vace_context_is_the_one_diffusers_pipeline_builds(tiny_model):
    from diffusers import WanVACEPipeline

    pipe = WanVACEPipeline.from_pretrained(tiny_model("vace"))
    rng = np.random.default_rng(0)
    frames, size = 9, 32
    video = [Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)) for _ in range(frames)]
    mask = [Image.fromarray(((rng.random((size, size)) > 0.5) * 255).astype(np.uint8)) for _ in range(frames)]
    refs = [Image.fromarray(rng.integers(0, 255, (24, 40, 3), dtype=np.uint8)),
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))]
    with torch.no_grad():
        v, m, r = pipe.preprocess_conditions(video, mask, refs, 1, size, size, frames, torch.float32, "cpu")
        expected = torch.cat([pipe.prepare_video_latents(v, m, r, None, "cpu"), pipe.prepare_masks(m, r)], dim=1)
        mean = torch.tensor(pipe.vae.config.latents_mean).view(1, -1, 1, 1, 1)
        std = torch.tensor(pipe.vae.config.latents_std).view(1, -1, 1, 1, 1)
        encode = lambda x: (pipe.vae.encode(x).latent_dist.mode() - mean) / std  # noqa: E731
        images = [torch.from_numpy(np.asarray(i)).permute(2, 0, 1).float() / 127.5 - 1 for i in refs]
        ours = vace_context(encode, v, m, [reference_canvas(i, size, size) for i in images], 8, 4)
    assert ours.shape == expected.shape == (1, 96, 2 + 3, 4, 4)  # two reference frames lead three video frames
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)


def vace_dataset(folder):
    """Two 17-frame clips, each with a control video (the clip's negative), the second with a mask too."""
    from modules.dataLoader.video_io import read_video_frames
    from modules.synthetic.synthetic_data import write_video_dataset

    data = write_video_dataset(folder, count=2, frames=17, height=32, width=32)
    for stem in ("000", "001"):
        frames, _ = read_video_frames(data / f"{stem}.mp4")
        write_video(data / f"{stem}_control.mp4", 255 - frames, 16.0)
    mask = np.zeros((17, 32, 32, 3), np.uint8)
    mask[:, 8:24, 8:24] = 255
    write_video(data / "001_control_mask.mp4", mask, 16.0)
    return data


def make_trainer(tiny_model, data, work, **overrides) -> GenericTrainer:
    values = train_config_dict(tiny_model("vace"), data, work, epochs=2, learning_rate=1e-2, output_dtype="FLOAT32",
                               vace_context_scale=0.8)
    return GenericTrainer(TrainConfig.from_dict({**values, **overrides}))


@pytest.mark.slow
def test_a_vace_lora_trains_resumes_saves_and_samples(tiny_model, tmp_path):
    from diffusers import WanVACEPipeline
    from peft.utils import get_peft_model_state_dict

    data = vace_dataset(tmp_path / "data")
    sample = {"prompt": "a red circle", "frames": 9, "height": 32, "width": 32, "steps": 2,
              "control_video": str(data / "000_control.mp4")}
    trainer = trains_and_resumes_exactly(lambda name, **o: make_trainer(
        tiny_model, data, tmp_path / name, **({"samples": [sample], "sample_at_end": True} if name == "full" else {}),
        **o))
    assert len(trainer.data.items) == 2  # the control files are no samples of their own
    # the default (vace_train_blocks VACE, as DiffSynth and VideoX-Fun train): LoRA on the VACE blocks only
    assert all(".vace_blocks." in key for key in trainer.setup.trainable_state())
    assert list((tmp_path / "full" / "workspace").rglob("*.mp4"))  # the run's sample, following its control video

    # COMFY_LORA (the default): ComfyUI's VaceWanModel names (comfy/ldm/wan/model.py: VaceWanAttentionBlock is a
    # WanAttentionBlock), which its LoRA loader maps as `diffusion_model.<weight name without .weight>`
    path = tmp_path / "full" / "output" / "lora.safetensors"
    with safe_open(str(path), framework="pt") as f:
        keys, header = set(f.keys()), f.metadata()
    modules = {key.rsplit(".", 2)[0] if key.endswith(".weight") else key.rsplit(".", 1)[0] for key in keys}
    inner = ["self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "cross_attn.q", "cross_attn.k",
             "cross_attn.v", "cross_attn.o", "ffn.0", "ffn.2"]
    assert modules == {f"diffusion_model.vace_blocks.{i}.{name}" for i in (0, 1) for name in inner}
    assert header["wantrainer.variant"] == "wan-2.1-vace"

    # DIFFUSERS_LORA: diffusers' WanVACEPipeline loads every key
    weights, _ = load_lora_file(path)
    diffusers_file = tmp_path / "diffusers.safetensors"
    save_lora(weights, diffusers_file, DIFFUSERS_LORA, header)
    pipe = WanVACEPipeline.from_pretrained(tiny_model("vace"))
    pipe.load_lora_weights(str(diffusers_file), adapter_name="vace")
    loaded = get_peft_model_state_dict(pipe.transformer, adapter_name="vace")
    with safe_open(str(diffusers_file), framework="pt") as f:
        file_keys = {key.removeprefix("transformer.") for key in f.keys()}
        assert set(loaded) == file_keys
        for key in file_keys:
            torch.testing.assert_close(loaded[key], f.get_tensor("transformer." + key))

    # our sampler with the LoRA, a control video, its mask and a reference image
    reference = tmp_path / "ref.png"
    Image.new("RGB", (24, 24), (200, 40, 40)).save(reference)
    sample = SampleConfig.from_dict({"prompt": "a red circle", "frames": 9, "height": 32, "width": 32, "steps": 2,
                                     "seed": 3, "control_video": str(data / "001_control.mp4"),
                                     "control_mask": str(data / "001_control_mask.mp4"),
                                     "elements": [str(reference)]}, "sample")
    base = WanModelLoader().load(str(tiny_model("vace")), torch.device("cpu"))
    before = WanModelSampler(base).generate(sample, show_progress=False)
    attach_lora_for_inference(base, path)
    after = WanModelSampler(base).generate(sample, show_progress=False)
    assert before.shape == after.shape == (9, 32, 32, 3) and not np.array_equal(before, after)

    # the same through scripts/sample.py's options
    result = run_script("sample.py", "--model", str(tiny_model("vace")), "--lora", str(path), "--prompt",
                        "a red circle", "--control-video", str(data / "001_control.mp4"), "--control-mask",
                        str(data / "001_control_mask.mp4"), "--elements", str(reference), "--frames", "9",
                        "--height", "32", "--width", "32", "--steps", "2", "--seed", "3",
                        "--output", str(tmp_path / "cli.mp4"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "cli.mp4").is_file()

    plain = WanModelLoader().load(str(tiny_model("t2v")), torch.device("cpu"))
    with pytest.raises(UserError, match="made for wan-2.1-vace, not for this t2v model"):
        attach_lora_for_inference(plain, path)


def test_vace_train_blocks_picks_the_lora_targets(tiny_model, tmp_path):
    from modules.config.train_config import DEFAULT_LORA_TARGETS
    from modules.modelSetup.lora_targets import select_lora_targets
    from modules.util.enum import VaceBlocks

    transformer = WanModelLoader().load(str(tiny_model("vace")), torch.device("cpu")).transformer
    picked = {scope: select_lora_targets(transformer, DEFAULT_LORA_TARGETS, [], "", scope) for scope in VaceBlocks}
    assert picked[VaceBlocks.VACE] and all(n.startswith("vace_blocks.") for n in picked[VaceBlocks.VACE])
    assert picked[VaceBlocks.BASE] and all(n.startswith("blocks.") for n in picked[VaceBlocks.BASE])
    assert sorted(picked[VaceBlocks.BOTH]) == sorted(picked[VaceBlocks.VACE] + picked[VaceBlocks.BASE])


def e2v_vace_config(tiny_model, work, **overrides) -> dict:
    """An E2V dataset (A2's three elements; the second sample has no object) on the tiny VACE base; the first sample
    has a control video beside it."""
    import json

    from modules.dataLoader.video_io import read_video_frames
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset

    data = write_e2v_dataset(work / "data", count=2, frames=9, height=32, width=32, with_object=False)
    frames, _ = read_video_frames(data / "001.mp4")
    write_video(data / "001_control.mp4", 255 - frames, 16.0)
    dataset = work / "dataset.json"
    dataset.write_text(json.dumps(e2v_dataset_json(data, 32, 32, 9)))
    return train_config_dict(tiny_model("vace"), data, work, dataset_config=str(dataset), concepts=[], epochs=2,
                             learning_rate=1e-2, output_dtype="FLOAT32", **overrides)


@pytest.mark.parametrize("change, key", [
    ({"e2v": {"e2v_type": "clip"}}, "e2v.e2v_type"),
    ({"e2v": {"target_layout": "joint"}}, "e2v.target_layout"),
    ({"e2v": {"vae_posterior": "sample"}}, "e2v.vae_posterior"),
    ({"elements": 5}, "datasets[0]"),
])
def test_e2v_settings_a_vace_base_cannot_follow_stop_before_the_model_loads(change, key, tiny_model, tmp_path):
    import json

    from modules.trainer.preflight import check_before_loading

    values = e2v_vace_config(tiny_model, tmp_path, **{k: v for k, v in change.items() if k != "elements"})
    if "elements" in change:
        dataset = json.loads(open(values["dataset_config"]).read())
        elements = dataset["datasets"][0]["elements"]
        elements += [{"name": f"extra{i}", "suffixes": [f"_extra{i}.png"], "required": False,
                      "vae": {"repeat": 1, "position": 3 + i}} for i in range(2)]
        for element in elements:  # A2's repeats would outgrow the 9 frames in the dataset file's own check
            element["vae"]["repeat"] = 1
        open(values["dataset_config"], "w").write(json.dumps(dataset))
    with pytest.raises(UserError, match=f"{key.replace('[', '.').replace(']', '.')}.*VACE base") as e:
        check_before_loading(TrainConfig.from_dict(values))
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_an_e2v_dataset_on_a_vace_base_trains_resumes_saves_and_samples(tiny_model, tmp_path):
    """The elements train as VACE's reference images: the run trains, resumes exactly, saves a VACE LoRA and
    samples (its samples during training and scripts/sample.py) with the elements as references."""
    sample = {"prompt": "a red circle", "frames": 9, "height": 32, "width": 32, "steps": 2,
              "elements": [str(tmp_path / "full" / "data" / f"001_{n}.png") for n in ("subject", "background")]}
    trainer = trains_and_resumes_exactly(lambda name, **o: GenericTrainer(TrainConfig.from_dict(e2v_vace_config(
        tiny_model, tmp_path / name, **({"samples": [sample], "sample_at_end": True} if name == "full" else {}),
        **o))))
    data = trainer.data
    assert data.vace and len(data.items) == 2  # the control video is no sample of its own
    assert sorted(item.bucket[2] for item in data.items) == [2, 3]  # R per sample: 001 has an object, 002 not
    assert all(".vace_blocks." in key for key in trainer.setup.trainable_state())
    assert list((tmp_path / "full" / "workspace").rglob("*.mp4"))  # the run's sample with its references
    path = tmp_path / "full" / "output" / "lora.safetensors"
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["wantrainer.variant"] == "wan-2.1-vace"

    references = [str(tmp_path / "full" / "data" / f"002_{n}.png") for n in ("subject", "background")]
    result = run_script("sample.py", "--model", str(tiny_model("vace")), "--lora", str(path), "--prompt",
                        "a red circle", "--elements", *references, "--frames", "9", "--height", "32", "--width",
                        "32", "--steps", "2", "--seed", "3", "--output", str(tmp_path / "cli.mp4"))
    assert result.returncode == 0, result.stderr[-2000:]
    from modules.dataLoader.video_io import read_video_frames

    assert read_video_frames(tmp_path / "cli.mp4")[0].shape == (9, 32, 32, 3)  # the reference frames are trimmed


def test_e2v_on_vace_caches_the_context_keyed_by_its_references_and_control(tiny_model, tmp_path):
    """The cached VACE context of an E2V item is reused while nothing changed and rebuilt when an element image or
    the control video changes; dataset_stats.py counts the items the loader trains (the references take no frames
    of the 9-frame clips, where A2's 1 + 4 + 4 reference frames would); preview_e2v.py shows what the step is fed."""
    from modules.dataLoader.e2v.statistics import e2v_dataset_statistics
    from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader

    config = TrainConfig.from_dict(e2v_vace_config(tiny_model, tmp_path))
    model = WanModelLoader().load(str(tiny_model("vace")), torch.device("cpu"))
    data = tmp_path / "data"

    def contexts():
        loader = WanE2VDataLoader(config, model)
        loader.prepare()
        return [loader.load_batch([i], 0)["vace_context"] for i in range(len(loader.items))]

    def cache_files():
        return sorted(p for p in (tmp_path / "cache").rglob("*") if p.is_file())

    first = contexts()
    files = cache_files()
    assert [c.shape[2] for c in first] == [3 + 3, 2 + 3]  # R leading frames per sample, then the clip's three
    assert all(torch.equal(a, b) for a, b in zip(contexts(), first)) and cache_files() == files  # from the cache
    Image.new("RGB", (24, 32), (10, 200, 30)).save(data / "002_subject.png")
    changed = contexts()
    assert torch.equal(changed[0], first[0]) and not torch.equal(changed[1], first[1])
    write_video(data / "002_control.mp4", np.full((9, 32, 32, 3), 30, np.uint8), 16.0)
    controlled = contexts()
    assert torch.equal(controlled[0], first[0]) and not torch.equal(controlled[1][:, :, 2:], changed[1][:, :, 2:])
    assert torch.equal(controlled[1][:, :, :2], changed[1][:, :, :2])  # the references' frames stay as they were

    stats = e2v_dataset_statistics(config, 16.0, use_cache=False)
    assert stats[0].samples == 2 and stats[0].items_per_length == {9: 2}

    loader = WanE2VDataLoader(config, model)  # preview_e2v.py: the context, and the references as VACE places them
    loader.prepare()
    tensors, references = loader.preview("001")
    assert set(tensors) == {"target_latents", "vace_context"} and references.shape == (3, 3, 32, 32)
    assert torch.equal(tensors["target_latents"][:, :3], tensors["vace_context"][:16, :3])
