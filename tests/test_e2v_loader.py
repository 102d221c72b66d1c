"""WanE2VDataLoader against a reference implementation of docs/e2v.md §2–§6 written here.

The expected tensors are built from the element PNGs and the mp4 with PIL / cv2 and the tiny i2v model's
own VAE, CLIP image processor and encoder, without calling any production E2V function: one pixel clip
[e0, e1×r1, e2×r2, zeros…] encoded with ONE `vae.encode`, normalised with `vae.config.latents_mean/std`,
the folded 4-channel mask, per-element CLIP second-to-last hidden states concatenated in layout order,
and the `separate` / `joint` targets. The loader's `preview()` and `load_batch()` + `assemble()` must
match them for 1, 2 and 3 elements, repeats on and off, both target layouts and all three pathways.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from modules.config.train_config import TrainConfig
from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader
from modules.model.step_inputs import StepRandom
from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
from tests.test_e2v_layout import spec_crop, spec_pad

F, H, W = 17, 32, 32  # 17 frames at 16 fps (the i2v variant's rate), 32x32
T = (F - 1) // 4 + 1
CLIP_RES = 224  # e2v_dataset_json's processors.clip.resolution
SEED = 42
ATOL = 1e-5

# A2's elements as e2v_dataset_json writes them: (name, position, vae preprocess, clip preprocess)
ELEMENTS = [("subject", 0, "pad_white", "pad_white"), ("object", 1, "pad_white", "pad_white"),
            ("background", 2, "center_crop", "center_crop")]
REPEATS = {"on": {"subject": 1, "object": 4, "background": 4}, "off": {"subject": 1, "object": 1, "background": 1}}
# Which elements each sample keeps (the optional object / background files of the others are deleted).
SAMPLES = {"001": ("subject", "object", "background"), "002": ("subject", "background"), "003": ("subject",)}


# --- the data ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = write_e2v_dataset(tmp_path_factory.mktemp("e2v-data"), count=len(SAMPLES), frames=F, height=H, width=W)
    for sample_id, present in SAMPLES.items():
        for name, *_ in ELEMENTS:
            if name not in present:
                (root / f"{sample_id}_{name}.png").unlink()
    return root


def dataset_json(data_root: Path, repeats: str = "on", clip_preprocess: dict | None = None) -> dict:
    data = e2v_dataset_json(data_root, H, W, F)
    for element in data["datasets"][0]["elements"]:
        element["vae"]["repeat"] = REPEATS[repeats][element["name"]]
        if clip_preprocess and element["name"] in clip_preprocess:
            element["clip"]["preprocess"] = clip_preprocess[element["name"]]
    return data


@pytest.fixture(scope="module")
def model(tiny_model):
    from modules.modelLoader.WanModelLoader import WanModelLoader

    return WanModelLoader().load(str(tiny_model("i2v")), torch.device("cpu"))


def make_loader(model, folder: Path, dataset: dict, cache: Path, **e2v) -> WanE2VDataLoader:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"dataset-{hashlib.sha256(json.dumps(dataset, sort_keys=True).encode()).hexdigest()[:12]}.json"
    path.write_text(json.dumps(dataset))
    config = TrainConfig.from_dict({
        "base_model_name": str(model.model_dir), "dataset_config": str(path), "resolution": [H, W], "frames": F,
        "cache_dir": str(cache), "workspace_dir": str(folder / "workspace"), "seed": SEED, "e2v": e2v})
    loader = WanE2VDataLoader(config, model)
    loader.prepare()
    return loader


@pytest.fixture(scope="module")
def loader_for(model, data_root, tmp_path_factory):
    """loader_for(e2v_type, target_layout, repeats, **more_e2v) -> a prepared loader. All of them share one
    cache folder, so a cache key that missed a setting would hand one configuration another's tensors."""
    work = tmp_path_factory.mktemp("e2v-loaders")

    def make(e2v_type: str, target_layout: str, repeats: str = "on", **e2v) -> WanE2VDataLoader:
        return make_loader(model, work, dataset_json(data_root, repeats), work / "cache",
                           e2v_type=e2v_type, target_layout=target_layout, **e2v)

    return make


# --- the reference implementation (spec text + the model's own components only) ------------------------------


