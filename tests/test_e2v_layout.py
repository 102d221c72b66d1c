"""E2V conditioning math (docs/e2v.md §2–§6) against hand-computed values, a reference
implementation written here from the spec text, and diffusers' own I2V mask."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from modules.config.e2v_dataset_config import ElementConfig
from modules.dataLoader.e2v import preprocess
from modules.dataLoader.e2v.discovery import discover_e2v_samples
from modules.dataLoader.errors import DataError
from modules.model import condition_layout as layout


def element(name: str, position: int, repeat: int, required: bool = False, suffixes=None) -> ElementConfig:
    return ElementConfig.from_dict({"name": name, "suffixes": suffixes or [f"_{name}.png"], "required": required,
                                    "vae": {"repeat": repeat, "position": position}})


def ramp(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


# --- §2 preprocessing ------------------------------------------------------------------------------


def test_pad_white_wide_image_gets_white_rows_top_and_bottom():
    image = ramp(4, 8)
    out = preprocess.pad_white(image, 8, 8)  # p = int((8/8·8 − 4)/2) = 2; 8x8 -> 8x8 is no resize
    assert out.shape == (8, 8, 3) and out.dtype == np.uint8
    assert (out[:2] == 255).all() and (out[6:] == 255).all()
    np.testing.assert_array_equal(out[2:6], image)


def test_pad_white_tall_image_gets_white_columns_and_letterbox_black():
    image = ramp(8, 4)
    out = preprocess.pad_white(image, 8, 8)
    assert (out[:, :2] == 255).all() and (out[:, 6:] == 255).all()
    np.testing.assert_array_equal(out[:, 2:6], image)
    black = preprocess.letterbox(image, 8, 8)
    assert (black[:, :2] == 0).all() and (black[:, 6:] == 0).all()
    np.testing.assert_array_equal(black[:, 2:6], image)


def test_pad_amount_is_truncated_then_resized_bicubic():
    image = ramp(4, 8)
    # target 7x8: p = int((7/8·8 − 4)/2) = int(1.5) = 1 -> a 6x8 padded image, resized to 7x8
    padded = np.full((6, 8, 3), 255, np.uint8)
    padded[1:5] = image
    expected = np.asarray(Image.fromarray(padded).resize((8, 7), Image.Resampling.BICUBIC))
    np.testing.assert_array_equal(preprocess.pad_white(image, 7, 8), expected)


def test_center_crop_keeps_the_centred_strip():
    wide = ramp(4, 7)
    np.testing.assert_array_equal(preprocess.center_crop(wide, 4, 4), wide[:, 1:5])  # int(4/4·4) = 4, left = 1
    tall = ramp(9, 4)
    np.testing.assert_array_equal(preprocess.center_crop(tall, 4, 4), tall[2:6])  # top = (9 − 4)//2
    np.testing.assert_array_equal(preprocess.center_crop(ramp(6, 6), 6, 6), ramp(6, 6))


def spec_pad(image, height, width, value):
    """§2 from the text: pad the short side to the target aspect, p = int(... / 2) per side; bicubic."""
    h0, w0 = image.shape[:2]
    if h0 / w0 < height / width:
        p = int((height / width * w0 - h0) / 2)
        image = np.concatenate([np.full((p, w0, 3), value, np.uint8), image, np.full((p, w0, 3), value, np.uint8)], 0)
    else:
        p = int((width / height * h0 - w0) / 2)
        image = np.concatenate([np.full((h0, p, 3), value, np.uint8), image, np.full((h0, p, 3), value, np.uint8)], 1)
    return np.asarray(Image.fromarray(image).resize((width, height), Image.Resampling.BICUBIC))


def spec_crop(image, height, width):
    h0, w0 = image.shape[:2]
    if h0 / w0 < height / width:
        cw = int(h0 / height * width)
        image = image[:, (w0 - cw) // 2:(w0 - cw) // 2 + cw]
    else:
        ch = int(w0 / width * height)
        image = image[(h0 - ch) // 2:(h0 - ch) // 2 + ch]
    return np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((width, height), Image.Resampling.BICUBIC))


@pytest.mark.parametrize("h0, w0, height, width", [(37, 53, 16, 32), (53, 37, 16, 32), (20, 40, 16, 32),
                                                   (31, 17, 24, 24), (10, 90, 32, 16)])
def test_methods_match_the_spec_text(h0, w0, height, width):
    image = ramp(h0, w0, seed=h0 * w0)
    np.testing.assert_array_equal(preprocess.preprocess(image, "pad_white", height, width), spec_pad(image, height, width, 255))
    np.testing.assert_array_equal(preprocess.preprocess(image, "letterbox", height, width), spec_pad(image, height, width, 0))
    np.testing.assert_array_equal(preprocess.preprocess(image, "center_crop", height, width), spec_crop(image, height, width))
    resized = preprocess.preprocess(image, "resize", height, width)
    np.testing.assert_array_equal(resized, np.asarray(Image.fromarray(image).resize((width, height), Image.Resampling.BICUBIC)))
    assert resized.shape == (height, width, 3)


def test_preprocess_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown preprocess"):
        preprocess.preprocess(ramp(4, 4), "crop", 4, 4)
    with pytest.raises(ValueError, match="uint8"):
        preprocess.resize(np.zeros((4, 4, 3), np.float32), 4, 4)


def test_unit_range():
    image = np.array([[[0, 255, 51]]], np.uint8)
    np.testing.assert_allclose(preprocess.to_unit_range(image), [[[-1.0, 1.0, 51 / 127.5 - 1]]], atol=1e-7)
    assert preprocess.to_unit_range(image).dtype == np.float32
    tensor = preprocess.image_to_tensor(image)
    assert tensor.shape == (3, 1, 1) and tensor.dtype == torch.float32
    torch.testing.assert_close(tensor[:, 0, 0], torch.tensor([-1.0, 1.0, 51 / 127.5 - 1]))


# --- discovery -------------------------------------------------------------------------------------


def test_discovery_matches_suffixes_in_order_and_skips_missing_required(tmp_path):
    subject = element("subject", 0, 1, required=True, suffixes=["_dog.png", "_person.png", "_mask.png"])
    obj = element("object", 1, 4)
    for name in ["001.mp4", "001.txt", "001_mask.PNG", "001_object.png",
                 "002.mp4", "002.txt", "002_object.png",
                 "003.MOV", "003_person.png", "003_dog.png", "._004.mp4", "notes.md"]:
        (tmp_path / name).write_bytes(b"")
    samples, skips = discover_e2v_samples(tmp_path, [subject, obj])
    assert [s.id for s in samples] == ["001", "003"]
    first, third = samples
    assert first.video.name == "001.mp4" and first.caption_path.name == "001.txt"
    assert first.element_images["subject"].name == "001_mask.PNG" and first.element_images["object"].name == "001_object.png"
    assert third.caption_path is None and third.element_images == {"subject": tmp_path / "003_dog.png", "object": None}
    assert third.present() == {"subject": True, "object": False}
    assert len(skips) == 1 and skips[0][0].name == "002.mp4" and "'subject'" in skips[0][1]


def test_discovery_of_a_missing_folder(tmp_path):
    with pytest.raises(DataError):
        discover_e2v_samples(tmp_path / "nope", [element("a", 0, 1)])


# --- the reference implementation, from the spec text only --------------------------------------------


def spec_condition(images: dict, config: list[tuple[str, int, int]], present: set, f: int, h: int, w: int):
    """§3.1 + §4 literally: elements by ascending position (missing ones skipped); `repeat` copies
    each; zero frames up to F; m[f] = 1 for f < P; m′ = [m0, m0, m0, m0, m1, …]; mask[c, k] = m′[4k + c]."""
    frames = []
    for name, _position, repeat in sorted(config, key=lambda item: item[1]):
        if name in present:
            frames += [images[name]] * repeat
    p = len(frames)
    frames += [torch.zeros_like(next(iter(images.values())))] * (f - p)
    clip = torch.stack(frames, dim=1)
    m = [1.0 if i < p else 0.0 for i in range(f)]
    m_prime = [m[0]] * 4 + m[1:]
    t = (f - 1) // 4 + 1
    mask = torch.zeros(4, t, h, w)
    for k in range(t):
        for c in range(4):
            mask[c, k] = m_prime[4 * k + c]
    return clip, mask, p


def fake_encode(clip: torch.Tensor) -> torch.Tensor:
    """A stand-in causal 'VAE': latent 0 <- frame 0, latent k <- mean of frames 4k−3..4k (pixels 2x2-pooled)."""
    groups = [clip[:, :1]] + [clip[:, 4 * k - 3:4 * k + 1] for k in range(1, (clip.shape[1] - 1) // 4 + 1)]
    latents = torch.stack([g.mean(dim=1) for g in groups], dim=1)
    return torch.nn.functional.avg_pool2d(latents, 2)


def spec_targets(condition_latents, video, reference_frames, mask, f):
    """§6 literally. K = latent frames the references occupy (those with a one in the mask)."""
    k = int((mask.amax(dim=(0, 2, 3)) > 0).sum())
    separate = torch.cat([condition_latents[:, :k], fake_encode(video[:, :f - 4 * k])], dim=1)
    joint = fake_encode(torch.cat([reference_frames, video[:, :f - reference_frames.shape[1]]], dim=1))
    return k, separate, joint


CASES = [  # (elements (name, position, repeat), present)
    ([("s", 0, 1)], {"s"}),
    ([("s", 0, 1), ("o", 1, 4)], {"s", "o"}),
    ([("s", 0, 1), ("o", 1, 4), ("b", 2, 4)], {"s", "o", "b"}),
    ([("s", 0, 1), ("o", 1, 1), ("b", 2, 1)], {"s", "o", "b"}),
    ([("b", 2, 4), ("s", 0, 1), ("o", 1, 4)], {"s", "b"}),  # optional object missing, list out of order
    ([("s", 0, 4), ("o", 1, 4)], {"s", "o"}),  # P = 8: the last reference latent is partial
]


@pytest.mark.parametrize("config, present", CASES)
@pytest.mark.parametrize("f", [81, 17, 13, 9])
def test_production_layout_equals_the_spec_reference(config, present, f):
    h, w = 4, 6
    images = {name: torch.rand(3, h, w, generator=torch.Generator().manual_seed(i)) * 2 - 1
              for i, (name, _, _) in enumerate(config)}
    ref_clip, ref_mask, ref_p = spec_condition(images, config, present, f, h // 2, w // 2)
    if ref_p > f:
        pytest.skip("P > F is a config error")

    elements = [element(name, position, repeat) for name, position, repeat in config]
    order = layout.layout_elements(elements, {name: name in present for name, _, _ in config})
    clip = layout.reference_clip([images[name] for name, _ in order], [r for _, r in order], f)
    p = sum(r for _, r in order)
    pixel_mask = layout.pixel_frame_mask(f, p)
    mask = layout.fold_mask(pixel_mask, h // 2, w // 2)
    assert p == ref_p
    torch.testing.assert_close(clip, ref_clip, rtol=0, atol=0)
    torch.testing.assert_close(layout.mask_reference_clip(clip, pixel_mask), ref_clip, rtol=0, atol=0)
    torch.testing.assert_close(mask, ref_mask, rtol=0, atol=0)

    video = torch.rand(3, f, h, w, generator=torch.Generator().manual_seed(99))
    z_cond = fake_encode(clip)
    k_ref, separate_ref, joint_ref = spec_targets(z_cond, video, clip[:, :p], ref_mask, f)
    k = layout.reference_latent_frames(p)
    assert k == k_ref
    if f - 4 * k >= 1:
        n = layout.separate_target_frames(f, k)
        separate = layout.separate_target_latents(z_cond, fake_encode(video[:, :n]), k)
        torch.testing.assert_close(separate, separate_ref, rtol=0, atol=0)
        assert separate.shape[1] == (f - 1) // 4 + 1
    joint = fake_encode(layout.joint_clip(clip[:, :p], video, f))
    torch.testing.assert_close(joint, joint_ref, rtol=0, atol=0)


def test_spec_worked_example_three_elements_a2_repeats():
    elements = [element("subject", 0, 1, required=True), element("object", 1, 4), element("background", 2, 4)]
    order = layout.layout_elements(elements, {"subject": True, "object": True, "background": True})
    assert order == [("subject", 1), ("object", 4), ("background", 4)]
    frames = [torch.full((3, 2, 2), v) for v in (0.1, 0.2, 0.3)]
    clip = layout.reference_clip(frames, [1, 4, 4], 81)
    assert clip.shape == (3, 81, 2, 2)
    assert [round(float(clip[0, i, 0, 0]), 1) for i in range(10)] == [0.1] + [0.2] * 4 + [0.3] * 4 + [0.0]
    assert (clip[:, 9:] == 0).all()
    mask = layout.fold_mask(layout.pixel_frame_mask(81, 9), 2, 2)
    assert mask.shape == (4, 21, 2, 2)
    assert (mask[:, :3] == 1).all() and (mask[:, 3:] == 0).all()
    k = layout.reference_latent_frames(9)
    assert k == 3 and layout.separate_target_frames(81, k) == 69 and (69 - 1) // 4 + 1 == 18
    assert layout.dropped_decoded_frames("separate", 9) == 12 and layout.dropped_decoded_frames("joint", 9) == 9


def diffusers_i2v_mask(num_frames: int, latent_h: int, latent_w: int) -> torch.Tensor:
    """The lines of diffusers' WanImageToVideoPipeline.prepare_latents (no last image) that build the mask."""
    batch_size, vae_scale_factor_temporal = 1, 4
    mask_lat_size = torch.ones(batch_size, 1, num_frames, latent_h, latent_w)
    mask_lat_size[:, :, list(range(1, num_frames))] = 0
    first_frame_mask = mask_lat_size[:, :, 0:1]
    first_frame_mask = torch.repeat_interleave(first_frame_mask, dim=2, repeats=vae_scale_factor_temporal)
    mask_lat_size = torch.concat([first_frame_mask, mask_lat_size[:, :, 1:, :]], dim=2)
    mask_lat_size = mask_lat_size.view(batch_size, -1, vae_scale_factor_temporal, latent_h, latent_w)
    mask_lat_size = mask_lat_size.transpose(1, 2)
    return mask_lat_size[0]


