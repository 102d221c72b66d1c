"""The trainer's samples during training: generated with the sampler from the weights saves use (the EMA or a
schedule-free average when kept), written as records beside the run, to tensorboard and the GUI's callbacks."""
from __future__ import annotations

import logging
from pathlib import Path

from modules.model.attention.backend_setup import apply_attention_backend
from modules.modelFile.training_only_loras import sampling_weights
from modules.modelSampler.comfy_workflow import WorkflowModels, workflow_models
from modules.modelSampler.WanModelSampler import WanModelSampler
from modules.modelSaver.WanModelSaver import WanModelSaver
from modules.util.enum import TrainingMethod
from modules.util.errors import UserError
from modules.util.sample_record import sample_video_path
from modules.util.write_errors import is_write_failure, write_failure

logger = logging.getLogger(__name__)


class TrainerSampling:
    """Mixed into GenericTrainer: reads its model, config, data kind, workspace, progress and callbacks."""

    def sample(self) -> list[Path]:
        device = self.model.train_device.type
        apply_attention_backend(self.model.transformers(), self.config.sample_attention_backend, device,
                                training=False, what="sampling")
        try:
            with self._averaged_weights(sampling=True), sampling_weights(self.model):
                return self._sample()
        finally:  # back to the training kernel
            apply_attention_backend(self.model.transformers(), self.config.attention_backend, device, training=True)

    def _sample(self) -> list[Path]:
        """Rank 0 writes; with FSDP every rank runs the same forward passes (each holds a shard)."""
        samples = [self.config.sample_overrides.apply(s) for s in self.config.samples if s.enabled]
        if not samples or not (self.dist.is_main or self.setup.sharded):
            return []
        sampler = WanModelSampler(self.model, self.kind.sampling_options(self.data), self._workflow_models())
        sampler.e2v.background = tuple(self.config.transparent_background)  # sample images composite as the data's
        paths = []
        for index, sample in enumerate(samples):
            self._status("sampling", index + 1, len(samples))
            if not self.dist.is_main:
                try:
                    sampler.generate(sample, show_progress=False)
                except UserError:  # rank 0 logs it
                    pass
                continue
            output = sample_video_path(self.run.path, self.progress.global_step, index)
            self.samples_tried += 1
            try:
                record, frames = sampler.sample_to_record(sample, output, step=self.progress.global_step,
                                                          epoch=epoch_of_last_step(self.progress), index=index,
                                                          show_progress=False)
                paths.append(record.video)
            except Exception as e:  # a bad sample setting or a full disk must not end a run
                if not isinstance(e, UserError) and not is_write_failure(e):
                    raise
                reason = e if isinstance(e, UserError) else write_failure(e)
                logger.warning("sample %d skipped: %s", index, reason)
                self.sample_failures.append(f"sample {index}: {reason}")
                continue
            if self.tensorboard is not None:
                import numpy as np
                from PIL import Image

                strip = np.asarray(Image.open(output.with_suffix(".png")).convert("RGB"))
                self.tensorboard.add_image(f"sample/{index}", strip, self.progress.global_step, dataformats="HWC")
                if self.config.sample_metrics:
                    self._log_sample_metrics(index, sample, frames)
            self.callbacks.on_sample(record)
        self._park_encoders()  # sampling moved the encoders to the GPU
        self.sample_paths.extend(paths)
        return paths

    def _workflow_models(self) -> WorkflowModels:
        """The files a sample's ComfyUI workflow loads: the run's base, encoders and base LoRAs, and what this run
        writes at its end (the LoRA of each trained expert, or a fine-tuned model)."""
        config = self.config
        paths = WanModelSaver(self.model, self.setup, config).lora_paths(config.output_model_destination)
        lora = config.training_method == TrainingMethod.LORA
        trained = {expert: paths[expert] for expert, _ in self.setup.trained_transformers()} if lora else None
        unet = config.output_model_destination if config.training_method == TrainingMethod.FINE_TUNE else None
        overrides = {key: getattr(config, key) for key in ("transformer_override", "transformer_2_override",
                                                           "vae_override", "text_encoder_override",
                                                           "image_encoder_override")}
        return workflow_models(self.model.variant, config.base_model_name, overrides, config.base_loras, trained,
                               trained_unet=unet)

    def _log_sample_metrics(self, index: int, sample, frames) -> None:
        """scripts/evaluate.py's metrics of a training sample, to tensorboard as sample_metrics/<index>/<metric>:
        motion always; temporal consistency and E2V element fidelity with the checkpoint's CLIP image encoder
        (text alignment needs evaluate.py's --clip-model)."""
        from modules.dataLoader.video_io import read_image
        from modules.evaluation.encoders import loaded_clip
        from modules.evaluation.run import Encoders, Prompt, measure

        encoders = Encoders(clip_image=loaded_clip(self.model.image_encoder, self.model.image_processor))
        elements = [read_image(path, self.config.transparent_background) for path in sample.elements]
        values = measure(frames, Prompt(sample.prompt, elements=tuple(sample.elements)), encoders,
                         elements if encoders.clip_image is not None else [])
        for name, value in values.items():
            self._scalar(f"sample_metrics/{index}/{name}", value)
        if encoders.clip_image is None and not getattr(self, "_noted_sample_metrics", False):
            self._noted_sample_metrics = True
            logger.info("sample_metrics: the checkpoint has no CLIP image encoder, so only motion is logged")


def epoch_of_last_step(progress) -> int:
    """The epoch (0-based) the weights' last step belongs to: right after an epoch ends its counter already names the
    next one, so a sample at the end of a 31-epoch run is of epoch 31 (index 30), not 32."""
    return progress.epoch - 1 if progress.epoch_batch == 0 and progress.epoch > 0 else progress.epoch
