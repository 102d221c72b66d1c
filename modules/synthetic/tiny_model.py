"""Tiny, randomly initialised Wan 2.1 / 2.2 checkpoints in diffusers format.

``write_tiny_model(variant, output_dir, seed)`` writes a complete diffusers
folder (``model_index.json`` plus one sub-folder per component) that
``diffusers.DiffusionPipeline.from_pretrained(output_dir)`` loads fully
offline.  The layouts mirror the real Wan-AI ``*-Diffusers`` repositories
(component classes, channel counts, VAE latent statistics, scheduler kind,
``boundary_ratio`` / ``expand_timesteps`` flags); only the widths and depths
are shrunk so that every folder is a few MB and is written in well under a
second.  Nothing is downloaded: the tokenizer is trained here, from a small
built-in English corpus, with the ``tokenizers`` package.

Variants (see ``VARIANTS``):

* ``t2v``      - Wan 2.1 T2V (1.3B/14B) layout: ``WanPipeline``, transformer in/out 16,
  Wan 2.1 VAE (z_dim 16), UniPC flow scheduler with ``flow_shift`` 3.0.
* ``i2v``      - Wan 2.1 I2V 14B 480P layout: ``WanImageToVideoPipeline``, transformer
  in 36 / out 16 with a CLIP image branch (``image_dim`` = CLIP hidden size,
  ``added_kv_proj_dim`` = transformer inner dim), ``image_encoder`` (CLIPVisionModel,
  224 px, patch 14 -> 257 tokens) and ``image_processor`` (CLIPImageProcessor).
* ``ti2v``     - Wan 2.2 TI2V 5B layout: ``WanPipeline`` with ``expand_timesteps: true``,
  Wan 2.2 VAE (z_dim 48, residual, patch 2, spatial compression 16), transformer
  in/out 48, ``flow_shift`` 5.0.
* ``a14b``     - Wan 2.2 T2V A14B layout: ``WanPipeline`` with two experts
  (``transformer`` = high noise, ``transformer_2`` = low noise, same config),
  ``boundary_ratio`` 0.875, Wan 2.1 VAE.
* ``a14b_i2v`` - Wan 2.2 I2V A14B layout: ``WanImageToVideoPipeline`` with two 36-channel
  experts, no CLIP image encoder, ``boundary_ratio`` 0.9, Wan 2.1 VAE.
* ``flf2v``    - Wan 2.1 FLF2V 14B layout: the ``i2v`` one whose CLIP branch has a position embedding over a
  first and a last frame's tokens (``pos_embed_seq_len`` 2 x 257).
* ``skyreels_v2`` - SkyReels-V2 T2V layout: ``SkyReelsV2Pipeline``, ``SkyReelsV2Transformer3DModel`` with its fps
  embedding (``inject_sample_info``), Wan 2.1 VAE.
* ``skyreels_v2_i2v`` - SkyReels-V2 I2V layout (36 channels, CLIP branch), no fps embedding (as the real one).
* ``vace``     - Wan 2.1 VACE 1.3B/14B layout: ``WanVACEPipeline``, ``WanVACETransformer3DModel``
  (in/out 16, a control block per base block: ``vace_layers`` [0, 1], ``vace_in_channels`` 96).
* ``a14b_vace`` - Wan 2.2 VACE-Fun A14B layout: the same transformer as two experts, ``boundary_ratio`` 0.875.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from modules.util.errors import UserError
from modules.synthetic.tiny_tokenizer import TOKENIZER_VOCAB_SIZE, build_tokenizer, save_tokenizer

__all__ = [
    "MARKER_KEY",
    "TinyModelError",
    "VARIANTS",
    "TEXT_DIM",
    "CLIP_HIDDEN_SIZE",
    "CLIP_IMAGE_SIZE",
    "CLIP_PATCH_SIZE",
    "CLIP_NUM_TOKENS",
    "TOKENIZER_VOCAB_SIZE",
    "TinyVariant",
    "get_variant",
    "write_tiny_model",
]

# --------------------------------------------------------------------------------------
# Tiny sizes shared by all variants
# --------------------------------------------------------------------------------------

#: UMT5 ``d_model`` of the tiny text encoder (= transformer ``text_dim``; the real one is 4096).
TEXT_DIM = 32

#: Tiny CLIP vision tower (the real one is ViT-H/14: hidden 1280, 32 layers, 16 heads).
CLIP_HIDDEN_SIZE = 32
CLIP_IMAGE_SIZE = 224
CLIP_PATCH_SIZE = 14
#: Tokens in the CLIP last/penultimate hidden state at 224 px: (224/14)^2 patches + 1 class token.
CLIP_NUM_TOKENS = (CLIP_IMAGE_SIZE // CLIP_PATCH_SIZE) ** 2 + 1  # 257, as the real ViT-H/14

_OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

_TINY_TRANSFORMER = dict(num_attention_heads=2, attention_head_dim=16, ffn_dim=64, num_layers=2)
#: With the trained VAE (the learning tests, the shapes demo) the transformer learns shapes and motion from scratch:
#: 2 blocks 32 wide plateau (flow loss 0.72 after 3000 steps, colour follows no prompt), 4 blocks 128 wide learn them.
_LEARNING_TRANSFORMER = dict(num_attention_heads=4, attention_head_dim=32, ffn_dim=256, num_layers=4)

# Wan 2.2 VAE latent statistics (48 channels), as in Wan-AI/Wan2.2-TI2V-5B-Diffusers vae/config.json.
_WAN22_LATENTS_MEAN = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
]  # fmt: skip
_WAN22_LATENTS_STD = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
]  # fmt: skip

# Wan 2.1 VAE latent statistics (16 channels), as in every Wan 2.1 / 2.2 A14B vae/config.json.
_WAN21_LATENTS_MEAN = [
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
]  # fmt: skip
_WAN21_LATENTS_STD = [
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
]  # fmt: skip


# --- the variant table ------------------------------------------------------------------


@dataclass(frozen=True)
class TinyVariant:
    """What one variant writes (the layout of the real checkpoint it mirrors)."""

    name: str
    mirrors: str
    pipeline_class: str
    in_channels: int
    out_channels: int
    vae: str  # "wan2.1" (z_dim 16) or "wan2.2" (z_dim 48)
    flow_shift: float
    clip_image_encoder: bool = False
    two_experts: bool = False
    boundary_ratio: float | None = None
    expand_timesteps: bool = False
    vace: bool = False  # WanVACETransformer3DModel: control blocks on every base block
    first_last_frame: bool = False  # FLF2V: CLIP position embedding over 2 x 257 tokens
    skyreels: bool = False  # SkyReelsV2Transformer3DModel
    fps_embedding: bool = False  # its inject_sample_info (the diffusion-forcing checkpoints have it)

    @property
    def z_dim(self) -> int:
        return 48 if self.vae == "wan2.2" else 16


VARIANTS: dict[str, TinyVariant] = {
    v.name: v
    for v in (
        TinyVariant(
            name="t2v",
            mirrors="Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
            pipeline_class="WanPipeline",
            in_channels=16,
            out_channels=16,
            vae="wan2.1",
            flow_shift=3.0,
        ),
        TinyVariant(
            name="i2v",
            mirrors="Wan-AI/Wan2.1-I2V-14B-480P-Diffusers",
            pipeline_class="WanImageToVideoPipeline",
            in_channels=36,
            out_channels=16,
            vae="wan2.1",
            flow_shift=3.0,
            clip_image_encoder=True,
        ),
        TinyVariant(
            name="ti2v",
            mirrors="Wan-AI/Wan2.2-TI2V-5B-Diffusers",
            pipeline_class="WanPipeline",
            in_channels=48,
            out_channels=48,
            vae="wan2.2",
            flow_shift=5.0,
            expand_timesteps=True,
        ),
        TinyVariant(
            name="a14b",
            mirrors="Wan-AI/Wan2.2-T2V-A14B-Diffusers",
            pipeline_class="WanPipeline",
            in_channels=16,
            out_channels=16,
            vae="wan2.1",
            flow_shift=3.0,
            two_experts=True,
            boundary_ratio=0.875,
        ),
        TinyVariant(
            name="a14b_i2v",
            mirrors="Wan-AI/Wan2.2-I2V-A14B-Diffusers",
            pipeline_class="WanImageToVideoPipeline",
            in_channels=36,
            out_channels=16,
            vae="wan2.1",
            flow_shift=3.0,
            two_experts=True,
            boundary_ratio=0.9,
        ),
        TinyVariant(
            name="flf2v",
            mirrors="Wan-AI/Wan2.1-FLF2V-14B-720P-diffusers",
            pipeline_class="WanImageToVideoPipeline",
            in_channels=36,
            out_channels=16,
            vae="wan2.1",
            flow_shift=3.0,
            clip_image_encoder=True,
            first_last_frame=True,
        ),
        TinyVariant(
            name="skyreels_v2",
            mirrors="Skywork/SkyReels-V2-T2V-14B-540P-Diffusers (with inject_sample_info)",
            pipeline_class="SkyReelsV2Pipeline",
            in_channels=16,
            out_channels=16,
            vae="wan2.1",
            flow_shift=8.0,
            skyreels=True,
            fps_embedding=True,
        ),
        TinyVariant(
            name="skyreels_v2_i2v",
            mirrors="Skywork/SkyReels-V2-I2V-14B-540P-Diffusers",
            pipeline_class="SkyReelsV2ImageToVideoPipeline",
            in_channels=36,
            out_channels=16,
            vae="wan2.1",
            flow_shift=5.0,
            clip_image_encoder=True,
            skyreels=True,
        ),
        TinyVariant(
            name="vace",
            mirrors="Wan-AI/Wan2.1-VACE-1.3B-diffusers",
            pipeline_class="WanVACEPipeline",
            in_channels=16,
            out_channels=16,
            vae="wan2.1",
            flow_shift=3.0,
            vace=True,
        ),
        TinyVariant(
            name="a14b_vace",
            mirrors="alibaba-pai/Wan2.2-VACE-Fun-A14B (diffusers layout)",
            pipeline_class="WanVACEPipeline",
            in_channels=16,
            out_channels=16,
            vae="wan2.1",
            flow_shift=3.0,
            two_experts=True,
            boundary_ratio=0.875,
            vace=True,
        ),
    )
}


#: Other accepted spellings (``a14b_t2v`` is the name ``modules.model.WanVariant`` uses).
_ALIASES = {"a14b_t2v": "a14b", "skyreels_v2_t2v": "skyreels_v2"}


class TinyModelError(UserError, ValueError):
    """A bad argument to ``write_tiny_model`` (unknown variant, bad seed, unusable output folder)."""


def get_variant(variant: str) -> TinyVariant:
    """Return the spec of ``variant`` or raise ``TinyModelError`` naming the valid ones."""
    key = _ALIASES.get(variant, variant) if isinstance(variant, str) else None
    if key not in VARIANTS:
        raise TinyModelError(
            f"unknown tiny Wan variant {variant!r}: use one of {', '.join(VARIANTS)}"
        )
    return VARIANTS[key]


# --------------------------------------------------------------------------------------
# Components
# --------------------------------------------------------------------------------------


def _text_encoder(vocab_size: int):
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(
        vocab_size=vocab_size,
        d_model=TEXT_DIM,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        dropout_rate=0.1,
        layer_norm_epsilon=1e-6,
        initializer_factor=1.0,
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=True,
        use_cache=True,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        tokenizer_class="T5Tokenizer",
    )
    # Note: transformers 5.x forces ``tie_word_embeddings=True`` for the T5 family (the real
    # umt5-xxl config says false); irrelevant here, an encoder-only model has no LM head.
    config.architectures = ["UMT5EncoderModel"]
    return UMT5EncoderModel(config).eval()


#: The VACE context: inactive and reactive latents (2 x 16) and the 8x8 pixel mask folded into channels (64).
VACE_IN_CHANNELS = 96


def _transformer(spec: TinyVariant, learning: bool = False):
    from diffusers import SkyReelsV2Transformer3DModel, WanTransformer3DModel, WanVACETransformer3DModel

    if spec.skyreels:
        return SkyReelsV2Transformer3DModel(**_transformer_config(spec, learning),
                                            inject_sample_info=spec.fps_embedding).eval()
    if spec.vace:
        # The real 1.3B has 30 blocks and control on every other one (vace_layers 0, 2, ... 28); ComfyUI spaces them
        # evenly too, so two blocks with control on both keeps the tiny one loadable there.
        return WanVACETransformer3DModel(**_transformer_config(spec, learning), vace_layers=[0, 1],
                                         vace_in_channels=VACE_IN_CHANNELS).eval()
    return WanTransformer3DModel(**_transformer_config(spec, learning)).eval()


def _transformer_config(spec: TinyVariant, learning: bool = False) -> dict[str, Any]:
    size = _LEARNING_TRANSFORMER if learning else _TINY_TRANSFORMER
    inner_dim = size["num_attention_heads"] * size["attention_head_dim"]
    return dict(
        **size,
        patch_size=(1, 2, 2),
        in_channels=spec.in_channels,
        out_channels=spec.out_channels,
        text_dim=TEXT_DIM,
        freq_dim=256,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        eps=1e-6,
        image_dim=CLIP_HIDDEN_SIZE if spec.clip_image_encoder else None,
        added_kv_proj_dim=inner_dim if spec.clip_image_encoder else None,
        rope_max_seq_len=1024,
        pos_embed_seq_len=2 * CLIP_NUM_TOKENS if spec.first_last_frame else None,
    )


def _vae(spec: TinyVariant):
    from diffusers import AutoencoderKLWan

    if spec.vae == "wan2.2":
        # Wan 2.2 VAE: base_dim 160 / decoder_base_dim 256 / num_res_blocks 2 in the real one.
        return AutoencoderKLWan(
            base_dim=4,
            decoder_base_dim=8,
            z_dim=48,
            dim_mult=[1, 2, 4, 4],
            num_res_blocks=1,
            attn_scales=[],
            temperal_downsample=[False, True, True],
            dropout=0.0,
            latents_mean=list(_WAN22_LATENTS_MEAN),
            latents_std=list(_WAN22_LATENTS_STD),
            is_residual=True,
            in_channels=12,
            out_channels=12,
            patch_size=2,
            scale_factor_temporal=4,
            scale_factor_spatial=16,
        ).eval()
    # Wan 2.1 VAE: base_dim 96, num_res_blocks 2 in the real one.
    return AutoencoderKLWan(
        base_dim=8,
        z_dim=16,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=1,
        attn_scales=[],
        temperal_downsample=[False, True, True],
        dropout=0.0,
        latents_mean=list(_WAN21_LATENTS_MEAN),
        latents_std=list(_WAN21_LATENTS_STD),
    ).eval()


def _scheduler(spec: TinyVariant):
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(
        num_train_timesteps=1000,
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
        flow_shift=spec.flow_shift,
    )


def _image_encoder():
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(
        hidden_size=CLIP_HIDDEN_SIZE,
        intermediate_size=4 * CLIP_HIDDEN_SIZE,
        projection_dim=CLIP_HIDDEN_SIZE,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_channels=3,
        image_size=CLIP_IMAGE_SIZE,
        patch_size=CLIP_PATCH_SIZE,
        hidden_act="gelu",
        layer_norm_eps=1e-5,
    )
    config.architectures = ["CLIPVisionModel"]
    return CLIPVisionModel(config).eval()


def _image_processor_config() -> dict[str, Any]:
    # What transformers' CLIPImageProcessor writes for the real ViT-H/14 (224 px) processor.
    return {
        "crop_size": {"height": CLIP_IMAGE_SIZE, "width": CLIP_IMAGE_SIZE},
        "do_center_crop": True,
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": list(_OPENAI_CLIP_MEAN),
        "image_processor_type": "CLIPImageProcessor",
        "image_std": list(_OPENAI_CLIP_STD),
        "resample": 3,
        "rescale_factor": 1 / 255,
        "size": {"shortest_edge": CLIP_IMAGE_SIZE},
    }


#: Private ``model_index.json`` key (diffusers ignores keys starting with "_") marking a folder
#: written here; only such a folder may be overwritten by ``write_tiny_model``.
MARKER_KEY = "_wantrainer_tiny_model"


def _model_index(spec: TinyVariant, seed: int) -> dict[str, Any]:
    import diffusers

    transformer_class = ("WanVACETransformer3DModel" if spec.vace else
                         "SkyReelsV2Transformer3DModel" if spec.skyreels else "WanTransformer3DModel")
    index: dict[str, Any] = {
        "_class_name": spec.pipeline_class,
        "_diffusers_version": diffusers.__version__,
        MARKER_KEY: {"variant": spec.name, "seed": seed, "mirrors": spec.mirrors},
        **({} if spec.skyreels else {"boundary_ratio": spec.boundary_ratio}),  # (SkyReels' pipeline has neither)
        **({} if spec.vace or spec.skyreels else {"expand_timesteps": spec.expand_timesteps}),
    }
    if spec.pipeline_class in ("WanImageToVideoPipeline", "SkyReelsV2ImageToVideoPipeline"):
        clip = spec.clip_image_encoder
        index["image_encoder"] = ["transformers", "CLIPVisionModel"] if clip else [None, None]
        index["image_processor"] = ["transformers", "CLIPImageProcessor"] if clip else [None, None]
    index.update(
        {
            "scheduler": ["diffusers", "UniPCMultistepScheduler"],
            "text_encoder": ["transformers", "UMT5EncoderModel"],
            "tokenizer": ["transformers", "T5TokenizerFast"],
            "transformer": ["diffusers", transformer_class],
            "vae": ["diffusers", "AutoencoderKLWan"],
        }
    )
    if not spec.skyreels:
        index["transformer_2"] = ["diffusers", transformer_class] if spec.two_experts else [None, None]
    return dict(sorted(index.items()))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


@contextlib.contextmanager
def _seeded(seed: int, offset: int) -> Iterator[None]:
    """Build a component under a derived seed without touching the caller's RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1000 + offset)
        yield


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------


