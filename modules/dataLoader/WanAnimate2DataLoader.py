"""Wan2.2-Animate-2's data: the plain loader (concepts, windows, buckets, caching, epoch order, collation: all
`WanBaseDataLoader`'s) plus each clip's driving video, reference image and driving caption
(`animate2_triplets.py` finds them, `animate2_modules.py` encodes them), and the step inputs of the two passes.

What a step feeds (diffusers' Animate-2 pipeline, first segment; `model/animate2.py`):
- generated stream: x0 = [reference latent | clip latents], (B, C, 1 + F, h, w); its condition channels
  [mask | latents] with the mask 1 on the reference slot, 0 after it, and the latents [reference | VAE of F black
  frames]; the reference slot is noised like the rest and left out of the loss (`dropped_frames` 1); CLIP of the
  reference image; the clip's caption.
- driving stream: its latents (posterior mode), condition [all-ones mask | the same latents], CLIP of driving
  frame 0 and the driving caption's embeddings.
A clip without its driving video or reference image is skipped and counted by reason; so is one whose driving
video is shorter than the clip's window.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from modules.dataLoader.animate2_modules import (
    DecodeDrivingInputs,
    EmptyFrames,
    EncodeAnimate2Clip,
    EncodeDrivingCaption,
)
from modules.dataLoader.animate2_triplets import is_stream_file, triplet_for
from modules.dataLoader.batching import prompt_batch
from modules.dataLoader.cache import file_fingerprint, fingerprint
from modules.dataLoader.discovery import RawSample
from modules.dataLoader.encoding_modules import EncodePosterior
from modules.dataLoader.errors import MISSING_FILE
from modules.dataLoader.WanBaseDataLoader import EncoderIdentities, WanBaseDataLoader
from modules.model.animate2 import REFERENCE_SLOTS, DrivingStream, condition_channels
from modules.model.step_inputs import StepInputs, StepRandom
from modules.util.errors import UserError

class WanAnimate2DataLoader(WanBaseDataLoader):
    own_condition = True
    side_sources = ("driving_path", "reference_path", "driving_caption")

    def __init__(self, config, model, *args, **kwargs):
        if model.image_encoder is None:
            raise UserError(f"base_model_name '{config.base_model_name}' is Wan2.2-Animate-2 but has no "
                            "image_encoder/ (its CLIP tower): use the full Animate-2 folder")
        self._untripled: set[Path] = set()
        super().__init__(config, model, *args, **kwargs)

    @staticmethod
    def side_files(path: Path) -> bool:
        return is_stream_file(path)

    def _side_modules(self, identities: EncoderIdentities, clip_module: str, per_epoch: bool):
        model, counter, placement = self.model, self.counter, self.placement
        video = [DecodeDrivingInputs(self.augmentation, clip_module, self.config.transparent_background, per_epoch),
                 EncodePosterior(model, "driving_frames", "driving", identities.vae, counter, placement),
                 EncodePosterior(model, "reference_frames", "reference", identities.vae, counter, placement),
                 EmptyFrames(),
                 EncodePosterior(model, "empty_frames", "empty", identities.vae, counter, placement),
                 EncodeAnimate2Clip(model, identities.clip, counter, placement)]
        outputs = ["driving_mean", "reference_mean", "empty_mean", "clip_embeds", "driving_clip_embeds"]
        text = [EncodeDrivingCaption(model, identities.text, strip_prefixes=False, counter=counter,
                                     placement=placement)]
        return video, outputs, text

    def _side_fields(self, sample: RawSample) -> dict[str, Any] | None:
        found = triplet_for(sample.media_path)
        if isinstance(found, str):
            if sample.media_path not in self._untripled:  # once per clip, not per window
                self._untripled.add(sample.media_path)
                self.skips.record(sample.media_path, MISSING_FILE, f"Animate-2 needs its inputs beside it: {found}")
            return None
        try:
            files = fingerprint([file_fingerprint(found.driving), file_fingerprint(found.reference)])
        except OSError as e:
            self.skips.record(sample.media_path, MISSING_FILE, f"cannot read its driving video or reference ({e})")
            return None
        return {"control_fp": files, "driving_path": str(found.driving), "reference_path": str(found.reference),
                "driving_caption": found.driving_caption}

    def _side_batch(self, batch: dict[str, Any], fields: list[dict[str, Any]], indices: list[int]) -> None:
        normalize = self.model.normalize_latents
        for name in ("driving", "reference", "empty"):
            batch[f"{name}_latents"] = normalize(torch.stack([f[f"{name}_mean"] for f in fields]))
        batch["clip_embeds"] = torch.stack([f["clip_embeds"] for f in fields])
        batch["driving_clip_embeds"] = torch.stack([f["driving_clip_embeds"] for f in fields])
        # the driving caption is never dropped: it names the stream's role, not the clip's content
        batch["driving_prompt_embeds"] = prompt_batch([f["driving_prompt_embeds"] for f in fields],
                                                      [False] * len(fields), self._empty_prompt_embeds)

    def assemble(self, batch: dict[str, torch.Tensor], random: StepRandom) -> StepInputs:
        inputs = super().assemble(batch, random)
        device = inputs.x0.device
        reference = batch["reference_latents"].to(device)
        driving = batch["driving_latents"].to(device)
        condition, driving_condition = condition_channels(reference, batch["empty_latents"].to(device), driving)
        b, _, _, h, w = inputs.x0.shape
        payload = inputs.payload
        loss_mask = payload.loss_mask
        if loss_mask is not None:  # masked training: the slot is out of the loss anyway
            loss_mask = torch.cat([loss_mask.new_zeros(b, 1, REFERENCE_SLOTS, h, w), loss_mask], dim=2)
        stream = DrivingStream(driving, driving_condition, batch["driving_prompt_embeds"].to(device),
                               batch["driving_clip_embeds"].to(device))
        payload = dataclasses.replace(payload, condition=condition, clip_embeds=batch["clip_embeds"].to(device),
                                      dropped_frames=REFERENCE_SLOTS, loss_mask=loss_mask, driving=stream)
        return dataclasses.replace(inputs, x0=torch.cat([reference, inputs.x0], dim=2), payload=payload)
