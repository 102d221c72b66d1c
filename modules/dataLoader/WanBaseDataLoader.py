"""The T2V / I2V data path on our pipeline engine: concepts -> decoded clips -> buckets -> encoded,
cached tensors -> batches.

Per sample, two cache stages hold the caption's UMT5 embedding and the clip's VAE posterior (mean and
std, so each step draws its own latent sample) — plus, for image-conditioned models, the first-frame
condition and its CLIP embedding. Cache keys fingerprint everything that changes those tensors, so with
`latent_caching` on no encoder runs after the first pass. Epoch order is a pure function of
(seed, epoch), which makes resume exact; a sample that becomes unreadable later is replaced (`LostItems`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from modules.config.loading import load_concepts
from modules.config.train_config import DEFAULT_MAX_FRAME_PIXELS, ConceptConfig, TrainConfig, resolutions
from modules.dataLoader.augmentation import Augmentation
from modules.dataLoader.batching import (
    ConceptSlots,
    FieldMemo,
    LostItems,
    ProgressReport,
    add_unconditional,
    caching_steps,
    copies_for,
    dropped_captions,
    encode_caption,
    epoch_batches,
    epoch_members,
    prompt_batch,
    unconditional_embeds,
    unconditional_on,
    until_stopped,
)
from modules.dataLoader.buckets import Bucket, area_resolutions, choose_bucket
from modules.dataLoader.cache import DiskCache, component_fingerprint, file_fingerprint, fingerprint
from modules.dataLoader.concept_options import ConceptOptions, concept_options
from modules.dataLoader.concept_selection import concepts_of_type
from modules.dataLoader.discovery import RawSample
from modules.dataLoader.encoder_placement import phase_stops, placement_for, prefill
from modules.dataLoader.encoding_modules import EncodeCaption, EncodePosterior, EncoderCounter, EncoderModule
from modules.dataLoader.errors import CHANGED_FILE, TOO_FEW_FRAMES, DataError
from modules.dataLoader.frames import framing_warning, largest_4k1, resize_and_crop, to_tensor
from modules.dataLoader.item_plan import ItemPlanner, PlannedItem
from modules.dataLoader.masks import BAD_MASK, MISSING_MASK, DecodeMask
from modules.dataLoader.pipeline import CacheStage, ItemContext, Pipeline, PipelineModule
from modules.dataLoader.skips import SkipCounter
from modules.dataLoader.vace_modules import DecodeControl, EncodeVaceContext, control_fingerprint, is_control_file
from modules.dataLoader.verdict import ConceptVerdict, never_data
from modules.dataLoader.video_io import read_video_frames
from modules.dataLoader.windows import random_start
from modules.model.condition_layout import condition_clip, fold_mask, mask_reference_clip, pixel_frame_mask
from modules.model.conditioning import ConditionPayload
from modules.model.step_inputs import StepInputs, StepRandom
from modules.model.WanModel import WanModel
from modules.util.distributed import DistributedContext
from modules.util.enum import BalancingStrategy, ConceptType, FrameSampleStrategy
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

PREPROCESS_VERSION = 1  # bump when decoding/preprocessing changes what a cache entry holds


@dataclasses.dataclass(frozen=True)
class EncoderIdentities:
    """What cache entries of each encoder are keyed on: the component's weights (wherever they came from:
    the base folder, an override file, another checkpoint), its dtype and the preprocessing version."""

    vae: list
    text: list
    clip: list

    @classmethod
    def of(cls, model: WanModel) -> "EncoderIdentities":
        def identity(name: str) -> str:
            return component_fingerprint(model.component_source(name))

        # options that change the encoded values extend the identity (so a plain run keeps its keys)
        tiled = ["tiled"] if getattr(model.vae, "use_tiling", False) else []
        fp8 = ["fp8_e4m3fn:CHANNEL"] if any(p.dtype == torch.float8_e4m3fn for p in model.text_encoder.parameters()) \
            else []
        return cls(vae=[PREPROCESS_VERSION, identity("vae"), str(model.vae.dtype), *tiled],
                   text=[PREPROCESS_VERSION, identity("text_encoder"), identity("tokenizer"),
                         str(model.text_encoder.dtype), *fp8],
                   clip=[PREPROCESS_VERSION, identity("image_encoder")])


class DecodeClip(PipelineModule):
    """Decoded, resampled, cropped window (3, F, H, W) in [-1, 1], its bucket [F, H, W] and the source's
    [H, W]. The item's `clip` says which window (fps, start, frames) at which [height, width] target; a RANDOM
    window (start None) is drawn from the item's stream (per cache variation, or per epoch uncached). Short
    clips train on the largest 4k+1 frames they hold; images are 1-frame clips, their transparent pixels
    composited on `background`."""

    inputs = ("media_path", "clip")
    outputs = ("video_frames", "bucket", "source_size", "window_start")

    def __init__(self, fps: float, frames: int | list[int], resolutions: list[tuple[int, int]],
                 background: Sequence[int], aspect_bucketing: bool, augmentation: Augmentation,
                 per_epoch_random: bool = False, max_pixels: int = DEFAULT_MAX_FRAME_PIXELS):
        # The run's own fps, frames and resolutions key the cache; a concept's own values are in the item's
        # `clip`, a key field whenever any concept differs from the run.
        self.fps, self.frames, self.resolutions, self.background = fps, frames, resolutions, list(background)
        self.aspect_bucketing = aspect_bucketing
        self.augmentation = augmentation
        self.per_epoch_random = per_epoch_random  # uncached RANDOM windows / augmentation: new draws each epoch
        self.max_pixels = max_pixels  # not in the identity: it decides which files are read, not what they give

    def cache_identity(self) -> Any:
        identity = [self.fps, self.frames, self.resolutions, self.background]
        return identity + [self.augmentation.identity()] if self.augmentation.enabled else identity

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        path, clip = item["media_path"], item["clip"]
        length, start = clip["frames"], clip["start"]
        if start is None:
            start = random_start(clip["total"], length, ctx.rng(self.name, "window"))
        frames, _ = read_video_frames(path, target_fps=clip["fps"], max_frames=start + length,
                                      background=self.background, max_pixels=self.max_pixels)
        if start and len(frames) < start + length:
            raise DataError(path, f"changed during the run: {len(frames)} frames, planned a window at "
                            f"{start}-{start + length}", CHANGED_FILE)
        frames = frames[start:]
        count = largest_4k1(len(frames))
        height, width = clip["resolution"]
        resolutions = area_resolutions(height * width) if self.aspect_bucketing else [(height, width)]
        bucket = choose_bucket(frames.shape[1], frames.shape[2], len(frames), resolutions, [count])
        if bucket is None:
            raise DataError(path, f"only {len(frames)} frames", TOO_FEW_FRAMES)
        if self.augmentation.enabled:
            draw = self.augmentation.draw(ctx.rng(self.name, "augment"))
            clip = draw.apply(frames[:bucket.frames], bucket.height, bucket.width)
        else:
            clip = resize_and_crop(frames[:bucket.frames], bucket.height, bucket.width)
        return {"video_frames": to_tensor(clip), "bucket": [bucket.frames, bucket.height, bucket.width],
                "source_size": [frames.shape[1], frames.shape[2]], "window_start": start}


def condition_frames(frames: int, last: bool) -> torch.Tensor:
    """(F,) pixel mask of the condition frames: the first (I2V), or the first and the last (FLF2V)."""
    return pixel_frame_mask(frames, frames, "first_and_last") if last else pixel_frame_mask(frames, 1)


class FirstFrameCondition(PipelineModule):
    """Plain I2V: the first frame, then zero frames up to F (docs/e2v.md §3 with one reference); `last` (FLF2V): the
    first and the last frame with zero frames between, as diffusers' pipeline builds it from `last_image`."""

    inputs = ("video_frames",)
    outputs = ("condition_clip",)

    def __init__(self, last: bool = False):
        self.last = last

    def cache_identity(self) -> Any:
        return [1, "first_and_last"] if self.last else 1

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        video = item["video_frames"]
        if self.last:
            return {"condition_clip": mask_reference_clip(video, condition_frames(video.shape[1], True))}
        return {"condition_clip": condition_clip(video[:, :1], video.shape[1])}