def write_tiny_model(variant: str, output_dir: str | Path, seed: int = 0, trained_vae: bool = False) -> Path:
    """Write a tiny random Wan checkpoint of ``variant`` to ``output_dir`` (diffusers layout).

    ``trained_vae``: use the committed VAE trained on synthetic shape clips (``modules/synthetic/tiny_vae.py``,
    Wan 2.1 layout only) and a random transformer of the learning size, so that what it learns can be seen.

    ``variant`` is one of ``t2v``, ``i2v``, ``ti2v``, ``a14b`` (alias ``a14b_t2v``), ``a14b_i2v``;
    ``seed`` an integer in [0, 2**32).  Bad arguments raise ``TinyModelError`` (both a
    ``UserError`` and a ``ValueError``).  The folder is created (its parents too); if it exists
    it must be empty or hold a tiny model written here before (``MARKER_KEY`` in its
    ``model_index.json``), which is replaced.  The same ``seed`` always writes byte-identical
    files.  Returns the resolved folder path.
    """
    spec = get_variant(variant)
    if trained_vae and spec.vae != "wan2.1":
        raise TinyModelError(f"the trained tiny VAE has the Wan 2.1 layout; the {spec.name} variant needs Wan 2.2's")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise TinyModelError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    out = Path(output_dir).expanduser().resolve()
    if out.exists():
        if not out.is_dir():
            raise TinyModelError(f"output '{out}' exists and is not a folder: choose another path")
        if any(out.iterdir()) and not _is_tiny_model(out):
            raise TinyModelError(
                f"output folder '{out}' is not empty and is not a tiny model written before: "
                "choose an empty or new folder"
            )

    # Build everything in a sibling temp folder, then swap into place, so a failure
    # never leaves a half-written model behind.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()  # (not tempfile.mkdtemp: that makes the final folder mode 0700)
    try:
        _write_components(spec, tmp, seed, trained_vae)
        if out.exists():
            for child in out.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _is_tiny_model(folder: Path) -> bool:
    try:
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(index, dict) and MARKER_KEY in index