@pytest.mark.parametrize("f", [81, 9, 5, 1])
def test_one_element_is_the_plain_wan_i2v_mask(f):
    from modules.model.condition_layout import frame_mask

    mask = layout.fold_mask(layout.pixel_frame_mask(f, 1), 3, 5)
    torch.testing.assert_close(mask, diffusers_i2v_mask(f, 3, 5), rtol=0, atol=0)
    assert (mask[:, 0] == 1).all() and (mask[:, 1:] == 0).all()
    torch.testing.assert_close(mask, frame_mask(f, 1, 3, 5), rtol=0, atol=0)


# --- pieces -----------------------------------------------------------------------------------------


def test_missing_optional_elements_move_forward_and_required_is_enforced():
    elements = [element("b", 2, 4), element("s", 0, 1, required=True), element("o", 1, 4)]
    assert layout.layout_elements(elements, {"s": True, "b": True}) == [("s", 1), ("b", 4)]
    assert layout.layout_elements(elements, {"s": True}) == [("s", 1)]
    with pytest.raises(ValueError, match="'s'"):
        layout.layout_elements(elements, {"o": True})


def test_reference_clip_rejects_overflow_and_mismatched_frames():
    with pytest.raises(ValueError, match="do not fit"):
        layout.reference_clip([torch.zeros(3, 2, 2)], [6], 5)
    with pytest.raises(ValueError):
        layout.reference_clip([torch.zeros(3, 2, 2), torch.zeros(3, 2, 3)], [1, 1], 5)


