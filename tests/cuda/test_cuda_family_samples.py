"""A sample of every family's conditioning path on CUDA, with each ComfyUI sampler, against the same sample on the
CPU. The first GPU run (H200, 2026-11-28) found the default sampler crashing on CUDA (its sigma table stayed on the
CPU) where every CPU test passed: a path that mixes devices shows only on a second device. These walk each family's
own inputs (first frame, first and last frame, CLIP image, E2V elements, VACE control video and references, two
experts) through `WanModelSampler.generate`, as sample.py and trainer samples do; float32 on both devices (TF32 off),
so the videos agree to within a level of 255 on average."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.cuda.device import DEVICE, MARKS

pytestmark = MARKS

SIZE, FRAMES = 32, 17  # 17 frames leave 5 video frames beside E2V's three element slots (K = 3)
FAMILIES = {  # tiny variant -> the inputs its samples take (file names under the `media` fixture)
    "t2v": {},
    "ti2v": {"image": "first.png"},
    "i2v": {"image": "first.png"},
    "flf2v": {"image": "first.png", "last_image": "last.png"},
    "a14b": {},
    "a14b_i2v": {"image": "first.png"},
    "e2v_on_i2v": {"elements": ["subject.png", "object.png", "background.png"]},
    "vace": {"control_video": "control.mp4", "elements": ["subject.png"]},
}
# every family on the default sampler; the other two where their run differs (one expert, and the two-expert split)
CASES = [(family, "uni_pc") for family in FAMILIES]
CASES += [(family, sampler) for family in ("t2v", "a14b_i2v") for sampler in ("euler", "dpmpp_2m")]


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """Blocky random PNGs and a control clip, made with numpy (no network, no weights)."""
    from PIL import Image

    from modules.util.video_write import write_video

    folder = tmp_path_factory.mktemp("family-media")
    rng = np.random.default_rng(0)
    for name in ("first", "last", "subject", "object", "background"):
        blocks = rng.integers(0, 256, (SIZE // 8, SIZE // 8, 3), dtype=np.uint8)
        Image.fromarray(np.repeat(np.repeat(blocks, 8, 0), 8, 1)).save(folder / f"{name}.png")
    clip = np.repeat(np.linspace(20, 230, FRAMES, dtype=np.uint8)[:, None, None, None], SIZE, 1)
    write_video(folder / "control.mp4", np.repeat(np.repeat(clip, SIZE, 2), 3, 3), 16.0)
    return folder


def generate(folder, device: str, inputs: dict, sampler: str) -> np.ndarray:
    from modules.config.sample_config import SampleConfig
    from modules.modelLoader.WanModelLoader import WanModelLoader
    from modules.modelSampler.WanModelSampler import WanModelSampler
    from modules.util.enum import DataType

    model = WanModelLoader().load(str(folder), torch.device(device), transformer_dtype=DataType.FLOAT32,
                                  text_encoder_dtype=DataType.FLOAT32, train_dtype=DataType.FLOAT32)
    sample = SampleConfig.from_dict({"prompt": "a red circle moves right", "frames": FRAMES, "height": SIZE,
                                     "width": SIZE, "steps": 4, "cfg_scale": 3.0, "seed": 5, "sampler": sampler,
                                     **inputs}, "sample")
    video = WanModelSampler(model).generate(sample, show_progress=False)
    del model
    return np.asarray(video, dtype=np.float32)


@pytest.mark.parametrize(("family", "sampler"), CASES)
def test_each_family_samples_on_cuda_as_on_the_cpu(tiny_model, media, family, sampler):
    folder = tiny_model("i2v" if family == "e2v_on_i2v" else family)  # E2V samples on the I2V base
    inputs = {key: [str(media / v) for v in value] if isinstance(value, list) else str(media / value)
              for key, value in FAMILIES[family].items()}
    on_device = generate(folder, DEVICE, inputs, sampler)
    assert np.isfinite(on_device).all() and on_device.std() > 1  # a picture, not NaN or a constant
    on_cpu = generate(folder, "cpu", inputs, sampler)
    assert on_device.shape == on_cpu.shape
    assert float(np.abs(on_device - on_cpu).mean()) <= 1.0, f"{family} / {sampler}: CUDA and CPU samples differ"
