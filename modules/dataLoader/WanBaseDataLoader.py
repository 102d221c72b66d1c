"""The T2V / I2V data path: concepts -> decoded clips -> buckets -> encoded, cached tensors -> batches.

With `latent_caching` on, `prepare()` encodes every sample once (VAE posterior mean/std, UMT5 embeds,
and for image-conditioned models the first-frame condition and CLIP embeds) into a disk cache keyed by
a fingerprint of everything that changes those tensors; epochs then only read the cache, so no encoder
runs after the first pass. Epoch order is a pure function of (seed, epoch), which makes resume exact.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from modules.dataLoader.batching import encode_caption, epoch_batches, prompt_batch
from modules.dataLoader.buckets import Bucket, area_resolutions, choose_bucket
from modules.dataLoader.cache import DiskCache, file_fingerprint, fingerprint
from modules.dataLoader.discovery import RawSample, discover_concept
from modules.dataLoader.errors import TOO_FEW_FRAMES, DataError
from modules.dataLoader.frames import largest_4k1, resize_and_crop, to_tensor
from modules.dataLoader.skips import SkipCounter
from modules.dataLoader.video_io import read_video_frames
from modules.model.WanModel import WanModel
from modules.modelSetup.conditioning import condition_clip, frame_mask
from modules.modelSetup.step_inputs import StepInputs, StepRandom
from modules.util.config.loading import load_concepts
from modules.util.config.train_config import ConceptConfig, TrainConfig
from modules.util.distributed import DistributedContext
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

PREPROCESS_VERSION = 1  # bump when decoding/preprocessing changes what a cache entry holds


def component_fingerprint(folder: Path) -> str:
    """Identity of a model component without hashing gigabytes: its config plus each file's size and mtime."""
    parts = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            stat = path.stat()
            parts.append((path.relative_to(folder).as_posix(), stat.st_size, stat.st_mtime_ns))
    return fingerprint(parts)


@dataclasses.dataclass
class TrainingItem:
    sample: RawSample
    bucket: Bucket
    latent_key: str
    text_key: str


