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
from modules.trainer.snapshots import raw_destination, snapshot_destination
from modules.util.enum import ModelFormat, TrainingMethod
from modules.util.errors import UserError
from modules.util.sample_record import sample_video_path, sidecar_path
from modules.util.write_errors import is_write_failure, write_failure

logger = logging.getLogger(__name__)


class TrainerSampling:
    """Mixed into GenericTrainer: reads its model, config, data kind, workspace, progress and callbacks."""

    def sample(self, samples: list | None = None) -> list[Path]:
        """The run's samples now (`samples`: these instead, e.g. the GUI's list as edited since the start), each
        once: one whose record this run folder holds already (the scheduled sample of the last step, then the
        end-of-run one; a resume) is not made again. A sample is a by-product: whatever goes wrong in one (a bad
        setting, a full disk, a bug) is one warning, counted in the end report, and never costs the run its model."""
        round_ = list(enumerate(self._samples(samples)))
        pending = [(index, sample) for index, sample in round_ if not self._sampled_already(index)]
        if round_ and not pending:
            logger.info("the samples of step %d are written already: not sampled again", self.progress.global_step)
        if not pending or not (self.dist.is_main or self.setup.sharded):
            return []
        device = self.model.train_device.type
        try:
            apply_attention_backend(self.model.transformers(), self.config.sample_attention_backend, device,
                                    training=False, what="sampling")
            try:
                # sequence parallel: rank 0 samples whole clips alone (the others go on to the next step and wait)
                with self._averaged_weights(sampling=True), sampling_weights(self.model), \
                        self.setup.whole_sequences():
                    return self._sample(pending)
            finally:  # back to the training kernel
                apply_attention_backend(self.model.transformers(), self.config.attention_backend, device,
                                        training=True)
        except Exception as e:  # noqa: BLE001 (whatever it is, the run goes on to its model)
            self._sample_failed("the samples", e, len(pending))
            return []

    def _samples(self, samples: list | None = None) -> list:
        """The enabled samples (the run's, or `samples`) with `sample_overrides` applied: what a round generates."""
        return [self.config.sample_overrides.apply(s) for s in (self.config.samples if samples is None else samples)
                if s.enabled]

    def _sampler(self, workflows: bool = False) -> WanModelSampler:
        sampler = WanModelSampler(self.model, self.kind.sampling_options(self.data),
                                  self._workflow_models() if workflows else None)
        sampler.e2v.background = tuple(self.config.transparent_background)  # sample images composite as the data's
        return sampler

    def _sampled_already(self, index: int) -> bool:
        if self.run is None:
            return False
        return sidecar_path(sample_video_path(self.run.path, self.progress.global_step, index)).is_file()

    def _sample_failed(self, what: str, error: BaseException, count: int = 1) -> None:
        """One warning line and the end report's count; a bug's traceback goes to the log at debug level."""
        if isinstance(error, UserError):
            reason = str(error)
        elif is_write_failure(error):
            reason = write_failure(error)
        else:
            reason = f"{type(error).__name__}: {error}"
            logger.debug("%s failed", what, exc_info=error)
        logger.warning("%s skipped at step %d: %s; training goes on", what, self.progress.global_step, reason)
        self.samples_tried += count
        self.sample_failures.extend([f"{what}: {reason}"] * count)

    def _sample(self, samples: list) -> list[Path]:
        """Rank 0 writes; with FSDP every rank runs the same forward passes (each holds a shard)."""
        sampler = self._sampler(workflows=True)
        paths = []
        for number, (index, sample) in enumerate(samples, start=1):
            self._status("sampling", number, len(samples))
            if not self.dist.is_main:
                try:
                    sampler.generate(sample, show_progress=False)
                except Exception:  # noqa: BLE001 (rank 0 reports it)
                    pass
                continue
            output = sample_video_path(self.run.path, self.progress.global_step, index)
            try:
                record, frames = sampler.sample_to_record(sample, output, step=self.progress.global_step,
                                                          epoch=epoch_of_last_step(self.progress), index=index,
                                                          show_progress=False)
                self._publish(index, sample, record, frames)
                self.samples_tried += 1
                paths.append(record.video)
            except Exception as e:  # noqa: BLE001 (a sample never ends a run)
                self._sample_failed(f"sample {index}", e)
        self._park_encoders()  # an encoder loaded again for a new input (or moved to the GPU) leaves again
        self.sample_paths.extend(paths)
        return paths

    def _publish(self, index: int, sample, record, frames) -> None:
        """A written sample to tensorboard (its strip, and its metrics when asked) and the GUI."""
        if self.tensorboard is not None:
            import numpy as np
            from PIL import Image

            strip = np.asarray(Image.open(record.video.with_suffix(".png")).convert("RGB"))
            self.tensorboard.add_image(f"sample/{index}", strip, self.progress.global_step, dataformats="HWC")
            if self.config.sample_metrics:
                self._log_sample_metrics(index, sample, frames)
        self.callbacks.on_sample(record)

    def _workflow_models(self) -> WorkflowModels | None:
        """The files a sample's ComfyUI workflow loads: the run's base, encoders and base LoRAs, and the file that
        holds this step's trained weights (`_adapter_of_this_step`). None: no workflow, and the log says why once."""
        config = self.config
        trained = None
        if config.training_method != TrainingMethod.EMBEDDING:
            destination, why = self._adapter_of_this_step()
            if destination is None:
                self._no_workflow(why)
                return None
            paths = WanModelSaver(self.model, self.setup, config).lora_paths(destination)
            trained = {expert: paths[expert] for expert, _ in self.setup.trained_transformers()}
        overrides = {key: getattr(config, key) for key in ("transformer_override", "transformer_2_override",
                                                           "vae_override", "text_encoder_override",
                                                           "image_encoder_override")}
        return workflow_models(self.model.variant, config.base_model_name, overrides, config.base_loras, trained)

    def _adapter_of_this_step(self) -> tuple[Path | None, str]:
        """(the LoRA file the samples' weights are, or None and why): the snapshot of this step (written before the
        samples) or, at the run's last step, the final output under its real name (numbered when taken). A fine-tune
        writes a diffusers folder, which ComfyUI's UNETLoader does not load; ComfyUI maps none of a DIFFUSERS_LORA
        file's keys for Wan (comfy/lora.py), so its workflow would render the base."""
        config = self.config
        if config.training_method == TrainingMethod.FINE_TUNE:
            return None, ("a fine-tune is written as a diffusers folder, which ComfyUI's UNETLoader cannot load (it "
                          "takes one .safetensors file)")
        if config.output_model_format == ModelFormat.DIFFUSERS_LORA:
            return None, ("ComfyUI's LoRA loader maps none of a DIFFUSERS_LORA file's keys for Wan and would render "
                          "the base: use output_model_format COMFY_LORA (diffusers loads it too) for workflows")
        step = self.progress.global_step
        raw = self.ema is not None and not config.sample_with_ema  # samples use the raw weights beside the EMA
        snapshot = snapshot_destination(self.run.path, config.output_model_destination, step)
        snapshot = raw_destination(snapshot) if raw else snapshot
        saver = WanModelSaver(self.model, self.setup, config)
        if all(saver.lora_paths(snapshot)[expert].is_file() for expert, _ in self.setup.trained_transformers()):
            return snapshot, ""
        if step >= self.total_steps and (not raw or config.ema_save_raw):  # the end's save holds these weights
            final = self.final_destination()
            return (raw_destination(final) if raw else final), ""
        return None, (f"no file holds the weights of step {step} (the final model holds later ones): set save_every "
                      "to the sampling interval to keep a snapshot, and a workflow, for every sample")

    def _no_workflow(self, why: str) -> None:
        if why not in self._workflow_notes:
            self._workflow_notes.add(why)
            logger.info("samples get no ComfyUI workflow: %s", why)

    def _log_sample_metrics(self, index: int, sample, frames) -> None:
        """scripts/evaluate.py's metrics of a training sample, to tensorboard as sample_metrics/<index>/<metric>:
        motion always; temporal consistency and E2V element fidelity with the checkpoint's CLIP image encoder
        (text alignment needs evaluate.py's --clip-model)."""
        from modules.dataLoader.video_io import read_image
        from modules.evaluation.encoders import loaded_clip
        from modules.evaluation.run import Encoders, Prompt, measure

        clip = self.model.encoder("clip", "for sample_metrics") if self.model.image_encoder is not None else None
        encoders = Encoders(clip_image=loaded_clip(clip, self.model.image_processor))
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