@pytest.mark.parametrize("mode, index, expected", [
    ("full", 0, [1, 1, 1, 1, 1, 0, 0, 0, 0]),
    ("index", 2, [0, 0, 1, 0, 0, 0, 0, 0, 0]),
    ("index", 40, [0, 0, 0, 0, 1, 0, 0, 0, 0]),  # clamped to P − 1
    ("prefix", 2, [1, 1, 1, 0, 0, 0, 0, 0, 0]),
    ("first_and_last", 0, [1, 0, 0, 0, 1, 0, 0, 0, 0]),
])
def test_frame_conditioning_modes(mode, index, expected):
    assert layout.pixel_frame_mask(9, 5, mode, index).tolist() == expected


def test_random_mode_is_a_seeded_prefix():
    masks = [layout.pixel_frame_mask(13, 9, "random", rng=torch.Generator().manual_seed(s)) for s in range(30)]
    for m in masks:
        length = int(m.sum())
        assert 1 <= length <= 9 and m[:length].eq(1).all() and m[length:].eq(0).all()
    assert len({int(m.sum()) for m in masks}) > 1
    again = layout.pixel_frame_mask(13, 9, "random", rng=torch.Generator().manual_seed(3))
    torch.testing.assert_close(again, masks[3])


def test_no_references_and_bad_modes():
    assert layout.pixel_frame_mask(5, 0, "random").sum() == 0
    with pytest.raises(ValueError):
        layout.pixel_frame_mask(5, 1, "everything")
    with pytest.raises(ValueError):
        layout.pixel_frame_mask(5, 6)
    with pytest.raises(ValueError):
        layout.fold_mask(torch.ones(6), 1, 1)


