"""Elements-to-Video data: the seeds' dataset JSON -> cached VAE / CLIP / UMT5 tensors -> step inputs.

Built on our pipeline engine (dataLoader/pipeline). Per sample, cache stages hold: the caption's UMT5
embedding; the target video's VAE posterior; the ONE reference clip's VAE posterior and pixel mask; and
each element's CLIP embedding (one stage per element, so editing one element's CLIP settings re-encodes
only that element). `assemble()` turns a batch into exactly what docs/e2v.md §6 feeds the transformer. In
SkyReels-V3's layout (§9) the reference stage holds each element's own one-frame posterior instead, and the
references reach the transformer as latent frames appended after the video's (`ConditionPayload.appended`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable

import torch

from modules.config.e2v_dataset_config import E2VDatasetConfig, load_dataset_config
from modules.config.train_config import TrainConfig
from modules.dataLoader.batching import (
    FieldMemo,
    LostItems,
    ProgressReport,
    add_unconditional,
    caching_steps,
    caption_dropped,
    dropped_captions,
    encode_caption,
    epoch_batches,
    prompt_batch,
    unconditional_embeds,
    unconditional_on,
    until_stopped,
)
from modules.dataLoader.cache import DiskCache, file_fingerprint
from modules.dataLoader.discovery import read_caption
from modules.dataLoader.e2v.config_check import datasets_of_type
from modules.dataLoader.e2v.discovery import discover_e2v_samples
from modules.dataLoader.e2v.modules import (
    BuildConditionClip,
    BuildJointClip,
    DecodeE2VMask,
    DecodeTargetVideo,
    EncodeClipElement,
    EncodeEachReference,
    LoadReferences,
)
from modules.dataLoader.e2v.plan import e2v_windows, windowed
from modules.dataLoader.e2v.sampling_options import E2VSamplingOptions, dataset_layout
from modules.dataLoader.e2v.vace import (
    DecodeE2VControl,
    EncodeE2VVaceContext,
    note_unused_settings,
    read_references,
    reference_names,
)
from modules.dataLoader.encoder_placement import phase_stops, placement_for, prefill
from modules.dataLoader.encoding_modules import EncodeCaption, EncodePosterior
from modules.dataLoader.errors import DataError
from modules.dataLoader.item_plan import ItemPlanner
from modules.dataLoader.masks import BAD_MASK, MISSING_MASK
from modules.dataLoader.pipeline import CacheStage, Pipeline
from modules.dataLoader.skips import SkipCounter
from modules.dataLoader.vace_modules import control_fingerprint
from modules.dataLoader.WanBaseDataLoader import EncoderIdentities
from modules.model.condition_layout import (
    fold_mask,
    latent_loss_mask,
    layout_elements,
    reference_latent_frames,
)
from modules.model.conditioning import ConditionPayload
from modules.model.reference_slots import SKYREELS_V3_SLOTS, check_reference_base, pad_reference_slots
from modules.model.step_inputs import StepInputs, StepRandom
from modules.model.vace_references import placed_references
from modules.model.WanModel import WanModel
from modules.util.distributed import DistributedContext
from modules.util.enum import ConceptType, FrameSampleStrategy
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


def resolve_e2v_type(requested: str, model: WanModel) -> str:
    """`auto` is `dual` when the base has a CLIP branch and an image encoder, else `vae` (docs/e2v.md §8)."""
    has_clip = model.variant.has_clip_branch and model.image_encoder is not None
    if requested == "auto":
        return "dual" if has_clip else "vae"
    if requested in ("dual", "clip") and not has_clip:
        raise UserError(f"config key 'e2v.e2v_type' is '{requested}' but the {model.variant.name} base has no CLIP "
                        "branch and image encoder: use 'vae' (or 'auto')")
    return requested


def check_e2v_base(model: WanModel, reference_layout: str = "a2") -> None:
    variant = model.variant
    if reference_layout == "skyreels_v3":
        check_reference_base(variant, "the base model")
        return
    if not (variant.channel_concat_condition or variant.expand_timesteps or variant.vace_layers):
        raise UserError(f"E2V training needs a 36-channel (I2V), TI2V or VACE layout; the {variant.name} transformer "
                        f"has {variant.in_channels} input channels (prepare_e2v_model expands T2V bases first)")


@dataclasses.dataclass
class E2VItem:
    dataset: int
    position: int  # index among all discovered samples: keys the item's random streams
    source: dict[str, Any]
    bucket: tuple = ()


class WanE2VDataLoader:
    def __init__(self, config: TrainConfig, model: WanModel, skips: SkipCounter | None = None,
                 dist: DistributedContext | None = None, should_stop: Callable[[], bool] | None = None,
                 concept_type: ConceptType = ConceptType.STANDARD, on_progress: ProgressReport | None = None):
        self.appends = config.e2v.reference_layout == "skyreels_v3"  # SkyReels-V3: refs after the video (§9)
        check_e2v_base(model, config.e2v.reference_layout)
        self.config = config
        self.should_stop = should_stop  # checked between samples of prepare(): a stop request ends caching at once
        self.on_progress = on_progress  # told each item of prepare(): the GUI's caching progress
        self.model = model
        self.skips = skips if skips is not None else SkipCounter()
        self.dist = dist or DistributedContext()
        self.batch_size = config.batch_size * self.dist.data_world_size
        self.concept_type = concept_type  # VALIDATION: the held-out datasets, no caption dropout
        self.datasets = datasets_of_type(config, concept_type)
        self.e2v_type = resolve_e2v_type(config.e2v.e2v_type, model)
        # VACE: the elements are VACE's reference images (e2v/vace.py), not A2's condition channels
        self.vace = bool(model.variant.vace_layers)
        self.uses_vae = self.e2v_type in ("dual", "vae") and not self.vace
        if self.vace:
            note_unused_settings(self.datasets)
        self.uses_clip = self.e2v_type in ("dual", "clip") and not self.appends  # SkyReels-V3 has no CLIP pathway
        self.layout = config.e2v.target_layout
        self.fps = config.fps or model.variant.fps
        self.cache = DiskCache(config.cache_dir)
        identities = EncoderIdentities.of(model)
        self._vae_identity, self._text_identity = identities.vae, identities.text
        self._clip_identity = identities.clip if self.uses_clip else None
        self.background = config.transparent_background
        # random_flip mirrors a video and its VAE references together; cached as cache_variations variants
        self.flip = config.random_flip and config.cache_variations > 0 and concept_type == ConceptType.STANDARD
        self.placement = placement_for(config, model)  # caching: one encoder on the device at a time
        self.caption_encoders = [EncodeCaption(model, self._text_identity, d.remove_common_llm_caption_prefixes,
                                               placement=self.placement) for d in self.datasets]
        self.decoders: list[DecodeTargetVideo] = []  # per dataset: plans how many video frames a window holds
        self.max_pixels = config.max_frame_pixels
        self.planner = ItemPlanner(self.fps, self.background, self.cache, config.seed, self.max_pixels)  # probes windowed videos
        self.pipelines = [self._pipeline(d, text) for d, text in zip(self.datasets, self.caption_encoders)]
        self.visualization = self.datasets[0].visualization if self.datasets else None
        self.unconditional: torch.Tensor | None = None  # guidance_preserving's prompt, encoded in prepare()
        self.memo = FieldMemo(config.ram_cache_mb)  # every E2V stage is cached, so fields are per (item, variation)
        self.items: list[E2VItem] = []
        self.lost = LostItems([], [], config.seed, self.skips)

    # --- pipeline per dataset ------------------------------------------------------------------------
    def _resolution(self, dataset: E2VDatasetConfig) -> tuple[int, int]:
        height, width = dataset.vae_resolution
        spatial = self.model.variant.vae_scale_spatial * self.model.variant.patch_size[1]
        return max(spatial, height // spatial * spatial), max(spatial, width // spatial * spatial)

    def _pipeline(self, dataset: E2VDatasetConfig, text: EncodeCaption) -> Pipeline:
        height, width = self._resolution(dataset)
        model, placement = self.model, self.placement
        decode = DecodeTargetVideo(dataset, self.fps, self.layout, height, width, self.flip, self.max_pixels)
        self.decoders.append(decode)
        is_windowed = windowed(dataset)
        random_window = dataset.frame_sample_strategy == FrameSampleStrategy.RANDOM
        encode_video = EncodePosterior(model, "video_frames", "video", self._vae_identity, placement=placement)
        references = LoadReferences(dataset, height, width, self.background, self.flip, self.max_pixels)
        vae = dataset.processors.vae
        variations = 4 if vae.frame_conditioning == "random" else 1
        if self.flip or random_window:  # the video's and the references' stages hold the same variants
            variations = max(1, self.config.cache_variations)
        video_variations = variations if self.flip or random_window else 1
        window_key = ["window"] if is_windowed else []  # a HEAD dataset keeps the cache keys of before
        masked = self.config.masked_training
        mask = [DecodeE2VMask(self.layout, height, width, self.fps, model.variant.vae_scale_spatial, self.flip)] \
            if masked else []
        mask_key, mask_output = (["mask_fp"], ["latent_mask"]) if masked else ([], [])
        stages = [CacheStage([text], ["caption"], self.cache, "e2v-text", name="text")]
        # VACE: the context (control, mask, the elements as references) is cached with the latents, keyed by all three
        vace = [DecodeE2VControl(self.fps, self.flip),
                EncodeE2VVaceContext(model, dataset, self._vae_identity, self.background, self.flip, self.max_pixels,
                                     placement)] if self.vace else []
        vace_key, vace_output = (["element_fps", "control_fp"], ["vace_context"]) if self.vace else ([], [])
        if self.appends:  # SkyReels-V3: the whole video is the target; each reference one latent frame (§9)
            stages.append(CacheStage([decode, encode_video, *mask], ["video_fp", *window_key, *mask_key], self.cache,
                                     "e2v-video", video_variations, outputs=["num_frames", "video_mean", "video_std",
                                                                             *mask_output], name="video"))
            stages.append(CacheStage([references, EncodeEachReference(model, self._vae_identity, placement)],
                                     ["element_fps"], self.cache, "e2v-references", variations,
                                     outputs=["reference_mean", "reference_std"], name="references"))
        elif self.uses_vae and self.layout == "joint":
            stages.append(CacheStage(
                [decode, references, BuildConditionClip(vae.frame_conditioning, vae.frame_index),
                 EncodePosterior(model, "condition_clip", "condition", self._vae_identity, placement=placement),
                 BuildJointClip(), EncodePosterior(model, "target_clip", "video", self._vae_identity,
                                                   placement=placement), *mask],
                ["video_fp", "element_fps", "num_reference_frames", *window_key, *mask_key], self.cache, "e2v-joint",
                variations, outputs=["num_frames", "video_mean", "video_std", "condition_mean", "condition_std",
                                     "pixel_mask", *mask_output],
                name="joint"))
        else:
            stages.append(CacheStage([decode, encode_video, *vace, *mask],
                                     ["video_fp", "num_reference_frames", *window_key, *mask_key, *vace_key],
                                     self.cache, "e2v-video", video_variations,
                                     outputs=["num_frames", "video_mean", "video_std", *mask_output, *vace_output],
                                     name="video"))
            if self.uses_vae:
                stages.append(CacheStage(
                    [references, BuildConditionClip(vae.frame_conditioning, vae.frame_index),
                     EncodePosterior(model, "condition_clip", "condition", self._vae_identity, placement=placement)],
                    ["element_fps", "num_frames"], self.cache, "e2v-condition", variations,
                    outputs=["condition_mean", "condition_std", "pixel_mask"], name="condition"))
        if self.uses_clip:
            for element in dataset.elements:
                if element.in_clip:
                    stages.append(CacheStage([EncodeClipElement(model, dataset, element.name, self._clip_identity,
                                                                self.background, self.max_pixels, placement)],
                                             [f"fp_{element.name}"], self.cache, "e2v-clip",
                                             name=f"clip[{element.name}]"))
        sources = ["sample_id", "video_path", "caption", "element_paths", "video_fp", "element_fps",
                   "num_reference_frames", "window", "mask_path", "mask_fp", *[f"fp_{e.name}" for e in dataset.elements],
                   *(["control_fp"] if self.vace else [])]
        return Pipeline(sources, stages, self.config.seed)

    # --- discovery and caching -----------------------------------------------------------------------
    def has_concepts(self) -> bool:
        """Whether the dataset config holds a dataset of this loader's type (validation is optional)."""
        return bool(self.datasets)

    def prepare(self) -> None:
        """Find every sample, decide its bucket and encode it once. Raises `CachingStopped` between samples
        once `should_stop()` is true."""
        raw: list[E2VItem] = []
        for index, dataset in enumerate(self.datasets):
            if not Path(dataset.data_root).is_dir():
                raise UserError(f"E2V data_root '{dataset.data_root}' (datasets[{index}]) is not a folder: fix the dataset JSON")
            samples, skipped = discover_e2v_samples(dataset.data_root, dataset.elements)
            for path, reason in skipped:
                self.skips.record(path, "missing element", reason)
            for sample in samples:
                raw += self._sources(index, len(raw), dataset, sample)
        with self.placement.caching():
            self.items = self._encode_all(raw)
            self.unconditional = unconditional_embeds(self.model, self.config, self.placement)
        if not self.items:
            raise UserError(f"no usable E2V sample ({self.skips.summary()}): check the dataset folder and element suffixes")
        self.lost = LostItems([i.bucket for i in self.items], [i.position for i in self.items], self.config.seed,
                              self.skips)
        logger.info("%d E2V samples in %d buckets (pathways: %s, target layout: %s)", len(self.items),
                    len({i.bucket for i in self.items}), self.e2v_type, self.layout)

    def _encode_all(self, raw: list[E2VItem]) -> list[E2VItem]:
        """Every item's cache entries filled (encoder by encoder: captions, VAE, CLIP); the usable items."""
        share = raw[self.dist.rank::self.dist.world_size] if self.dist.enabled else raw
        prefill(share, lambda item: phase_stops(self.pipelines[item.dataset].modules), self._run, self._variants,
                self.placement, self.should_stop, self.dist.is_main, self.on_progress)
        if self.dist.enabled:  # each rank fills its share of the cache first
            for item in until_stopped(share, self.should_stop):
                self._bucket(item, SkipCounter())
            self.dist.barrier()
        items = []
        for item in caching_steps(raw, self.should_stop, "caching E2V", "sample", self.dist.is_main, self.on_progress):
            if self._bucket(item, self.skips):
                items.append(item)
                self.caption_encoders[item.dataset].check_length(item.source["caption"], item.source["video_path"],
                                                                 self.skips)
        return items

    def _sources(self, index: int, position: int, dataset: E2VDatasetConfig, sample) -> list[E2VItem]:
        """The items of a sample: one per frame window of its video (HEAD: one), the references the same."""
        try:
            caption = read_caption(sample.caption_path) if sample.caption_path else ""
            paths = {name: str(p) for name, p in sample.element_images.items() if p is not None}
            fps = {name: file_fingerprint(p) for name, p in paths.items()}
            video_fp = file_fingerprint(sample.video)
            present = {name: True for name in paths}
            # P: reference frames inside the pixel clip (A2); SkyReels-V3's references are not in it
            p = sum(r for _, r in layout_elements(dataset.elements, present)) if self.uses_vae and not self.appends else 0
            mask = self._mask(sample)
            control = {"control_fp": control_fingerprint(sample.video)} if self.vace else {}
            windows = e2v_windows(self.planner, self.decoders[index], dataset, sample.video, video_fp, p)
        except OSError as e:
            self.skips.record(sample.video, "unreadable file", str(e))
            return []
        except DataError as e:
            self.skips.record_error(e)
            return []
        source = {"sample_id": sample.id, "video_path": str(sample.video), "caption": caption, "element_paths": paths,
                  "video_fp": video_fp, "element_fps": fps, "num_reference_frames": p, **mask, **control,
                  **{f"fp_{e.name}": fps.get(e.name, "") for e in dataset.elements}}
        return [E2VItem(index, position + j, {**source, "window": window}) for j, window in enumerate(windows)]

    def _mask(self, sample) -> dict[str, str]:
        """A sample's mask fields (masked training); a missing mask is a `DataError` (skipped and counted)."""
        if not self.config.masked_training:
            return {"mask_path": "", "mask_fp": ""}
        if sample.mask_path is None:
            raise DataError(sample.video, f"masked_training is on and it has no {sample.id}-masklabel.png or .mp4 "
                            "beside it", MISSING_MASK)
        try:
            return {"mask_path": str(sample.mask_path), "mask_fp": file_fingerprint(sample.mask_path)}
        except OSError as e:
            raise DataError(sample.mask_path, f"cannot read the mask ({e})", BAD_MASK) from None

    def _run(self, item: E2VItem, epoch: int, stop: int | None = None) -> dict[str, Any]:
        pipeline = self.pipelines[item.dataset]
        return pipeline.run(item.source, pipeline.context(item.position, epoch), stop=stop)

    def _variation(self, item: E2VItem, epoch: int) -> int:
        """Which cached variant an epoch uses (random frame conditioning keeps several)."""
        return max((stage.variation_for(self.pipelines[item.dataset].context(item.position, epoch))
                    for stage in self.pipelines[item.dataset].modules), default=0)

    def _bucket(self, item: E2VItem, skips: SkipCounter) -> bool:
        """Encode the item (every cached variant, so no epoch runs an encoder) and set its bucket."""
        variants = self._variants(item)
        try:
            fields = self._run(item, 0)
            for variation in range(1, variants):
                self._run(item, variation)
        except DataError as e:
            skips.record_error(e)
            return False
        # K: the latent frames the references take (A2: leading ones; SkyReels-V3: N appended ones)
        k = fields["reference_mean"].shape[1] if self.appends else reference_latent_frames(item.source["num_reference_frames"])
        if self.vace:  # one leading latent frame per reference image
            k = len(reference_names(self.datasets[item.dataset], item.source["element_paths"]))
        clips = tuple(name for name in self._clip_names(item) if fields[f"clip_{name}"].shape[0])
        item.bucket = (item.dataset, int(fields["num_frames"]), k, clips, *self._resolution(self.datasets[item.dataset]))
        return True

    def _variants(self, item: E2VItem) -> int:
        """How many cached variants the item's stages hold (the most of any stage)."""
        return max((stage.variations for stage in self.pipelines[item.dataset].modules), default=1)

    def _clip_names(self, item: E2VItem) -> list[str]:
        if not self.uses_clip:
            return []
        dataset = self.datasets[item.dataset]
        present = {n: True for n in item.source["element_paths"]}
        in_clip = {e.name for e in dataset.elements if e.in_clip}
        return [name for name, _ in layout_elements(dataset.elements, present) if name in in_clip]

    def fingerprint(self) -> str:
        sources = [{k: v for k, v in i.source.items() if k != "window" or v is not None} for i in self.items]
        return hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()

    # --- epochs and batches --------------------------------------------------------------------------
    def epoch_batches(self, epoch: int) -> list[list[int]]:
        return epoch_batches([_SortableBucket(i.bucket) for i in self.items], self.batch_size, self.config.seed, epoch,
                             self.dist.data_world_size)

    def load_batch(self, indices: list[int], epoch: int) -> dict[str, Any]:
        indices, fields = self.lost.load(indices, epoch, lambda i: self.memo.get(
            (self.items[i].position, self._variation(self.items[i], epoch)), lambda: self._run(self.items[i], epoch)))
        first = self.items[indices[0]]
        dropped = dropped_captions(indices, epoch, self.config.seed, self.caption_dropout)
        batch: dict[str, Any] = {
            "num_frames": int(fields[0]["num_frames"]),
            "reference_latents": first.bucket[2],
            "video_mean": torch.stack([f["video_mean"] for f in fields]),
            "video_std": torch.stack([f["video_std"] for f in fields]),
            "prompt_embeds": prompt_batch([f["prompt_embeds"] for f in fields], dropped, self._empty_prompt_embeds),
            # the texts the rows were encoded from: a trained embedding re-encodes those holding its placeholder
            "captions": ["" if drop else self.caption_encoders[self.items[i].dataset].text(self.items[i].source["caption"])
                         for i, drop in zip(indices, dropped)],
        }
        if self.appends:
            for name in ("reference_mean", "reference_std"):
                batch[name] = torch.stack([f[name] for f in fields])
            chance = self.config.e2v.reference_dropout_probability if self.concept_type == ConceptType.STANDARD else 0
            batch["references_dropped"] = [caption_dropped(self.config.seed, chance, epoch, i, "reference_dropout")
                                           for i in indices]
        elif self.uses_vae:
            for name in ("condition_mean", "condition_std", "pixel_mask"):
                batch[name] = torch.stack([f[name] for f in fields])
        if self.config.masked_training:
            batch["loss_mask"] = torch.stack([f["latent_mask"] for f in fields])
        if self.vace:
            batch["vace_context"] = torch.stack([f["vace_context"] for f in fields])
        if self.uses_clip:
            batch["clip_embeds"] = torch.stack([
                torch.cat([f[f"clip_{name}"] for name in self._clip_names(item)])
                for f, item in zip(fields, (self.items[i] for i in indices))])
        return add_unconditional(batch, self.unconditional, len(indices))

    @property
    def caption_dropout(self) -> float:
        """Validation measures every sample with its caption."""
        return self.config.caption_dropout_probability if self.concept_type == ConceptType.STANDARD else 0.0

    def encoded_captions(self) -> list[str]:
        """The text each item's caption is encoded from (after prepare())."""
        return [self.caption_encoders[item.dataset].text(item.source["caption"]) for item in self.items]

    def item_group(self, index: int) -> str:
        """The dataset an item came from, by its data_root's folder name."""
        return Path(self.datasets[self.items[index].dataset].data_root).name or f"dataset{self.items[index].dataset}"

    def _empty_prompt_embeds(self) -> torch.Tensor:
        if not hasattr(self, "_empty_embeds"):
            self._empty_embeds = encode_caption(self.model, "")
        return self._empty_embeds

    # --- step inputs (docs/e2v.md §6) ------------------------------------------------------------------------
    def assemble(self, batch: dict[str, Any], random: StepRandom) -> StepInputs:
        inputs = self._step_inputs(batch, lambda shape: random.randn(shape), self.config.e2v.vae_posterior)
        inputs.unconditional_embeds = unconditional_on(batch, self.model.train_device)
        return inputs

    def _step_inputs(self, batch: dict[str, Any], noise, vae_posterior: str) -> StepInputs:
        """`noise(shape)` -> (B, *shape) draws for the posterior samples (zeros give the posterior mode)."""
        model, device = self.model, self.model.train_device
        k = batch["reference_latents"]
        video_mean = batch["video_mean"].to(device)
        video = model.normalize_latents(video_mean + batch["video_std"].to(device)
                                        * noise(tuple(video_mean.shape[1:])).to(device))
        if self.vace:
            return self._vace_step_inputs(batch, video, k)
        if self.appends:
            return StepInputs(x0=video, prompt_embeds=batch["prompt_embeds"].to(device),
                              payload=self._appended_payload(batch, noise, vae_posterior),
                              captions=batch.get("captions"))
        condition_z = None
        if self.uses_vae:
            mean = batch["condition_mean"].to(device)
            if vae_posterior == "sample":  # A2's inference draws a sample; diffusers takes the mode
                mean = mean + batch["condition_std"].to(device) * noise(tuple(mean.shape[1:])).to(device)
            condition_z = model.normalize_latents(mean)
        x0 = torch.cat([condition_z[:, :, :k], video], dim=2) if self.layout == "separate" and k else video
        b, c, t, h, w = x0.shape
        condition = None
        if model.variant.channel_concat_condition:
            if condition_z is None:  # CLIP pathway only: the VAE channels carry nothing
                condition = x0.new_zeros(b, 4 + c, t, h, w)
            else:
                condition = torch.cat([self.latent_mask(batch, h, w).to(device), condition_z], dim=1)
        clip = batch.get("clip_embeds")
        payload = ConditionPayload(
            condition=condition,
            clip_embeds=clip.to(device) if clip is not None and model.variant.has_clip_branch else None,
            # TI2V has no mask channels: the reference latents are clean tokens with timestep 0 (§8)
            clean_frames=k if model.variant.expand_timesteps else 0,
            loss_frame_weights=latent_loss_mask(t, k, self.config.e2v.loss_on_reference_frames),
            loss_mask=batch["loss_mask"].to(device) if "loss_mask" in batch else None,
        )
        return StepInputs(x0=x0, prompt_embeds=batch["prompt_embeds"].to(device), payload=payload,
                          captions=batch.get("captions"))

    def _vace_step_inputs(self, batch: dict[str, Any], video: torch.Tensor, r: int) -> StepInputs:
        """VACE: x0 = [the R references' latents, the clip's], as DiffSynth's VACE training builds it (and as the
        sampler's latents carry them); the context holds the same reference latents, and its R leading frames stay
        out of the loss (`dropped_frames`), as diffusers' and ComfyUI's samplers trim them."""
        device = video.device
        context = batch["vace_context"].to(device)
        x0 = torch.cat([context[:, : video.shape[1], :r], video], dim=2)
        loss_mask = batch.get("loss_mask")
        if loss_mask is not None:  # the video's mask; the reference frames have weight 0 anyway
            loss_mask = torch.cat([loss_mask.new_ones(*loss_mask.shape[:2], r, *loss_mask.shape[3:]), loss_mask], 2)
        payload = ConditionPayload(control=context, control_scale=self.config.vace_context_scale, dropped_frames=r,
                                   loss_mask=loss_mask.to(device) if loss_mask is not None else None)
        return StepInputs(x0=x0, prompt_embeds=batch["prompt_embeds"].to(device), payload=payload,
                          captions=batch.get("captions"))

    def _appended_payload(self, batch: dict[str, Any], noise, vae_posterior: str) -> ConditionPayload:
        """§9: the references' normalised latents (a posterior sample or mode, as `vae_posterior`), zero-padded to
        SkyReels-V3's slots after the video's latents; the whole video is in the loss, the references' prediction
        is cut off (`VariantConditioning.video_prediction`)."""
        device = self.model.train_device
        mean = batch["reference_mean"].to(device)
        if vae_posterior == "sample":
            mean = mean + batch["reference_std"].to(device) * noise(tuple(mean.shape[1:])).to(device)
        slots = pad_reference_slots(self.model.normalize_latents(mean), SKYREELS_V3_SLOTS)
        # reference dropout: all-zero slots, the condition of image guidance's unconditional branch
        dropped = torch.tensor(batch.get("references_dropped", [False] * len(slots)), device=device)
        slots = torch.where(dropped[:, None, None, None, None], torch.zeros_like(slots), slots)
        return ConditionPayload(appended=slots, loss_mask=batch["loss_mask"].to(device) if "loss_mask" in batch else None)

    def latent_mask(self, batch: dict[str, Any], h: int, w: int) -> torch.Tensor:
        """(B, 4, T, h, w): the folded frame mask (§4), zeros when `concatenate_mask` is off."""
        masks = torch.stack([fold_mask(m, h, w, self.model.variant.vae_scale_temporal) for m in batch["pixel_mask"]])
        return masks if self.datasets[0].processors.vae.concatenate_mask else torch.zeros_like(masks)

    def sampling_options(self) -> E2VSamplingOptions:
        """The first dataset's layout and pathways, and the config's transparent background, so samples during
        training condition like the data."""
        d = self.datasets[0]
        return E2VSamplingOptions(dataset_layout(d), self.uses_vae, self.uses_clip, self.layout,
                                  tuple(d.processors.clip.resolution), tuple(self.background),
                                  self.config.e2v.reference_layout)

    # --- inspection (scripts/preview_e2v.py) -----------------------------------------------------------------
    def preview(self, sample_id: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Exactly what the trainer feeds the transformer for one sample, with posterior modes:
        ({mask, condition_latents, clip_embeds, target_latents; vace_context on VACE}, reference mini-video
        (3, P, H, W))."""
        matches = [i for i, item in enumerate(self.items) if item.source["sample_id"] == sample_id]
        if not matches:
            known = ", ".join(sorted(i.source["sample_id"] for i in self.items)[:10])
            raise UserError(f"no usable E2V sample '{sample_id}' (known: {known}); see the log for skipped ones")
        batch = self.load_batch(matches[:1], 0)
        batch.pop("references_dropped", None)  # the sample's own references, whatever its dropout draw
        inputs = self._step_inputs(batch, lambda shape: torch.zeros(1, *shape), "mode")
        _, _, t, h, w = inputs.x0.shape
        out = {"target_latents": inputs.x0[0].cpu()}
        if self.appends:  # §9: the reference slots as the transformer sees them, after the video's latents
            out["condition_latents"] = inputs.payload.appended[0].cpu()
        elif self.uses_vae:
            out["mask"] = self.latent_mask(batch, h, w)[0]
            out["condition_latents"] = self.model.normalize_latents(batch["condition_mean"])[0]
        if "clip_embeds" in batch:
            out["clip_embeds"] = batch["clip_embeds"][0]
        if self.vace:  # the references are inside the context (its R leading frames)
            out["vace_context"] = batch["vace_context"][0]
        item = self.items[matches[0]]
        dataset = self.datasets[item.dataset]
        references = torch.zeros(3, 0, h, w)
        if self.vace:
            height, width = self._resolution(dataset)
            images = read_references(dataset, item.source["element_paths"], self.background, self.max_pixels)
            references = torch.stack(placed_references(images, height, width), 1) if images else references
        if self.uses_vae:
            fields = LoadReferences(dataset, *self._resolution(dataset), self.background,
                                    max_pixels=self.max_pixels).process(item.source, None)
            references = torch.cat([frame[:, None].expand(-1, repeat, -1, -1)
                                    for frame, repeat in zip(fields["reference_frames"].unbind(1), fields["repeats"])], 1)
        return out, references


@dataclasses.dataclass(frozen=True, order=True)
class _SortableBucket:
    key: tuple