class WanBaseDataLoader:
    def __init__(self, config: TrainConfig, model: WanModel, skips: SkipCounter | None = None,
                 dist: DistributedContext | None = None):
        self.config = config
        self.dist = dist or DistributedContext()
        self.batch_size = config.batch_size * self.dist.world_size  # the global batch; ranks take shares
        self.model = model
        self.skips = skips if skips is not None else SkipCounter()
        self.cache = DiskCache(config.cache_dir)
        self.items: list[TrainingItem] = []
        self.fps = config.fps or model.variant.fps
        height, width = config.resolution
        self.resolutions = area_resolutions(height * width) if config.aspect_bucketing else [(height, width)]
        self.uses_image_condition = model.variant.channel_concat_condition
        self.uses_clip = self.uses_image_condition and model.variant.has_clip_branch and model.image_encoder is not None
        self._encoder_calls = 0
        self._memory: dict[str, dict[str, torch.Tensor]] = {}  # the uncached path's per-epoch store
        model_dir = model.model_dir
        self._latent_identity = [PREPROCESS_VERSION, component_fingerprint(model_dir / "vae"), str(model.vae.dtype),
                                 self.fps, config.frames, self.resolutions, self.uses_image_condition]
        if self.uses_clip:
            self._latent_identity.append(component_fingerprint(model_dir / "image_encoder"))
        self._text_identity = [PREPROCESS_VERSION, component_fingerprint(model_dir / "text_encoder"),
                               component_fingerprint(model_dir / "tokenizer"), str(model.text_encoder.dtype)]

    @property
    def encoder_calls(self) -> int:
        """How many times an encoder (VAE, UMT5, CLIP) ran; tests check that epoch 2 adds none."""
        return self._encoder_calls

    # --- discovery and caching ---------------------------------------------------------------------
    def concepts(self) -> list[ConceptConfig]:
        concepts = self.config.concepts
        if isinstance(concepts, str):
            concepts = load_concepts(concepts)
        enabled = [c for c in concepts if c.enabled]
        if not enabled:
            raise UserError("config key 'concepts' has no enabled concept: add {\"path\": \"my_dataset\"}")
        return enabled

    def prepare(self) -> None:
        """Find every sample, decide its bucket and (with caching) encode it once."""
        raw: list[tuple[RawSample, int]] = []
        for concept in self.concepts():
            if not Path(concept.path).exists():
                raise UserError(f"concept path '{concept.path}' does not exist: fix concepts[].path")
            try:
                found = discover_concept(concept.path, concept.include_subdirectories)
            except DataError as e:
                raise UserError(str(e)) from None
            if not found:
                logger.warning("concept %s holds no video or image", concept.path)
            raw.extend((s, concept.repeats) for s in found)
        if self.config.clear_cache_before_training:
            logger.info("clear_cache_before_training: re-encoding every sample")

        clear = self.config.clear_cache_before_training
        if self.dist.enabled:  # each rank encodes its share of the cache misses, then all read the cache
            for sample, _ in tqdm(raw[self.dist.rank::self.dist.world_size], desc=f"caching (rank {self.dist.rank})",
                                  unit="clip", disable=not raw):
                self._prepare_item(sample, SkipCounter(), clear)
            self.dist.barrier()
            clear = False
        self.items = []
        for sample, repeats in tqdm(raw, desc="caching" if self.config.latent_caching else "scanning", unit="clip",
                                    disable=not raw or not self.dist.is_main):
            item = self._prepare_item(sample, self.skips, clear)
            if item is not None:
                self.items.extend([item] * repeats)
        if not self.items:
            raise UserError(f"no usable training sample in the concepts ({self.skips.summary()}): check the dataset")
        logger.info("%d training items in %d buckets", len(self.items), len({i.bucket for i in self.items}))

    def _prepare_item(self, sample: RawSample, skips: SkipCounter, clear: bool) -> TrainingItem | None:
        try:
            media_id = file_fingerprint(sample.media_path)
        except OSError as e:
            skips.record(sample.media_path, "unreadable file", str(e))
            return None
        latent_key = fingerprint("latent", media_id, *self._latent_identity)
        text_key = fingerprint("text", sample.caption, *self._text_identity)
        if clear:
            self.cache.delete(latent_key)
            self.cache.delete(text_key)
        bucket = self._cached_bucket(latent_key) if self.config.latent_caching else None
        if bucket is None:
            try:
                bucket, tensors = self._decode(sample)
            except DataError as e:
                skips.record_error(e)
                return None
            if self.config.latent_caching:
                self.cache.put(latent_key, self._encode_latents(tensors, bucket),
                               {"frames": bucket.frames, "height": bucket.height, "width": bucket.width})
        if self.config.latent_caching and text_key not in self.cache:
            self.cache.put(text_key, {"prompt_embeds": self._encode_text(sample.caption)})
        return TrainingItem(sample=sample, bucket=bucket, latent_key=latent_key, text_key=text_key)

    def _cached_bucket(self, key: str) -> Bucket | None:
        path = self.cache.path_for(key)
        if not path.is_file():
            return None
        try:
            with safe_open(str(path), "pt") as f:
                meta = f.metadata()
            return Bucket(int(meta["frames"]), int(meta["height"]), int(meta["width"]))
        except Exception as e:  # damaged entry: re-encode it
            logger.warning("cache file %s is corrupt (%s: %s); deleting it and encoding the sample again", path,
                           type(e).__name__, e)
            self.cache.delete(key)
            return None

    def _decode(self, sample: RawSample) -> tuple[Bucket, torch.Tensor]:
        """Decoded, resampled, cropped clip as (3, F, H, W) in [-1, 1], with its bucket."""
        frames, _ = read_video_frames(sample.media_path, target_fps=self.fps, max_frames=self.config.frames)
        count = largest_4k1(len(frames))  # short clips train on the largest 4k+1 they hold
        bucket = choose_bucket(frames.shape[1], frames.shape[2], len(frames), self.resolutions, [count])
        if bucket is None:
            raise DataError(sample.media_path, f"only {len(frames)} frames", TOO_FEW_FRAMES)
        clip = resize_and_crop(frames[:bucket.frames], bucket.height, bucket.width)
        return bucket, to_tensor(clip)

    # --- encoding ------------------------------------------------------------------------------------
    def _encode_latents(self, video: torch.Tensor, bucket: Bucket) -> dict[str, torch.Tensor]:
        self._encoder_calls += 1
        mean, std = self.model.encode_video(video[None])
        tensors = {"latent_mean": mean[0], "latent_std": std[0]}
        if self.uses_image_condition:
            # Plain I2V: condition on the first frame (E2V_SPEC §3 with one reference).
            cond_mean, _ = self.model.encode_video(condition_clip(video[:, :1], bucket.frames)[None])
            tensors["condition_latents"] = self.model.normalize_latents(cond_mean)[0]
        if self.uses_clip:
            first = ((video[:, 0].permute(1, 2, 0) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()
            tensors["clip_embeds"] = self.model.encode_images([first])[0]
        return tensors

    def _encode_text(self, caption: str) -> torch.Tensor:
        self._encoder_calls += 1
        return encode_caption(self.model, caption)

    def _item_tensors(self, item: TrainingItem) -> dict[str, torch.Tensor]:
        if self.config.latent_caching:
            latents = self.cache.get(item.latent_key)
            text = self.cache.get(item.text_key)
            if latents is None or text is None:  # deleted or corrupt since prepare(): encode again
                _, video = self._decode(item.sample)
                latents = self._encode_latents(video, item.bucket)
                text = {"prompt_embeds": self._encode_text(item.sample.caption)}
                self.cache.put(item.latent_key, latents, {"frames": item.bucket.frames, "height": item.bucket.height,
                                                          "width": item.bucket.width})
                self.cache.put(item.text_key, text)
            return {**latents, **text}
        _, video = self._decode(item.sample)
        return {**self._encode_latents(video, item.bucket), "prompt_embeds": self._encode_text(item.sample.caption)}

    def fingerprint(self) -> str:
        """Identity of the prepared dataset (for resume checks)."""
        return hashlib.sha256(json.dumps([i.latent_key + i.text_key for i in self.items]).encode()).hexdigest()

    # --- epochs and batches ----------------------------------------------------------------------------
    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """Item indices per global batch of `epoch`, a pure function of (seed, epoch)."""
        return epoch_batches([i.bucket for i in self.items], self.batch_size, self.config.seed, epoch,
                             self.dist.world_size)

    def load_batch(self, indices: list[int], epoch: int) -> dict[str, torch.Tensor]:
        per_item = [self._item_tensors(self.items[i]) for i in indices]
        batch: dict[str, torch.Tensor] = {}
        for name in per_item[0]:
            if name != "prompt_embeds":
                batch[name] = torch.stack([t[name] for t in per_item])
        batch["prompt_embeds"] = prompt_batch([t["prompt_embeds"] for t in per_item], indices, epoch, self.config.seed,
                                              self.config.caption_dropout_probability, self._empty_prompt_embeds)
        if self.uses_image_condition:
            bucket = self.items[indices[0]].bucket
            _, _, t, h, w = batch["latent_mean"].shape
            mask = frame_mask(bucket.frames, 1, h, w, self.model.variant.vae_scale_temporal)
            batch["condition_mask"] = mask[None].expand(len(indices), -1, -1, -1, -1)
        return batch

    def assemble(self, batch: dict[str, torch.Tensor], random: StepRandom) -> StepInputs:
        """Model inputs of a batch: a fresh posterior sample per step (from each sample's stream)."""
        device = self.model.train_device
        mean, std = batch["latent_mean"].to(device), batch["latent_std"].to(device)
        x0 = self.model.normalize_latents(mean + std * random.randn(tuple(mean.shape[1:])).to(device))
        condition = None
        if self.uses_image_condition:
            condition = torch.cat([batch["condition_mask"], batch["condition_latents"]], dim=1).to(device)
        clip = batch.get("clip_embeds")
        return StepInputs(x0=x0, prompt_embeds=batch["prompt_embeds"].to(device), condition=condition,
                          clip_embeds=clip.to(device) if clip is not None else None)

    def _empty_prompt_embeds(self) -> torch.Tensor:
        key = fingerprint("text", "", *self._text_identity)
        cached = self.cache.get(key)
        if cached is None:
            cached = {"prompt_embeds": self._encode_text("")}
            self.cache.put(key, cached)
        return cached["prompt_embeds"]