def test_mask_reference_clip_blanks_unmarked_frames():
    clip = torch.ones(3, 5, 2, 2)
    out = layout.mask_reference_clip(clip, layout.pixel_frame_mask(5, 3, "index", 1))
    assert out[:, 1].eq(1).all() and out[:, [0, 2, 3, 4]].eq(0).all()


def test_clip_embeddings_are_concatenated_in_layout_order():
    a, b, c = (torch.full((257, 8), v) for v in (1.0, 2.0, 3.0))
    out = layout.concat_clip_embeds([a, b, c])
    assert out.shape == (771, 8) and out[0, 0] == 1 and out[257, 0] == 2 and out[514, 0] == 3
    assert layout.concat_clip_embeds([a[None], b[None]]).shape == (1, 514, 8)
    with pytest.raises(ValueError):
        layout.concat_clip_embeds([])


@pytest.mark.parametrize("p, k", [(0, 0), (1, 1), (2, 2), (5, 2), (6, 3), (8, 3), (9, 3), (10, 4), (13, 4)])
def test_reference_latent_frames_match_the_mask(p, k):
    assert layout.reference_latent_frames(p) == k
    if p:
        mask = layout.fold_mask(layout.pixel_frame_mask(21, p), 1, 1)
        assert int((mask.amax(dim=(0, 2, 3)) > 0).sum()) == k


def test_frame_count_helpers():
    assert layout.min_num_frames("separate", 9) == 13 and layout.min_num_frames("joint", 9) == 13
    assert layout.min_num_frames("joint", 8) == 9 and layout.min_num_frames("separate", 1) == 5
    with pytest.raises(ValueError):
        layout.separate_target_frames(9, 3)
    with pytest.raises(ValueError):
        layout.joint_clip(torch.zeros(3, 9, 1, 1), torch.zeros(3, 2, 1, 1), 13)
    assert layout.latent_loss_mask(5, 2, False).tolist() == [0, 0, 1, 1, 1]
    assert layout.latent_loss_mask(5, 2, True).tolist() == [1] * 5