class EncodeFirstFrameClip(EncoderModule):
    """CLIP second-to-last hidden state of the first frame (what Wan I2V conditions on); `last` (FLF2V): of the
    first and the last frame, their tokens concatenated (2 x 257)."""

    inputs = ("video_frames",)
    outputs = ("clip_embeds",)
    encoder = "clip"

    def __init__(self, model: WanModel, identity: Any, counter: EncoderCounter, last: bool = False, placement=None):
        self.model, self.identity, self.counter, self.last = model, identity, counter, last
        self.placement = placement

    def cache_identity(self) -> Any:
        return [self.identity, "first_and_last"] if self.last else self.identity

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        self.use_encoder()
        video = item["video_frames"]
        picks = [0, video.shape[1] - 1] if self.last else [0]
        frames = [((video[:, i].permute(1, 2, 0) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()
                  for i in picks]
        return {"clip_embeds": self.model.encode_images(frames).flatten(0, 1)}


@dataclasses.dataclass
class TrainingItem:
    sample: RawSample
    position: int  # index among all discovered samples: keys the item's random streams
    source: dict[str, Any]
    bucket: Bucket | None = None
    latent_key: str = ""  # cache entries (empty without latent caching)
    text_key: str = ""
    loss_weight: float = 1.0  # its concept's
    group: str = ""  # its concept's display name (validation losses are reported per concept)
    variations: int = 1  # cached variants (RANDOM windows); epoch e trains variant e % variations
    caption_dropout: float = 0.0  # its concept's caption_dropout_probability (0 for validation)


class WanBaseDataLoader:
    def __init__(self, config: TrainConfig, model: WanModel, skips: SkipCounter | None = None,
                 dist: DistributedContext | None = None, should_stop: Callable[[], bool] | None = None,
                 concept_type: ConceptType = ConceptType.STANDARD, on_progress: ProgressReport | None = None,
                 planned: list[ConceptVerdict] | None = None):
        self.config = config
        self.planned = planned  # start-up's data verdict (its skips counted already); None: the loader plans itself
        self.concept_type = concept_type  # VALIDATION: the held-out concepts, each sample once, no caption dropout
        self.should_stop = should_stop  # checked between samples of prepare(): a stop request ends caching at once
        self.on_progress = on_progress  # told each item of prepare(): the GUI's caching progress
        self.dist = dist or DistributedContext()
        self.batch_size = config.batch_size * self.dist.data_world_size  # the global batch; ranks take shares
        self.model = model
        self.skips = skips if skips is not None else SkipCounter()
        self.cache = DiskCache(config.cache_dir)
        self.items: list[TrainingItem] = []
        self.fps = config.fps or model.variant.fps
        height, width = resolutions(config.resolution)[0]
        self.resolutions = area_resolutions(height * width) if config.aspect_bucketing else [(height, width)]
        # a subclass whose condition channels and CLIP input are its own (Animate-2's reference image) builds them
        self.uses_image_condition = model.variant.channel_concat_condition and not self.own_condition
        self.uses_clip = self.uses_image_condition and model.variant.has_clip_branch and model.image_encoder is not None
        # first-last-frame: FLF2V models always, I2V-layout ones when asked
        self.last_frame = self.uses_image_condition and (model.variant.paired_image_tokens or config.last_frame_condition)
        if config.last_frame_condition and not self.uses_image_condition:
            raise UserError(f"config key 'last_frame_condition' needs an I2V-layout base (the {model.variant.name} "
                            "model has no condition channels): set it false or use an I2V / FLF2V model")
        self.uses_control = bool(model.variant.vace_layers)  # VACE: control video and mask beside each clip
        self.counter = EncoderCounter()
        self.placement = placement_for(config, model)  # caching: one encoder on the device at a time
        self.options = [(concept, concept_options(concept, config)) for concept in self.concepts()]
        run = concept_options(ConceptConfig(), config)  # what a concept without overrides trains on
        # A concept that trains other windows, lengths or resolutions than the run's single default makes each
        # item's window part of its cache key; otherwise the keys stay those of a plain run.
        self.clip_keyed = any(o.windowed or (o.fps, o.lengths, o.resolutions) != (run.fps, run.lengths[:1],
                                                                                  run.resolutions[:1])
                              for _, o in self.options)
        random_windows = any(o.windows.strategy == FrameSampleStrategy.RANDOM for _, o in self.options)
        validation = concept_type == ConceptType.VALIDATION
        self.augmentation = Augmentation()  # validation measures the clips as they are
        if concept_type == ConceptType.STANDARD and (config.cache_variations or not config.latent_caching):
            self.augmentation = Augmentation(config.random_flip, config.random_crop, config.color_jitter)
        # RANDOM windows and augmentation: cached as cache_variations variants (a pipeline of their own; the
        # validation set keeps one), uncached a new draw each epoch.
        varied = random_windows or self.augmentation.enabled
        self.variations = max(1, config.cache_variations) if varied and config.latent_caching and not validation else 1
        self.pipeline, self.stages = self._pipeline(1, per_epoch=varied and not config.latent_caching)
        self.pipelines = {1: self.pipeline}
        if self.variations > 1:
            self.pipelines[self.variations] = self._pipeline(self.variations)[0]
        self.planner = ItemPlanner(self.fps, config.transparent_background,
                                   self.cache if config.latent_caching else None, config.seed, config.max_frame_pixels,
                                   side_files=is_control_file if self.uses_control else self.side_files,
                                   not_data=never_data(config))
        self.lost = LostItems([], [], config.seed, self.skips)
        # Cached fields are deterministic per item, so they may stay in RAM (not the uncached path's); validation
        # always reads epoch 0, so its fields are deterministic either way.
        self.unconditional: torch.Tensor | None = None  # guidance_preserving's prompt, encoded in prepare()
        self.memo = FieldMemo(config.ram_cache_mb if config.latent_caching or validation else 0)

    @property
    def encoder_calls(self) -> int:
        """How many times an encoder (VAE, UMT5, CLIP) ran; tests check that epoch 2 adds none."""
        return self.counter.calls

    def _pipeline(self, variations: int, per_epoch: bool = False) -> tuple[Pipeline, list[CacheStage]]:
        model, counter, config = self.model, self.counter, self.config
        identities = EncoderIdentities.of(model)
        vae_identity, text_identity = identities.vae, identities.text
        decode = DecodeClip(self.fps, config.frames, self.resolutions, config.transparent_background,
                            config.aspect_bucketing, self.augmentation, per_epoch, config.max_frame_pixels)
        placement = self.placement
        # a subclass's inputs right after the clip's decoder: a sample they fail on costs no encoder call
        side_video, side_outputs, side_text = self._side_modules(identities, decode.name, per_epoch)
        video = [decode, *side_video,
                 EncodePosterior(model, "video_frames", "latent", vae_identity, counter, placement)]
        outputs = ["bucket", "source_size", "latent_mean", "latent_std", *side_outputs]
        if config.masked_training:  # cached with the latents, keyed by the mask file too
            variant = model.variant
            video.append(DecodeMask(variant.vae_scale_spatial, variant.vae_scale_temporal, self.augmentation,
                                    decode.name, per_epoch))
            outputs.append("latent_mask")
        if self.uses_control:  # cached with the latents, keyed by the control files too
            video += [DecodeControl(self.augmentation, decode.name, per_epoch),
                      EncodeVaceContext(model, vae_identity, counter)]
            outputs.append("vace_context")
        if self.uses_image_condition:
            video += [FirstFrameCondition(self.last_frame),
                      EncodePosterior(model, "condition_clip", "condition", vae_identity, counter, placement)]
            outputs.append("condition_mean")
        if self.uses_clip:
            video.append(EncodeFirstFrameClip(model, identities.clip, counter, self.last_frame, placement))
            outputs.append("clip_embeds")
        self.caption_encoder = EncodeCaption(model, text_identity, strip_prefixes=False, counter=counter,
                                             placement=placement)
        text = [self.caption_encoder]
        sources = ["media_path", "media_fp", "caption", "clip", "mask_path", "mask_fp", "control_fp",
                   *self.side_sources]
        if not config.latent_caching:
            return Pipeline(sources, video + text + side_text, config.seed), []
        video_key = ["media_fp", "clip"] if self.clip_keyed else ["media_fp"]
        if config.masked_training:
            video_key.append("mask_fp")
        if self.uses_control or side_video:
            video_key.append("control_fp")
        # text first: caching runs every caption through UMT5 before the first clip meets the VAE (`prefill`)
        stages = [CacheStage(text, ["caption"], self.cache, "text", name="text"),
                  *[CacheStage([module], list(module.inputs), self.cache, "text", name=module.outputs[0])
                    for module in side_text],
                  CacheStage(video, video_key, self.cache, "video", variations, outputs=outputs, name="video")]
        return Pipeline(sources, stages, config.seed), stages

    # --- a subclass's inputs beside each clip (Animate-2's driving video and reference image) ------------------
    own_condition = False  # True: the subclass builds the condition channels and the CLIP input itself
    side_files = None  # Callable[[Path], bool]: the files beside a clip that are its inputs, never clips
    side_sources: tuple[str, ...] = ()  # the item's source fields those inputs add (`_side_fields`)

    def _side_modules(self, identities: EncoderIdentities, clip_module: str,
                      per_epoch: bool) -> tuple[list[PipelineModule], list[str], list[PipelineModule]]:
        """(modules after the clip's decoder, the fields of theirs the video cache keeps, text modules: each its own
        cache stage keyed by its inputs); cached with the clip, keyed by the item's `control_fp` too."""
        return [], [], []

    def _side_fields(self, sample: RawSample) -> dict[str, Any] | None:
        """The item's source fields for its inputs beside the clip (`control_fp`, the identity of those files, keys
        its cache entry); None when the sample lacks them (skipped and counted here)."""
        return {"control_fp": self._control_fingerprint(sample.media_path)}

    def _side_batch(self, batch: dict[str, Any], fields: list[dict[str, Any]], indices: list[int]) -> None:
        """A batch's tensors of those inputs, added to `batch`."""

    # --- discovery and caching ---------------------------------------------------------------------
    def concepts(self) -> list[ConceptConfig]:
        return concepts_of_type(self.config, self.concept_type)

    def has_concepts(self) -> bool:
        """Whether an enabled concept of this loader's type exists (validation is optional)."""
        return bool(self.concepts())

    def _discover(self) -> list[tuple[TrainingItem, int]]:
        raw: list[tuple[TrainingItem, int]] = []
        for number, (concept, options) in enumerate(self.options):
            unmasked: set[Path] = set()
            for planned in self._planned(number, concept, options):
                mask = self._mask(planned.sample, unmasked)
                side = self._side_fields(planned.sample) if mask is not None else None
                if side is None:
                    continue
                source = {"media_path": str(planned.sample.media_path), "media_fp": planned.media_fp,
                          "caption": planned.caption, "clip": planned.clip, **mask, **side}
                keys = {stage.name: stage.key_for(source) for stage in self.stages}
                varied = planned.clip["start"] is None or self.augmentation.enabled
                variations = self.variations if varied else 1
                raw.append((TrainingItem(planned.sample, len(raw), source, None, keys.get("video", ""),
                                         keys.get("text", ""),
                                         loss_weight=options.loss_weight, group=concept.display_name(),
                                         variations=variations, caption_dropout=self._caption_dropout(options)),
                            number))
        return raw

    def _planned(self, number: int, concept: ConceptConfig, options: ConceptOptions) -> list[PlannedItem]:
        """Concept `number`'s items: start-up's verdict's (of the same concepts, in order), else planned now."""
        if self.planned is None:
            return self.planner.plan(concept, options, self.skips)
        assert self.planned[number].concept.path == concept.path, (self.planned[number].concept.path, concept.path)
        return self.planned[number].items

    def _mask(self, sample: RawSample, unmasked: set[Path]) -> dict[str, str] | None:
        """The mask fields of a sample's items; None (skipped and counted once) when masked training finds no
        readable mask for it."""
        if not self.config.masked_training:
            return {"mask_path": "", "mask_fp": ""}
        path = sample.mask_path
        try:
            if path is None:
                raise DataError(sample.media_path, "masked_training is on and it has no "
                                f"{sample.media_path.stem}-masklabel.png or .mp4 beside it", MISSING_MASK)
            return {"mask_path": str(path), "mask_fp": file_fingerprint(path)}
        except (OSError, DataError) as e:
            if sample.media_path not in unmasked:
                unmasked.add(sample.media_path)
                if isinstance(e, DataError):
                    self.skips.record_error(e)
                else:
                    self.skips.record(path, BAD_MASK, f"cannot read the mask ({e})")
            return None

    def _control_fingerprint(self, media: Path) -> str:
        """VACE: the identity of the sample's control video and mask (they key its cache entry)."""
        if not self.uses_control:
            return ""
        return control_fingerprint(media)

    def _caption_dropout(self, options: ConceptOptions) -> float:
        """Validation measures every sample with its caption."""
        return options.caption_dropout if self.concept_type == ConceptType.STANDARD else 0.0

    def prepare(self) -> None:
        """Find every sample, decide its bucket and (with caching) encode it once. Raises `CachingStopped`
        between samples once `should_stop()` is true."""
        raw = self._discover()
        if self.config.clear_cache_before_training:
            logger.info("clear_cache_before_training: re-encoding every sample")
            if self.dist.is_main:
                for item, _ in raw:
                    for key in (item.latent_key, item.text_key):
                        if key:
                            self.cache.delete(key)
            self.dist.barrier()
        with self.placement.caching():
            usable = self._encode_all(raw)
            self.unconditional = unconditional_embeds(self.model, self.config, self.placement)
        self._place(usable)
        if not self.items:
            purpose = "training" if self.concept_type == ConceptType.STANDARD else "validation"
            raise UserError(f"no usable {purpose} sample in the {self.concept_type.name} concepts "
                            f"({self.skips.summary()}): check the dataset")
        self.lost = LostItems([i.bucket for i in self.items], [i.position for i in self.items], self.config.seed,
                              self.skips)
        logger.info("%d training items in %d buckets", len(self.items), len({i.bucket for i in self.items}))

    def _encode_all(self, raw: list[tuple[TrainingItem, int]]) -> list[list[TrainingItem]]:
        """Every item's cache entries filled (encoder by encoder, then the rest per item); the usable items per
        concept."""
        share = raw[self.dist.rank::self.dist.world_size] if self.dist.enabled else raw
        prefill([item for item, _ in share], lambda item: phase_stops(self.pipelines[item.variations].modules),
                self._run, lambda item: item.variations, self.placement, self.should_stop, self.dist.is_main,
                self.on_progress)
        if self.dist.enabled:  # each rank encodes its share of the cache misses, then all read the cache
            for item, _ in until_stopped(share, self.should_stop):
                self._cache_item(item, SkipCounter())
            self.dist.barrier()
        usable: list[list[TrainingItem]] = [[] for _ in self.options]
        self._warned: set[Path] = set()
        for item, number in caching_steps(raw, self.should_stop, "caching" if self.config.latent_caching else "scanning",
                                          "clip", self.dist.is_main, self.on_progress):
            fields = self._cache_item(item, self.skips)
            if fields is not None:
                usable[number].append(item)
                self._warn_once(item, fields)
        return usable

    def _place(self, usable: list[list[TrainingItem]]) -> None:
        """The item list: per concept, its items with `copies_for` copies each (item-major, as plain repeats
        always were), and where they sit, for `epoch_members`. Validation measures each item once."""
        self.items, self.concept_slots = [], []
        for (concept, _), items in zip(self.options, usable):
            strategy, balancing = concept.balancing_strategy, concept.balancing
            if self.concept_type != ConceptType.STANDARD:
                strategy, balancing = BalancingStrategy.REPEATS, 1.0
            copies = copies_for(strategy, balancing)
            start = len(self.items)
            for item in items:
                self.items.extend([item] * copies)
            self.concept_slots.append(ConceptSlots(tuple(start + j * copies for j in range(len(items))), copies,
                                                   strategy, balancing))

    def _run(self, item: TrainingItem, epoch: int, stop: int | None = None) -> dict[str, Any]:
        pipeline = self.pipelines[item.variations]
        return pipeline.run(item.source, pipeline.context(item.position, epoch), stop=stop)

    def _cache_item(self, item: TrainingItem, skips: SkipCounter) -> dict[str, Any] | None:
        """`_bucket`, and with several cached variants (RANDOM windows) every variant encoded now, so no epoch
        runs an encoder."""
        fields = self._bucket(item, skips)
        try:
            for variation in range(1, item.variations if fields is not None else 1):
                self._run(item, variation)  # epoch v uses variant v % variations
        except DataError as e:
            skips.record_error(e)
            return None
        return fields

    def _bucket(self, item: TrainingItem, skips: SkipCounter) -> dict[str, Any] | None:
        """The item's (cached) fields with its bucket set, or None when it is skipped."""
        # Without caching only the decoder needs to run to learn the bucket.
        try:
            fields = self._run(item, 0, stop=None if self.stages else 1)
        except DataError as e:
            skips.record_error(e)
            return None
        item.bucket = Bucket(*fields["bucket"])
        return fields

    def _warn_once(self, item: TrainingItem, fields: dict[str, Any]) -> None:
        """What a user should know about a usable sample, said once per run (epochs and windows never repeat it)."""
        if item.sample.media_path in self._warned:
            return
        self._warned.add(item.sample.media_path)
        framing = framing_warning(item.sample.media_path, *fields["source_size"], item.bucket.height, item.bucket.width)
        if framing:
            logger.warning(framing)
        self.caption_encoder.check_length(item.source["caption"], item.sample.media_path, self.skips)

    def fingerprint(self) -> str:
        """Identity of the prepared dataset (for resume checks)."""
        identity = [[i.source["media_fp"], i.source["caption"]] + ([i.source["clip"]] if self.clip_keyed else [])
                    for i in self.items]
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()

    # --- epochs and batches ----------------------------------------------------------------------------
    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """Item indices per global batch of `epoch`, a pure function of (seed, epoch): of the items that
        balancing puts in that epoch (all of them, with whole repeats only)."""
        members = epoch_members(self.concept_slots, self.config.seed, epoch)
        batches = epoch_batches([self.items[m].bucket for m in members], self.batch_size, self.config.seed, epoch,
                                self.dist.data_world_size)
        return [[members[k] for k in batch] for batch in batches]

    def load_batch(self, indices: list[int], epoch: int) -> dict[str, torch.Tensor]:
        def load(index: int) -> dict[str, Any]:
            item = self.items[index]
            return self.memo.get((item.position, epoch % item.variations), lambda: self._load(index, epoch))

        indices, fields = self.lost.load(indices, epoch, load)
        batch = {name: torch.stack([f[name] for f in fields]) for name in ("latent_mean", "latent_std")}
        dropped = dropped_captions(indices, epoch, self.config.seed, [self.items[i].caption_dropout for i in indices])
        batch["prompt_embeds"] = prompt_batch([f["prompt_embeds"] for f in fields], dropped, self._empty_prompt_embeds)
        # the texts the rows were encoded from: a trained embedding re-encodes those holding its placeholder
        batch["captions"] = ["" if drop else self.caption_encoder.text(self.items[i].source["caption"])
                             for i, drop in zip(indices, dropped)]
        if self.uses_image_condition:
            batch["condition_latents"] = self.model.normalize_latents(torch.stack([f["condition_mean"] for f in fields]))
            bucket = self.items[indices[0]].bucket
            _, _, t, h, w = batch["latent_mean"].shape
            mask = fold_mask(condition_frames(bucket.frames, self.last_frame), h, w, self.model.variant.vae_scale_temporal)
            batch["condition_mask"] = mask[None].expand(len(indices), -1, -1, -1, -1)
        if self.uses_clip:
            batch["clip_embeds"] = torch.stack([f["clip_embeds"] for f in fields])
        if self.config.masked_training:
            batch["loss_mask"] = torch.stack([f["latent_mask"] for f in fields])
        if self.uses_control:
            batch["vace_context"] = torch.stack([f["vace_context"] for f in fields])
        self._side_batch(batch, fields, indices)
        weights = [self.items[i].loss_weight for i in indices]
        if any(weight != 1.0 for weight in weights):  # concepts[].loss_weight
            batch["loss_weight"] = torch.tensor(weights, dtype=torch.float32)
        return add_unconditional(batch, self.unconditional, len(indices))

    def _load(self, index: int, epoch: int) -> dict[str, Any]:
        """The item's fields; a file replaced by one of another shape since `prepare()` is a `DataError`."""
        item = self.items[index]
        fields = self._run(item, epoch)
        bucket = Bucket(*fields["bucket"])
        if bucket != item.bucket:
            raise DataError(item.sample.media_path, f"changed during the run: now {bucket.frames} frames of "
                            f"{bucket.width}x{bucket.height}, was {item.bucket.frames} of "
                            f"{item.bucket.width}x{item.bucket.height}", CHANGED_FILE)
        return fields

    def assemble(self, batch: dict[str, torch.Tensor], random: StepRandom) -> StepInputs:
        """Model inputs of a batch: a fresh posterior sample per step (from each sample's stream)."""
        device = self.model.train_device
        mean, std = batch["latent_mean"].to(device), batch["latent_std"].to(device)
        x0 = self.model.normalize_latents(mean + std * random.randn(tuple(mean.shape[1:])).to(device))
        condition = None
        if self.uses_image_condition:
            condition = torch.cat([batch["condition_mask"], batch["condition_latents"]], dim=1).to(device)
        clip, weights, mask = batch.get("clip_embeds"), batch.get("loss_weight"), batch.get("loss_mask")
        control = batch.get("vace_context")
        payload = ConditionPayload(condition=condition, clip_embeds=clip.to(device) if clip is not None else None,
                                   sample_weights=weights.to(device) if weights is not None else None,
                                   loss_mask=mask.to(device) if mask is not None else None,
                                   control=control.to(device) if control is not None else None,
                                   control_scale=self.config.vace_context_scale)
        return StepInputs(x0=x0, prompt_embeds=batch["prompt_embeds"].to(device), payload=payload,
                          captions=batch.get("captions"), unconditional_embeds=unconditional_on(batch, device))

    def encoded_captions(self) -> list[str]:
        """The text each item's caption is encoded from (after prepare())."""
        return [self.caption_encoder.text(item.source["caption"]) for item in self.items]

    def item_group(self, index: int) -> str:
        """The concept an item came from (its display name)."""
        return self.items[index].group

    def _empty_prompt_embeds(self) -> torch.Tensor:
        if not hasattr(self, "_empty_embeds"):
            self._empty_embeds = encode_caption(self.model, "")
        return self._empty_embeds
