"""Encoding ahead: what the run's samples encode, encoded right after caching, then UMT5 and CLIP freed.

With latent caching nothing but the samples needs UMT5 (10.6 GiB in bf16) or CLIP once the cache is filled, and
their prompts and images are known when the run starts. So, while the encoders are still loaded:
1. each enabled sample's generation runs up to its first denoising step (`WanModelSampler.encode_inputs`), with
   the VAE and CLIP on the device: its images are encoded exactly as sampling encodes them, its prompts only noted;
2. CLIP is freed; the noted prompts and the empty caption (caption dropout's) are encoded with UMT5 placed alone;
3. UMT5 is freed (`WanModel.release_encoders`: host and device memory given back).
Everything encoded is kept by the model (`WanModel.encoded`) and in the cache folder (`CachedEncodings`:
safetensors keyed by the encoder's identity and the exact input), so a restart with the same samples runs neither
encoder for them. Kept loaded: UMT5 while an embedding trains (captions holding its placeholder are encoded in each
step), CLIP with `sample_metrics` (it measures each sample). Without latent caching every step encodes: nothing is
encoded ahead or freed. A sample added later loads its encoder again (model/encoder_residency.py).
"""
from __future__ import annotations

import logging

import torch

from modules.dataLoader.cache import DiskCache, fingerprint
from modules.dataLoader.encoder_placement import placement_for
from modules.dataLoader.WanBaseDataLoader import EncoderIdentities
from modules.model.WanModel import WanModel
from modules.util.enum import EncoderDevice
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


class CachedEncodings:
    """`EncodedInputs`' store in the cache folder: a key becomes a cache key with its encoder's identity (weights,
    dtype, fp8) and the device it ran on; only the writing rank writes."""

    def __init__(self, cache: DiskCache, model: WanModel, text_device: torch.device, writes: bool):
        identities = EncoderIdentities.of(model)
        self.cache, self.writes = cache, writes
        self.identity = {"prompts": ["encoded ahead", identities.text, text_device.type],
                         "images": ["encoded ahead", identities.clip]}

    def _key(self, key: str) -> str:
        return fingerprint(*self.identity[key.split("-")[0]], key)

    def get(self, key: str) -> dict[str, torch.Tensor] | None:
        return self.cache.get(self._key(key))

    def put(self, key: str, tensors: dict[str, torch.Tensor]) -> None:
        if self.writes:
            self.cache.put(self._key(key), tensors)


def encode_ahead(config, model: WanModel, sampler, samples: list, writes: bool, keep_text: bool) -> None:
    """Encode what `samples` need with `sampler` (None on a rank that does not sample: then only the empty caption),
    keep it, and free the encoders the run does not keep (`keep_text`: a trained embedding)."""
    if not config.latent_caching:
        return
    placement = placement_for(config, model)
    text_device = torch.device("cpu") if config.text_encoder_caching_device == EncoderDevice.CPU else \
        model.train_device
    encoded, residency = model.encoded, model.residency
    encoded.store = CachedEncodings(DiskCache(config.cache_dir), model, text_device, writes)
    encoded.recording = True
    try:
        with placement.caching():
            if sampler is not None and samples:
                placement.use("vae")  # UMT5 off the device: the samples' images need the VAE and CLIP
                residency.before_use = placement.bring
                encoded.deferring = True
                for index, sample in enumerate(samples):
                    try:
                        sampler.encode_inputs(sample)
                    except UserError as e:  # said again when the sample is due, and skipped then
                        logger.info("sample %d not encoded ahead: %s", index, e)
                encoded.deferring = False
            if not config.sample_metrics:
                model.release_encoders(["clip"])
            residency.before_use = placement.use
            prompts = [*encoded.deferred, ("",)]
            for batch in prompts:
                model.encode_prompts(list(batch), with_embedding=False)
            logger.info("%d sample prompt batch(es) and %d sample image input(s) encoded ahead", len(prompts) - 1,
                        sum(key.startswith("images-") for key in encoded.kept))
            if not keep_text:
                model.release_encoders(["text"])
    finally:
        encoded.recording = encoded.deferring = False
        encoded.deferred.clear()
        residency.before_use = None