def load_png(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def spec_preprocess(image: np.ndarray, method: str, height: int, width: int) -> np.ndarray:
    if method == "pad_white":
        return spec_pad(image, height, width, 255)
    assert method == "center_crop"
    return spec_crop(image, height, width)


def to_unit(frames: np.ndarray) -> torch.Tensor:
    """uint8 (..., H, W, 3) -> float32 (3, ..., H, W) with x/127.5 − 1."""
    tensor = torch.from_numpy(np.array(frames, dtype=np.float32) / 127.5 - 1.0)
    return tensor.movedim(-1, 0).contiguous()


def read_mp4(path: Path) -> np.ndarray:
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    capture.release()
    return np.stack(frames)


class Reference:
    """Expected tensors per sample and setting; encodes are memoised (the model is deterministic)."""

    def __init__(self, model, data_root: Path):
        self.model, self.root, self.memo = model, data_root, {}
        z = model.vae.config.z_dim
        self.mean = torch.tensor(model.vae.config.latents_mean).view(z, 1, 1, 1)
        self.std = torch.tensor(model.vae.config.latents_std).view(z, 1, 1, 1)

    def _memo(self, key, compute):
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def normalise(self, raw: torch.Tensor) -> torch.Tensor:
        return (raw - self.mean) / self.std

    @torch.no_grad()
    def encode(self, clip: torch.Tensor) -> torch.Tensor:
        """ONE vae.encode of a (3, F', H, W) clip -> normalised posterior mean (16, T', h, w)."""
        return self.normalise(self.model.vae.encode(clip[None]).latent_dist.mean[0].float())

    def layout(self, sample_id: str, repeats: str) -> list[tuple[str, int]]:
        """§1: the present elements by ascending position, with their repeats."""
        return [(name, REPEATS[repeats][name]) for name, position, _, _ in sorted(ELEMENTS, key=lambda e: e[1])
                if name in SAMPLES[sample_id]]

    def element_frame(self, sample_id: str, name: str) -> torch.Tensor:
        method = next(vae for n, _, vae, _ in ELEMENTS if n == name)
        return to_unit(spec_preprocess(load_png(self.root / f"{sample_id}_{name}.png"), method, H, W))

    def reference_frames(self, sample_id: str, repeats: str) -> torch.Tensor:
        """(3, P, H, W): `repeat` copies of each present element's frame, in layout order (§3.1)."""
        frames = [self.element_frame(sample_id, name) for name, repeat in self.layout(sample_id, repeats)
                  for _ in range(repeat)]
        return torch.stack(frames, dim=1)

    def condition(self, sample_id: str, repeats: str) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        """(z_cond, mask, P, K): the pixel clip padded with zero frames to F, ONE encode (§3), the mask (§4)."""
        refs = self.reference_frames(sample_id, repeats)
        p = refs.shape[1]
        clip = torch.cat([refs, torch.zeros(3, F - p, H, W)], dim=1)
        z_cond = self._memo(("condition", sample_id, repeats), lambda: self.encode(clip))
        m = [1.0 if f < p else 0.0 for f in range(F)]
        m_prime = [m[0]] * 4 + m[1:]
        mask = torch.zeros(4, T, H // 8, W // 8)
        for k in range(T):
            for c in range(4):
                mask[c, k] = m_prime[4 * k + c]
        k = int((mask.amax(dim=(0, 2, 3)) > 0).sum())  # latent frames the references touch
        return z_cond, mask, p, k

    def video(self, sample_id: str) -> torch.Tensor:
        return to_unit(read_mp4(self.root / f"{sample_id}.mp4"))

    def video_latents(self, sample_id: str, count: int) -> torch.Tensor:
        """The first `count` video frames encoded on their own."""
        return self._memo(("video", sample_id, count), lambda: self.encode(self.video(sample_id)[:, :count]))

    def target(self, sample_id: str, repeats: str, layout: str, uses_vae: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(x0 with posterior modes, the video part of x0 the loader caches, K) per §6."""
        if not uses_vae:  # no references: the target is the clip's first F frames
            latents = self.video_latents(sample_id, F)
            return latents, latents, 0
        z_cond, _, p, k = self.condition(sample_id, repeats)
        if layout == "separate":
            video = self.video_latents(sample_id, F - 4 * k)
            return torch.cat([z_cond[:, :k], video], dim=1), video, k
        clip = torch.cat([self.reference_frames(sample_id, repeats), self.video(sample_id)[:, :F - p]], dim=1)
        joint = self._memo(("joint", sample_id, repeats), lambda: self.encode(clip))
        return joint, joint, k

    @torch.no_grad()
    def clip_element(self, sample_id: str, name: str, method: str) -> torch.Tensor:
        def compute():
            image = spec_preprocess(load_png(self.root / f"{sample_id}_{name}.png"), method, CLIP_RES, CLIP_RES)
            pixels = self.model.image_processor(images=[Image.fromarray(image)], return_tensors="pt").pixel_values
            return self.model.image_encoder(pixel_values=pixels, output_hidden_states=True).hidden_states[-2][0].float()

        return self._memo(("clip", sample_id, name, method), compute)

    def clip_embeds(self, sample_id: str, methods: dict | None = None) -> torch.Tensor:
        """§5: each present element on its own, concatenated along the tokens in layout order."""
        methods = {**{n: clip for n, _, _, clip in ELEMENTS}, **(methods or {})}
        return torch.cat([self.clip_element(sample_id, name, methods[name])
                          for name, _ in self.layout(sample_id, "on")])


@pytest.fixture(scope="module")
def ref(model, data_root) -> Reference:
    return Reference(model, data_root)


def index_of(loader: WanE2VDataLoader, sample_id: str) -> int:
    return next(i for i, item in enumerate(loader.items) if item.source["sample_id"] == sample_id)


def assemble(loader: WanE2VDataLoader, sample_id: str, step: int = 0):
    batch = loader.load_batch([index_of(loader, sample_id)], 0)
    return batch, loader.assemble(batch, StepRandom.for_micro_step(SEED, step, 1))


def close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    return actual.shape == expected.shape and torch.allclose(actual.float().cpu(), expected, atol=ATOL, rtol=0)


# --- the loader against the reference ------------------------------------------------------------------


CASES = [  # (e2v_type, target_layout, repeats, loss_on_reference_frames)
    ("dual", "separate", "on", True),
    ("dual", "separate", "off", False),
    ("dual", "joint", "on", False),
    ("vae", "separate", "off", False),
    ("vae", "joint", "on", True),
    ("clip", "separate", "on", False),
]


@pytest.mark.parametrize("e2v_type, layout, repeats, loss_on_refs", CASES)
def test_loader_matches_the_reference(loader_for, ref, e2v_type, layout, repeats, loss_on_refs):
    loader = loader_for(e2v_type, layout, repeats, loss_on_reference_frames=loss_on_refs)
    uses_vae, uses_clip = e2v_type in ("dual", "vae"), e2v_type in ("dual", "clip")
    assert sorted(item.source["sample_id"] for item in loader.items) == sorted(SAMPLES)
    for sample_id, present in SAMPLES.items():
        x0, video_part, k = ref.target(sample_id, repeats, layout, uses_vae)
        where = f"sample {sample_id} ({len(present)} elements)"

        tensors, references = loader.preview(sample_id)
        assert set(tensors) == {"target_latents"} | ({"mask", "condition_latents"} if uses_vae else set()) | \
            ({"clip_embeds"} if uses_clip else set()), where
        assert tensors["target_latents"].shape == (16, T, H // 8, W // 8), where
        assert close(tensors["target_latents"], x0), where

        batch, inputs = assemble(loader, sample_id)
        assert inputs.x0.shape == (1, 16, T, H // 8, W // 8), where
        assert close(ref.normalise(batch["video_mean"][0]), video_part), where  # the cached target posterior
        assert inputs.payload.condition is not None and inputs.payload.condition.shape == (1, 4 + 16, T, H // 8, W // 8), where
        if uses_vae:
            z_cond, mask, p, k_ref = ref.condition(sample_id, repeats)
            assert k == k_ref and batch["reference_latents"] == k, where
            assert references.shape == (3, p, H, W) and close(references, ref.reference_frames(sample_id, repeats)), where
            assert close(tensors["mask"], mask) and close(tensors["condition_latents"], z_cond), where
            assert close(inputs.payload.condition[0, :4], mask) and close(inputs.payload.condition[0, 4:], z_cond), where
            if layout == "separate":  # x0 = [z_cond 0..K−1 (mode), a posterior sample of the video latents]
                assert close(inputs.x0[0, :, :k], z_cond[:, :k]), where
        else:  # CLIP pathway only: nothing in the VAE channels, no reference latents in x0
            assert k == 0 and batch["reference_latents"] == 0 and references.shape[1] == 0, where
            assert inputs.payload.condition.eq(0).all(), where
        if uses_clip:
            expected = ref.clip_embeds(sample_id)
            assert tensors["clip_embeds"].shape[0] == 257 * len(present), where
            assert close(tensors["clip_embeds"], expected) and close(inputs.payload.clip_embeds[0], expected), where
        else:
            assert inputs.payload.clip_embeds is None and "clip_embeds" not in batch, where
        weights = [0.0] * k + [1.0] * (T - k) if not loss_on_refs else [1.0] * T
        assert inputs.payload.loss_frame_weights.tolist() == weights, where


def test_spec_worked_example_mask_and_clip_tokens(loader_for):
    """3 elements, repeats 1/4/4: P = 9, latent frames 0..K−1 = 0..2 all ones, the rest zeros; 257·N CLIP tokens."""
    loader = loader_for("dual", "separate", "on", loss_on_reference_frames=True)
    tensors, references = loader.preview("001")
    mask = tensors["mask"]
    assert references.shape[1] == 9 and mask.shape == (4, T, H // 8, W // 8)
    assert mask[:, :3].eq(1).all() and mask[:, 3:].eq(0).all()
    assert tensors["clip_embeds"].shape == (3 * 257, loader.model.image_encoder.config.hidden_size)
    one = loader.preview("003")[0]  # one element: the plain Wan I2V mask
    assert one["mask"][:, 0].eq(1).all() and one["mask"][:, 1:].eq(0).all() and one["clip_embeds"].shape[0] == 257


# --- the VAE posterior ----------------------------------------------------------------------------------


def test_posterior_sample_differs_per_step_and_averages_to_the_mode(loader_for, ref):
    sample_id, draws = "001", 64
    loader = loader_for("dual", "separate", "on", vae_posterior="sample")
    z_cond, _, _, k = ref.condition(sample_id, "on")
    _, video_part, _ = ref.target(sample_id, "on", "separate", True)
    batch = loader.load_batch([index_of(loader, sample_id)], 0)
    condition_std = batch["condition_std"][0] / ref.std  # the posterior std in normalised units
    video_std = batch["video_std"][0] / ref.std
    conditions, videos = [], []
    for step in range(draws):
        inputs = loader.assemble(batch, StepRandom.for_micro_step(SEED, step, 1))
        condition = inputs.payload.condition[0, 4:]
        assert torch.equal(inputs.x0[0, :, :k], condition[:, :k])  # x0's reference slots use the same draw
        conditions.append(condition)
        videos.append(inputs.x0[0, :, k:])
    assert not torch.allclose(conditions[0], conditions[1])
    again = loader.assemble(batch, StepRandom.for_micro_step(SEED, 1, 1)).payload.condition[0, 4:]
    assert torch.equal(again, conditions[1])  # a draw is a function of the step's seed
    for stack, mode, std in ((conditions, z_cond, condition_std), (videos, video_part, video_std)):
        average = torch.stack(stack).mean(0)
        assert ((average - mode).abs() <= 6 * std / math.sqrt(draws) + ATOL).all()
        assert (average - mode).abs().mean() < (stack[0] - mode).abs().mean()


def test_posterior_mode_is_the_mean(loader_for, ref):
    loader = loader_for("dual", "joint", "on", vae_posterior="mode")
    z_cond, _, _, _ = ref.condition("002", "on")
    for step in (0, 5):
        _, inputs = assemble(loader, "002", step)
        assert close(inputs.payload.condition[0, 4:], z_cond)


# --- caching ---------------------------------------------------------------------------------------------


def count_encoder_calls(model, monkeypatch) -> dict[str, int]:
    calls = {"vae": 0, "text": 0, "clip": 0}
    for name, module, attribute in (("vae", model.vae, "encode"), ("text", model.text_encoder, "forward"),
                                    ("clip", model.image_encoder, "forward")):
        original = getattr(module, attribute)

        def counting(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, attribute, counting)
    return calls


def test_cache_is_reused_and_one_element_clip_change_reencodes_only_that(model, data_root, ref, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = make_loader(model, tmp_path, dataset_json(data_root), cache, e2v_type="dual")
    calls = count_encoder_calls(model, monkeypatch)

    second = make_loader(model, tmp_path, dataset_json(data_root), cache, e2v_type="dual")
    for epoch in (0, 1):
        for indices in second.epoch_batches(epoch):
            second.load_batch(indices, epoch)
    before = {sample_id: second.preview(sample_id)[0] for sample_id in SAMPLES}
    assert calls == {"vae": 0, "text": 0, "clip": 0}
    assert second.fingerprint() == first.fingerprint()

    third = make_loader(model, tmp_path, dataset_json(data_root, clip_preprocess={"subject": "center_crop"}), cache,
                        e2v_type="dual")
    assert calls == {"vae": 0, "text": 0, "clip": len(SAMPLES)}  # one CLIP call per sample: its subject
    afters = {sample_id: third.preview(sample_id)[0] for sample_id in SAMPLES}
    assert calls == {"vae": 0, "text": 0, "clip": len(SAMPLES)}
    for sample_id, after in afters.items():  # (the reference below runs the image encoder itself)
        assert close(after["clip_embeds"], ref.clip_embeds(sample_id, {"subject": "center_crop"})), sample_id
        assert not torch.allclose(after["clip_embeds"][:257], before[sample_id]["clip_embeds"][:257])
        assert torch.equal(after["clip_embeds"][257:], before[sample_id]["clip_embeds"][257:])
        for key in ("mask", "condition_latents", "target_latents"):
            assert torch.equal(after[key], before[sample_id][key])
