"""Video generation from a (partly trained) WanModel: diffusers' own Wan pipelines over our modules.

Writes an mp4 (or an animated GIF / WebP) and a PNG strip of evenly spaced frames beside it; during training
also the sample's record (`modules/util/sample_record.py`) as a JSON sidecar, which the GUI's viewer reads.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from modules.config.train_config import SampleConfig
from modules.dataLoader.e2v.sampling_options import E2VSamplingOptions
from modules.dataLoader.errors import DataError
from modules.dataLoader.video_io import read_image
from modules.model.reference_slots import check_reference_base
from modules.model.sample_inputs import check_sample_inputs
from modules.model.WanModel import WanModel
from modules.modelSampler.animate2_inputs import generate_animate2
from modules.modelSampler.comfy_workflow import WorkflowModels, build_workflow, unsupported, write_workflow
from modules.modelSampler.e2v_sampling import (
    E2VConditioning,
    build_conditioning,
    build_reference_slots,
    contact_sheet,
    denoise_e2v,
)
from modules.modelSampler.schedulers import sample_scheduler, shift_used
from modules.modelSampler.vace_sampling import build_vace_context
from modules.modelSampler.video_output import check_video_output, write_video_output
from modules.modelSetup.memory import is_placement_managed
from modules.modelSetup.sharding import is_sharded
from modules.util.atomic import atomic_path
from modules.util.errors import UserError
from modules.util.sample_record import SampleRecord
from modules.util.video_write import write_png_strip
from modules.util.write_errors import write_failure

logger = logging.getLogger(__name__)


class WanModelSampler:
    def __init__(self, model: WanModel, e2v: E2VSamplingOptions | None = None,
                 workflow_models: WorkflowModels | None = None):
        self.model = model
        self.workflow_models = workflow_models  # set: a ComfyUI workflow beside every video (comfy_workflow.py)
        self.e2v = e2v or E2VSamplingOptions(use_clip=model.variant.has_clip_branch and model.image_encoder is not None)
        self._encoding_only = False  # inside `encode_inputs`

    def _load_image(self, path: str) -> np.ndarray:
        """(H, W, 3) uint8 read as training reads images: EXIF orientation applied, transparency composited."""
        if not Path(path).is_file():
            raise UserError(f"sample image '{path}' does not exist: fix the sample's image path")
        try:
            return read_image(path, self.e2v.background)
        except DataError as e:
            raise UserError(f"sample image '{path}' cannot be read ({e.reason}): re-save it as PNG or JPEG") from None

    @torch.no_grad()
    def generate(self, sample: SampleConfig, show_progress: bool = True) -> np.ndarray:
        """uint8 frames (F, H, W, 3) for one sample definition."""
        variant = self.model.variant
        check_sample_inputs(variant, sample, label=lambda field: f"the sample's {field}")
        if variant.vace_layers:
            return self.generate_vace(sample, show_progress)
        if variant.name == "animate_2":
            self._move(self.model.train_device)
            return generate_animate2(self.model, sample, self._load_image(sample.image))
        if sample.elements:
            return self.generate_e2v(sample, show_progress)[0]
        if variant.fps_embedding:  # diffusers' SkyReels-V2 T2V/I2V pipelines feed no fps: our loop does
            self._move(self.model.train_device)
            return self._denoise(E2VConditioning(None, None, None, None, 0, 0, np.zeros((0, 1, 1, 3), np.uint8)),
                                 sample, show_progress)
        needs_image = variant.channel_concat_condition
        use_image = bool(sample.image) and (needs_image or variant.expand_timesteps)
        pipe = self.model.pipeline(image_conditioned=use_image)
        if use_image and hasattr(type(pipe), "encode_image"):
            self._keep_clip_of(pipe)
        pipe.scheduler = sample_scheduler(self.model, sample)
        pipe.set_progress_bar_config(disable=not show_progress, leave=False)
        device = self.model.train_device
        self._move(device)
        # Our own text encoding (one place, WanModel.encode_prompts): a loaded or trained embedding applies to
        # prompts holding its placeholder. Equal to the pipeline's own for plain prompts.
        negative = self.model.encode_prompts([sample.negative_prompt or ""]) if sample.cfg_scale > 1 else None
        kwargs = dict(prompt_embeds=self.model.encode_prompts([sample.prompt]), negative_prompt_embeds=negative,
                      num_frames=sample.frames, height=sample.height, width=sample.width,
                      num_inference_steps=sample.steps, guidance_scale=sample.cfg_scale,
                      generator=torch.Generator("cpu").manual_seed(sample.seed), output_type="np")
        if variant.two_experts:
            kwargs["guidance_scale_2"] = sample.cfg_scale
        if use_image:
            image = Image.fromarray(self._load_image(sample.image))
            kwargs["image"] = image.resize((sample.width, sample.height), Image.BICUBIC)
            if sample.last_image:  # first-last-frame: diffusers' pipeline builds [first, zeros, last] and both CLIPs
                last = Image.fromarray(self._load_image(sample.last_image))
                kwargs["last_image"] = last.resize((sample.width, sample.height), Image.BICUBIC)
                if variant.has_clip_branch and not variant.paired_image_tokens:
                    # an I2V base takes both frames' CLIP tokens as 2 x 257 tokens of one sample (as training feeds
                    # them); diffusers' pipeline would feed them as a pair, which only FLF2V's branch reads, and
                    # refuses image_embeds beside an image: this pipeline object encodes them our way
                    pipe.encode_image = lambda images, device=None: self.model.encode_images(
                        [np.asarray(i) for i in images]).flatten(0, 1)[None]
        training = [t.training for t in self.model.transformers()]
        for t in self.model.transformers():
            t.eval()
        try:
            with torch.autocast(device.type, dtype=self.model.train_dtype, enabled=self.model.train_dtype != torch.float32):
                video = pipe(**kwargs).frames[0]  # (F, H, W, 3) floats in [0, 1]
        finally:
            for t, was_training in zip(self.model.transformers(), training):
                t.train(was_training)
        return (np.clip(video, 0, 1) * 255).round().astype(np.uint8)

    @torch.no_grad()
    def generate_e2v(self, sample: SampleConfig, show_progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(generated frames without the reference frames, references as the VAE sees them)."""
        variant = self.model.variant
        if self.e2v.appends_references:
            check_reference_base(variant, "the sampled model")
        elif not (variant.channel_concat_condition or variant.expand_timesteps):
            raise UserError(f"the {variant.name} model has no E2V input layout (use an I2V/TI2V base or an E2V-expanded model)")
        self.e2v.check_frames(sample.frames, len(sample.elements))
        images = [self._load_image(path) for path in sample.elements]
        self._move(self.model.train_device)
        if self.e2v.appends_references:  # SkyReels-V3: one latent frame per reference, after the video's
            conditioning = build_reference_slots(self.model, images, self.e2v.specs(len(images)), sample.height,
                                                 sample.width)
            return self._denoise(conditioning, sample, show_progress), conditioning.references_preview
        conditioning = build_conditioning(
            self.model, images, self.e2v.specs(len(images)), sample.frames, sample.height, sample.width,
            self.e2v.use_vae, self.e2v.use_clip and self.model.image_encoder is not None, self.e2v.clip_resolution)
        return self._denoise(conditioning, sample, show_progress), conditioning.references_preview

    @torch.no_grad()
    def generate_vace(self, sample: SampleConfig, show_progress: bool = True) -> np.ndarray:
        """A VACE model's frames: the sample's control video, mask and reference images (its elements) as the VACE
        context, through the same loop and conditioning as E2V."""
        images = [self._load_image(path) for path in sample.elements]
        self._move(self.model.train_device)
        context = build_vace_context(self.model, sample, images)
        conditioning = E2VConditioning(None, None, None, None, 0, 0, np.zeros((0, 1, 1, 3), np.uint8),
                                       control=context, control_references=len(images))
        return self._denoise(conditioning, sample, show_progress)

    def _denoise(self, conditioning: E2VConditioning, sample: SampleConfig, show_progress: bool) -> np.ndarray:
        was_training = [t.training for t in self.model.transformers()]
        for t in self.model.transformers():
            t.eval()
        try:
            return denoise_e2v(self.model, conditioning, sample, self.e2v.target_layout,
                               progress=(lambda it: tqdm(it, desc="sampling", leave=False)) if show_progress else None)
        finally:
            for t, training in zip(self.model.transformers(), was_training):
                t.train(training)

    def _keep_clip_of(self, pipe) -> None:
        """diffusers' I2V pipeline encodes its image with CLIP itself: through the model's kept encodings, so an
        image encoded ahead (the trainer's samples) needs no CLIP, and a freed CLIP is loaded again for a new one."""
        encode = type(pipe).encode_image

        def encode_image(images, device=None):
            def run(image_encoder):
                pipe.image_encoder = image_encoder
                return encode(pipe, images, device)

            return self.model.encoded_images("diffusers_i2v", images if isinstance(images, list) else [images], run)

        pipe.encode_image = encode_image

    def _move(self, device: torch.device) -> None:
        # freed encoders stay freed (what samples need was encoded ahead); when only encoding (`encode_inputs`) the
        # transformers stay where they are and the encoders are placed as they are used
        encoders = [] if self._encoding_only else [self.model.loaded_encoder("text"), self.model.loaded_encoder("clip")]
        transformers = [] if self._encoding_only else self.model.transformers()
        for module in (*encoders, self.model.vae, *transformers):
            # FSDP shards already live on their rank's device; block swap and expert offload place their own
            if module is not None and not is_sharded(module) and not is_placement_managed(module):
                module.to(device)

    def encode_inputs(self, sample: SampleConfig) -> None:
        """Run `sample`'s generation up to its first denoising step and stop there: every prompt and image it
        encodes is encoded now (the trainer's encoding ahead, `trainer/sample_inputs.py`, has the model keep
        them); nothing is denoised or decoded, and the transformers are neither moved nor run."""
        def stop(*_):
            raise _InputsEncoded

        hooks = [t.register_forward_pre_hook(stop) for t in self.model.transformers()]
        self._encoding_only = True
        try:
            self.generate(sample, show_progress=False)
        except _InputsEncoded:
            pass
        finally:
            self._encoding_only = False
            for hook in hooks:
                hook.remove()

    def sample_to_file(self, sample: SampleConfig, output: str | Path, show_progress: bool = True) -> Path:
        """Generate and write `output` (.mp4, .gif or .webp, checked before generating) and a PNG strip beside it."""
        return self.sample_frames_to_file(sample, output, show_progress)[0]

    def sample_frames_to_file(self, sample: SampleConfig, output: str | Path,
                              show_progress: bool = True) -> tuple[Path, np.ndarray]:
        """`sample_to_file`, also returning the generated frames (F, H, W, 3) (scripts/evaluate.py measures them)."""
        output = check_video_output(output, "sample output")
        write_strip: Callable[[Path], None]
        if sample.elements and not self.model.variant.vace_layers:
            frames, references = self.generate_e2v(sample, show_progress)
            write_strip = functools.partial(atomic_save_png, image=contact_sheet(references, frames))
        else:
            frames = self.generate(sample, show_progress)
            write_strip = functools.partial(write_png_strip, frames=frames)
        try:
            write_video_output(output, frames, fps=self.model.variant.fps)
            write_strip(output.with_suffix(".png"))
            self._write_workflow(sample, output)
        except OSError as e:
            raise UserError(f"cannot write sample output '{output}': {write_failure(e)}") from e
        logger.info("sample written to %s", output)
        return output, frames

    def _write_workflow(self, sample: SampleConfig, output: Path) -> None:
        if self.workflow_models is None:
            return
        reason = unsupported(self.model.variant, sample)
        if reason:
            logger.info("no ComfyUI workflow beside %s: ComfyUI has no equivalent of %s", output.name, reason)
            return
        write_workflow(output, build_workflow(self.model.variant, sample, self.workflow_models, output.stem))

    def sample_to_record(self, sample: SampleConfig, output: str | Path, step: int | None = None,
                         epoch: int | None = None, index: int = 0,
                         show_progress: bool = True) -> tuple[SampleRecord, np.ndarray]:
        """`sample_frames_to_file`, then the sample's record as a JSON sidecar beside the video (written last, so
        a sidecar means the video and its sheet are complete); returns the record and the frames."""
        path, frames = self.sample_frames_to_file(sample, output, show_progress)
        record = SampleRecord.of(sample, path, fps=self.model.variant.fps, step=step, epoch=epoch, index=index)
        record = dataclasses.replace(record, shift=shift_used(self.model.scheduler, sample.sampler, sample.shift))
        try:
            record.write()
        except OSError as e:
            raise UserError(f"cannot write sample output '{record.sidecar}': {write_failure(e)}") from e
        return record, frames


class _InputsEncoded(Exception):
    """Raised by `encode_inputs`' hook at the first transformer call: everything before it was encoding."""


def atomic_save_png(path: Path, image: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        Image.fromarray(image).save(tmp, format="PNG")