def _write_components(spec: TinyVariant, root: Path, seed: int, trained_vae: bool) -> None:
    from transformers.utils import logging as hf_logging

    # transformers' save_pretrained shows a "Writing model shards" bar per model; hide it
    # while writing and restore the caller's setting afterwards.
    bars_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        _write_components_quiet(spec, root, seed, trained_vae)
    finally:
        if bars_enabled:
            hf_logging.enable_progress_bar()


def _write_components_quiet(spec: TinyVariant, root: Path, seed: int, trained_vae: bool) -> None:
    tokenizer = build_tokenizer()
    save_tokenizer(tokenizer, root / "tokenizer")

    with torch.no_grad():
        with _seeded(seed, 1):
            text_encoder = _text_encoder(len(tokenizer))
        text_encoder.save_pretrained(str(root / "text_encoder"), safe_serialization=True)

        if trained_vae:
            from modules.synthetic.tiny_vae import load_fixture

            vae = load_fixture()
        else:
            with _seeded(seed, 2):
                vae = _vae(spec)
        vae.save_pretrained(str(root / "vae"), safe_serialization=True)

        with _seeded(seed, 3):
            transformer = _transformer(spec, learning=trained_vae)
        transformer.save_pretrained(str(root / "transformer"), safe_serialization=True)

        if spec.two_experts:
            # Distinct weights for the low-noise expert, same config as the high-noise one.
            with _seeded(seed, 4):
                transformer_2 = _transformer(spec, learning=trained_vae)
            transformer_2.save_pretrained(str(root / "transformer_2"), safe_serialization=True)

        if spec.clip_image_encoder:
            with _seeded(seed, 5):
                image_encoder = _image_encoder()
            image_encoder.save_pretrained(str(root / "image_encoder"), safe_serialization=True)
            (root / "image_processor").mkdir()
            _write_json(root / "image_processor" / "preprocessor_config.json", _image_processor_config())

    _scheduler(spec).save_pretrained(str(root / "scheduler"))
    index = _model_index(spec, seed)
    if trained_vae:
        index[MARKER_KEY]["trained_vae"] = True
    _write_json(root / "model_index.json", index)
