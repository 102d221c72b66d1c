"""GenericTrainer: the training loop.

Epochs and `max_steps`, gradient accumulation, tqdm progress with loss and ETA, tensorboard scalars,
sampling and backups on STEP / EPOCH / MINUTE schedules, exact resume from the last backup, a clean
stop (Ctrl-C, SIGTERM or the UI's Stop) that writes a backup first, and the final save.

Exactness: the data order of an epoch is a function of (seed, epoch), and every random draw of micro
step N (posterior sample, σ, noise, LoRA dropout) comes from generators seeded with (seed, N). A run
resumed from a backup therefore continues bit-identically on the CPU.

The resume from a backup is trainer/resume.py, the samples during training trainer/sampling.py, and the run
folder (opening it, its state record, following it when renamed or deleted mid-run) trainer/trainer_run.py
(mixed in).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from modules.config.train_config import TrainConfig
from modules.dataLoader.encoder_placement import park_after_caching, place_before_caching
from modules.dataLoader.errors import CachingStopped
from modules.dataLoader.prefetch import BatchPrefetcher
from modules.dataLoader.skips import SkipCounter
from modules.dataLoader.verdict import RunVerdict
from modules.dataLoader.WanBaseDataLoader import WanBaseDataLoader
from modules.model.step_inputs import StepRandom
from modules.model.WanModel import WanModel
from modules.modelFile.training_only_loras import check_memory_features
from modules.modelLoader.WanModelLoader import WanModelLoader, resolve_device
from modules.modelSaver.WanModelSaver import TrainedAmount, WanModelSaver
from modules.modelSetup.BaseWanSetup import BaseWanSetup
from modules.modelSetup.ema import WeightEMA
from modules.modelSetup.memory import enable_vae_tiling
from modules.modelSetup.memory_plan import apply_memory_plan
from modules.modelSetup.optimization import create_lr_scheduler, create_optimizer
from modules.modelSetup.vae_memory import caching_needs_tiling
from modules.optimizer.registry import spec_of
from modules.trainer.backup import TrainProgress, list_backups, write_backup, write_sharded_backup
from modules.trainer.end_report import end_warnings
from modules.trainer.initial_weights import continue_from_embedding
from modules.trainer.nonfinite import nonfinite_advice
from modules.trainer.output_destination import free_destination
from modules.trainer.preflight import check_before_loading
from modules.trainer.registry import SETUPS, DataKind, data_kind
from modules.trainer.resume import TrainerResume
from modules.trainer.sample_inputs import encode_ahead
from modules.trainer.sampling import TrainerSampling
from modules.trainer.schedule import Schedule
from modules.trainer.snapshots import prune_snapshots, raw_destination, snapshot_destination
from modules.trainer.trainer_run import TrainerRun, TrainingStopped, recorded
from modules.trainer.validation import Validation
from modules.trainer.visualization import Visualizer
from modules.trainer.workspace_lock import WorkspaceLock
from modules.util.commands import TrainCallbacks, TrainCommands, TrainUpdate
from modules.util.distributed import DistributedContext, init_distributed
from modules.util.enum import ConceptType, EmaMode
from modules.util.errors import UserError
from modules.util.run_folder import RunFolder
from modules.util.seeds import derive_seed
from modules.util.write_errors import is_write_failure, write_failure

logger = logging.getLogger(__name__)

MAX_NONFINITE_STEPS = 5
SIGMA_HISTOGRAM_STEPS = 20  # a histogram per step would cost ~1 ms each and hold 1-2 values


__all__ = ["GenericTrainer", "TrainingStopped"]  # TrainingStopped lives in trainer_run.py; callers import it here


class GenericTrainer(TrainerRun, TrainerResume, TrainerSampling):
    def __init__(self, config: TrainConfig, callbacks: TrainCallbacks | None = None,
                 commands: TrainCommands | None = None, config_files: Sequence[str] = ()):
        self.config = config
        self.config_files = config_files  # the files the config was read from: no output may replace them
        self.callbacks = callbacks or TrainCallbacks()
        self.commands = commands or TrainCommands()
        self.workspace = Path(config.workspace_dir)
        self.skips = SkipCounter()
        self.progress = TrainProgress()
        self.model: WanModel | None = None
        self.setup: BaseWanSetup | None = None
        self.data: WanBaseDataLoader | None = None
        self.validation_data: WanBaseDataLoader | None = None  # the VALIDATION concepts, when there are any
        self.validation: Validation | None = None
        self.kind: DataKind | None = None  # the data kind's entry in trainer/registry.py
        self.tensorboard = None
        self.nonfinite_in_a_row = 0
        self.nonfinite_total = 0
        self.skip_update = False
        self.dist = DistributedContext()
        self.visualizer: Visualizer | None = None
        self.sigma_log: list[torch.Tensor] = []
        self.output_paths: list[Path] = []
        self.sample_paths: list[Path] = []
        self.sample_failures: list[str] = []  # "sample 0: <why>", each preview sample that could not be made
        self.samples_tried = 0
        self.snapshot_paths: list[Path] = []
        self.ema: WeightEMA | None = None
        self.backup_failure: str | None = None  # the last backup write that failed (reported at the end)
        self._log_handler: logging.Handler | None = None
        self._lock: WorkspaceLock | None = None
        self.run: RunFolder | None = None  # this run's folder in the workspace (util/run_folder.py)
        self.kept_backups_reported: set[str] = set()  # backups pruning could not verify, each reported once
        self._workflow_notes: set[str] = set()  # why samples got no ComfyUI workflow, each said once
        self._final_destination: Path | None = None

    # --- set-up -------------------------------------------------------------------------------------
    @recorded("start")
    def start(self) -> None:
        config = self.config
        # every error that needs no model, the data's verdict included, before any model loads
        verdict = check_before_loading(config, self.config_files)
        self.kind = kind = data_kind(config)
        if verdict is not None:  # its skips were logged as found; the loaders train on its items
            self.skips.add(verdict.skipped())
        self.dist, device_name = init_distributed(config.train_device, config.sequence_parallel)
        if resolve_device(device_name).type == "cuda":  # memory_preset AUTO: the savers this GPU needs
            self.config = config = apply_memory_plan(config)
        if self.dist.is_main:  # one run per workspace; then no live process but this one writes backups there
            self._open_run()  # trainer_run.py
        self.run = self.dist.broadcast_object(self.run)  # every rank writes its shards into rank 0's run
        torch.manual_seed(config.seed)
        self._status("loading model")
        device = resolve_device(device_name)
        self.model = WanModelLoader().load_for_config(config, device)
        if config.vae_tiling or caching_needs_tiling(config, self.model):  # before the loaders key their caches on it
            enable_vae_tiling(self.model.vae)
        full_train = kind.prepare_model(self.model, config)  # E2V on a T2V base: the expanded input layout
        method = SETUPS[config.training_method]
        self.setup = method.setup(self.model, config, full_train)

        self._status("preparing data")
        place_before_caching(config, self.model)  # with latent caching each encoder comes in for its phase
        self.data = kind.loader(config, self.model, self.skips, self.dist,
                                should_stop=lambda: self.commands.stop_requested,
                                on_progress=self.callbacks.on_progress, **_planned(verdict, ConceptType.STANDARD))
        validation_data = kind.loader(config, self.model, self.skips, self.dist,
                                      should_stop=lambda: self.commands.stop_requested,
                                      concept_type=ConceptType.VALIDATION, on_progress=self.callbacks.on_progress,
                                      **_planned(verdict, ConceptType.VALIDATION))
        try:
            self.data.prepare()
            if validation_data.has_concepts():  # cached like the training data: no encoder call after this
                validation_data.prepare()
                self.validation_data = validation_data
        except CachingStopped as stopped:  # Ctrl-C while caching: stop now, nothing trained needs a backup
            self._status(str(stopped))
            raise TrainingStopped(None, reason=str(stopped)) from None
        # the samples' prompts and images encoded now, then UMT5 and CLIP freed (trainer/sample_inputs.py)
        encode_ahead(config, self.model, self._sampler(), self._samples(), self.dist.is_main,
                     keep_text=self.setup.embedding_training is not None)
        self._park_encoders()

        params = self.setup.setup_trainable()
        if config.lora_weight_path:
            method.continue_from(self.model, self.setup, config.lora_weight_path)
        if self.setup.embedding_training is not None:
            if config.embedding_weight_path:
                continue_from_embedding(self.model, self.setup, config.embedding_weight_path)
            self.setup.embedding_training.check_captions(self.data.encoded_captions())
        self.setup.prepare_device(self.dist)
        check_memory_features(self.model, self.config.fp8_base(), bool(self.setup.swappers), self.setup.sharded)
        self.params = self.setup.trained_parameters() if self.setup.sharded else params  # sharding swaps them
        self.optimizer = create_optimizer(self.setup.parameter_groups(self.params), config)
        self.total_steps = self._total_steps()
        self.lr_scheduler = create_lr_scheduler(self.optimizer, config, self.total_steps)
        self.ema = self._make_ema()
        if self.validation_data is not None:
            self.validation = Validation(self.validation_data, self.setup, config.validation_sigma_count, self.dist)
        if config.continue_last_backup:
            self._resume()
        visualization = getattr(self.data, "visualization", None)
        if visualization is not None and visualization.enabled and self.dist.is_main:
            self.visualizer = Visualizer(visualization, self.run.path, time.strftime("%Y%m%d-%H%M%S"), self.model)
        if config.tensorboard and self.dist.is_main:
            self._open_tensorboard()

    def _make_ema(self) -> WeightEMA | None:
        """The moving average of the trained weights, by `{expert}.{name}` / `embedding` (its backup's keys)."""
        if self.config.ema == EmaMode.OFF:
            return None
        return WeightEMA(self.setup.named_trained_parameters(), self.config.ema_decay,
                         on_host=self.config.ema == EmaMode.CPU)

    def _park_encoders(self) -> None:
        """With latent caching the encoders are not needed after it (the samples' inputs were encoded ahead): UMT5
        and CLIP freed, also after a sampling round or a step that loaded one again. A trained embedding keeps UMT5
        on the GPU (captions holding its placeholder are encoded in each step), `sample_metrics` CLIP in RAM."""
        park_after_caching(self.config, self.model,
                           keep_text=self.setup is not None and self.setup.embedding_training is not None,
                           keep_clip=self.config.sample_metrics)

    def _steps_per_epoch(self) -> int:
        return math.ceil(len(self.data.epoch_batches(0)) / self.config.gradient_accumulation_steps)

    def _total_steps(self) -> int:
        total = self._steps_per_epoch() * self.config.epochs
        return min(total, self.config.max_steps) if self.config.max_steps else total

    # --- the loop -----------------------------------------------------------------------------------
    @recorded("train")
    def train(self) -> None:
        config = self.config
        accumulation = config.gradient_accumulation_steps
        self.schedules = _Schedules(
            backup=Schedule(config.backup_after, config.backup_after_unit),
            sample=Schedule(config.sample_after, config.sample_after_unit),
            save=Schedule(config.save_every, config.save_every_unit, skip_first=config.save_skip_first),
            validate=Schedule(config.validate_after, config.validate_after_unit))
        bar = tqdm(total=self.total_steps, initial=self.progress.global_step, desc="training", unit="step",
                   dynamic_ncols=True, disable=not self.dist.is_main)
        start_time, start_step = time.monotonic(), self.progress.global_step
        epochs = math.ceil(self.total_steps / max(1, self._steps_per_epoch()))  # the bar's: max_steps may end sooner
        committed = dataclasses.replace(self.progress)  # position after the last optimizer step
        interrupted = at_same_point = False
        try:
            while self.progress.epoch < config.epochs and not self._done():
                epoch = self.progress.epoch
                batches = self.data.epoch_batches(epoch)  # global batches; each rank trains its share
                shares = [self.dist.share(batch) for batch in batches]
                prefetch = BatchPrefetcher(self.data, [own for own, _ in shares], epoch, self.progress.epoch_batch)
                pending = 0  # micro batches accumulated since the last optimizer step
                while self.progress.epoch_batch < len(batches) and not self._done():
                    index = self.progress.epoch_batch
                    last_of_epoch = index + 1 == len(batches)
                    sync = pending + 1 >= accumulation or last_of_epoch
                    loss = self._micro_step(prefetch.get(index), shares[index][1], len(batches[index]), sync)
                    self.progress.epoch_batch += 1
                    pending += 1
                    if not sync:
                        continue
                    self._optimizer_step(loss, pending)
                    pending = 0
                    committed = dataclasses.replace(self.progress)
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss:.4f}", epoch=f"{epoch + 1}/{epochs}", refresh=False)
                    self._report(loss, start_time, start_step)
                    self._after_step(epoch_end=False)
                    if self.dist.broadcast_object(self.commands.stop_requested):  # every rank stops together
                        raise _SynchronizedStop
                if self.progress.epoch_batch >= len(batches):
                    self.progress.epoch += 1
                    self.progress.epoch_batch = 0
                    committed = dataclasses.replace(self.progress)
                    self._after_step(epoch_end=True)
        except (KeyboardInterrupt, _SynchronizedStop) as stop:
            # A stop inside a step drops that step's partial gradients: the backup must describe the state
            # after the last optimizer step, or a resume would skip the interrupted batches.
            interrupted = True
            at_same_point = isinstance(stop, _SynchronizedStop)
            self.progress = committed
            self.optimizer.zero_grad(set_to_none=True)
        finally:
            bar.close()
        if interrupted:
            if self.setup.sharded and not at_same_point:
                # An immediate stop leaves the ranks at different points of a step: a collective backup
                # could pair the wrong communications and hang. The last scheduled backup stays.
                self._status("stopped at once; no backup written (FSDP backups need every rank at the same "
                             "point: stop with one Ctrl-C to get one)")
                raise TrainingStopped(None)
            path = self.backup()
            self._status(f"stopped; backup written to {path} — resume with continue_last_backup=true")
            raise TrainingStopped(path)

    def _done(self) -> bool:
        return bool(self.config.max_steps) and self.progress.global_step >= self.config.max_steps

    def _micro_step(self, batch: dict[str, torch.Tensor], offset: int, global_size: int, sync: bool) -> float:
        """Forward and backward of this rank's share of one global batch (`offset` = its first sample)."""
        micro_step = self.progress.micro_step
        # LoRA dropout etc.: the ranks of a sequence group draw alike (they hold the same text and modulation)
        torch.manual_seed(derive_seed(self.config.seed, "global", micro_step, self.dist.data_rank))
        size = len(batch["prompt_embeds"])
        random = StepRandom.for_micro_step(self.config.seed, micro_step, size, first_sample=offset)
        with self.setup.gradient_sync(sync):
            inputs = self.data.assemble(batch, random)
            output = self.setup.predict(inputs, random)
            if sync and self.visualizer is not None and self.visualizer.due(self.progress.global_step + 1):
                self.visualizer.write(self.progress.global_step + 1, output, inputs)
            self.progress.micro_step += 1
            finite = self.dist.all_true(bool(torch.isfinite(output.loss)))
            if not finite:  # every rank skips together; the backward keeps DDP/FSDP hooks in step, its
                self._nonfinite(float(output.loss.detach()))  # gradients are dropped by _optimizer_step
                if output.loss.requires_grad:
                    output.loss.backward()
                self.skip_update = True
                return float("nan")
            # The rank's mean loss, weighted so that averaging over ranks gives the global batch's mean. With sequence
            # parallelism each of the N ranks of a group holds the gradient of its own tokens, whose sum is the
            # share's: world_size (not data_world_size) puts that N into the weight of the average DDP / FSDP take.
            weight = size * self.dist.world_size / global_size / self.config.gradient_accumulation_steps
            if output.loss.requires_grad:  # not when nothing trained is in the batch (an EMBEDDING run's caption
                (output.loss * weight).backward()  # without the placeholder): its parameters get no gradient
        if self.tensorboard is not None:  # σ histogram over the last SIGMA_HISTOGRAM_STEPS steps
            self.sigma_log.append(output.sigmas.detach().float().cpu())
            if len(self.sigma_log) >= SIGMA_HISTOGRAM_STEPS:
                sigmas, step = torch.cat(self.sigma_log), self.progress.global_step
                self._to_tensorboard(lambda writer: writer.add_histogram("sigma", sigmas, step))
                self.sigma_log.clear()
        return float(output.loss.detach())

    def _nonfinite(self, value: float) -> None:
        self.nonfinite_in_a_row += 1
        self.nonfinite_total += 1
        logger.warning("loss is %s at step %d; skipping this batch", value, self.progress.global_step)
        if self.nonfinite_in_a_row >= MAX_NONFINITE_STEPS:
            advice = nonfinite_advice(self.model, self.config, self.setup.sharded)
            raise UserError(f"the loss was NaN/inf {self.nonfinite_in_a_row} times in a row: {advice}")

    def _optimizer_step(self, loss: float, micro_batches: int) -> None:
        if math.isfinite(loss):
            self.nonfinite_in_a_row = 0
        if self.skip_update:  # a NaN/inf micro batch poisoned this accumulation: drop it, keep going
            self.skip_update = False
            self.optimizer.zero_grad(set_to_none=True)
            return
        self.setup.average_other_gradients(self.dist)
        if micro_batches != self.config.gradient_accumulation_steps:  # short tail of an epoch: rescale
            for p in self.params:
                if p.grad is not None:
                    p.grad.mul_(self.config.gradient_accumulation_steps / micro_batches)
        if self.config.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm)
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.progress.global_step += 1
        if self.ema is not None and self.progress.global_step % self.config.ema_update_step_interval == 0:
            self.ema.update()
        if math.isfinite(loss):
            self._scalar("loss", loss)
            self._scalar("lr", self.lr_scheduler.get_last_lr()[0])

    def _scalar(self, name: str, value: float, step: int | None = None) -> None:
        """One logged value (rank 0): to tensorboard when it is on, and to `callbacks.on_scalar` always (the
        GUI's curves), so both show the same numbers."""
        if not self.dist.is_main:
            return
        step = self.progress.global_step if step is None else step
        self._to_tensorboard(lambda writer: writer.add_scalar(name, value, step))
        self.callbacks.on_scalar(name, float(value), step)

    def _report(self, loss: float, start_time: float, start_step: int) -> None:
        done = self.progress.global_step - start_step
        elapsed = time.monotonic() - start_time
        eta = elapsed / done * (self.total_steps - self.progress.global_step) if done else None
        self.callbacks.on_update(TrainUpdate(self.progress.global_step, self.total_steps, self.progress.epoch,
                                             self.config.epochs, loss, eta, "training"))
        self._record_progress()

    def _after_step(self, epoch_end: bool) -> None:
        self._follow_run_folder()  # renamed or deleted by hand: followed, or made again (trainer_run.py)
        step, epoch = self.progress.global_step, self.progress.epoch
        if self.schedules.save.due(step, epoch, epoch_end):  # first: a sample's workflow names this snapshot
            self.snapshot()
        if self.model.residency.loaded_again:  # a cache entry encoded again in the step: its encoder leaves again
            self._park_encoders()
        requested = self.commands.take_sample()
        if requested or self.schedules.sample.due(step, epoch, epoch_end):
            self.sample(self.commands.take_samples() if requested else None)
        if self.validation is not None and self.schedules.validate.due(step, epoch, epoch_end):
            self.validate()
        if self.commands.take_backup() or self.schedules.backup.due(step, epoch, epoch_end):
            self._try_backup("training goes on; the next backup tries again")

    # --- side effects -----------------------------------------------------------------------------------
    def backup(self) -> Path | None:
        """Rank 0 writes; with FSDP every rank calls this and writes its own shards. Into the run folder where it
        is now (trainer_run.py)."""
        return self._write_backup_following_the_run(self._write_backup)

    def _write_backup(self) -> Path | None:
        config = self.config
        if self.setup.sharded:
            self._status("writing backup")
            return write_sharded_backup(self.run, self.progress,
                                        lambda folder: self.setup.save_shards(self.optimizer, folder),
                                        self.lr_scheduler.state_dict(), self._fingerprints(), config.to_dict(),
                                        config.rolling_backup_count, self.dist, self.kept_backups_reported)
        if not self.dist.is_main:
            return None
        self._status("writing backup")
        return write_backup(self.run, self.progress, self.setup.trainable_state(), self.optimizer.state_dict(),
                            self.lr_scheduler.state_dict(), self._fingerprints(), config.to_dict(),
                            config.rolling_backup_count, self.dist.data_world_size,
                            ema=self.ema.state_dict() if self.ema is not None else None,
                            reported=self.kept_backups_reported)

    def _averaged_weights(self, sampling: bool = False):
        """A block in which the trained weights are what saves (and samples) use: the EMA when kept (for samples
        as `sample_with_ema` says), else a schedule-free optimizer's average; restored exactly afterwards."""
        if self.ema is not None and (not sampling or self.config.sample_with_ema):
            return self.ema.applied()
        return spec_of(self.config.optimizer).averaged_weights(self.optimizer, self.params)

    def snapshot(self) -> list[Path]:
        with self._averaged_weights():
            paths = self._snapshot()
        if paths and self.ema is not None and self.config.ema_save_raw:  # the raw weights beside the average
            destination = snapshot_destination(self.run.path, self.config.output_model_destination,
                                               self.progress.global_step)
            try:
                paths += self._save_raw(destination, exports=False)
            except Exception as e:
                if not is_write_failure(e):
                    raise
                logger.error("cannot write the raw snapshot beside %s (%s); training goes on", destination,
                             write_failure(e))
        return paths

    def _save_raw(self, destination: Path, exports: bool = True) -> list[Path]:
        raw = raw_destination(destination)
        return WanModelSaver(self.model, self.setup, self.config).save(
            raw, trained=dataclasses.replace(self._trained(), weights=""), exports=exports)

    def _snapshot(self) -> list[Path]:
        """The output model as it is now, to the run folder's `save/` (rank 0 writes; collective with FSDP).
        A failed write (a full disk) is one line and training goes on."""
        weights = self.setup.gathered_transformer_weights()
        if not self.dist.is_main:
            return []
        self._status("saving snapshot")
        destination = snapshot_destination(self.run.path, self.config.output_model_destination,
                                           self.progress.global_step)
        try:
            paths = WanModelSaver(self.model, self.setup, self.config).save(
                destination, transformer_weights=weights, trained=self._trained(), exports=False)
        except Exception as e:
            if not is_write_failure(e):
                raise
            logger.error("cannot write the snapshot %s (%s); training goes on", destination, write_failure(e))
            return []
        prune_snapshots(destination.parent, Path(self.config.output_model_destination).stem,
                        self.config.rolling_save_count)
        self.snapshot_paths.extend(p for p in paths if p.exists())
        return paths

    def _trained(self) -> TrainedAmount:
        weights = f"ema {self.config.ema_decay:g}" if self.ema is not None else ""
        return TrainedAmount(steps=self.progress.global_step, epochs=self.progress.epoch, weights=weights)

    def _try_backup(self, consequence: str) -> Path | None:
        """A backup whose write fails (a full disk) is reported in one line instead of ending the run:
        the weights in memory are intact, and the final model may go to another disk."""
        try:
            path = self.backup()
            self.backup_failure = None
            return path
        except UserError as e:
            logger.error("%s; %s", e, consequence)
            self.callbacks.on_status(f"backup failed: {e}")
            self.backup_failure = str(e)
            return None

    def validate(self):
        """The validation loss now (every rank measures its share), logged and written to tensorboard as
        loss/validation (every sample) and loss/validation/<concept>. Uses the weights samples use."""
        self._status("validating")
        with self._averaged_weights(sampling=True):
            result = self.validation.run()
        step = self.progress.global_step
        if self.dist.is_main:
            logger.info("validation loss at step %d: %s", step, result.describe())
            self.callbacks.on_status(f"validation loss {result.overall:.5f}")
        self._scalar("loss/validation", result.overall, step)
        for name, loss in result.per_concept.items():
            self._scalar(f"loss/validation/{name}", loss, step)
        return result

    @recorded("end")
    def end(self) -> list[Path]:
        """Final save (and backup), summary of skipped samples. Returns the written model paths."""
        already_backed_up = self._backup_of_this_step() is not None
        already_backed_up = self.dist.broadcast_object(already_backed_up)  # rank 0's view decides for all
        if self.config.backup_before_save and self.progress.global_step > 0 and not already_backed_up:
            self._try_backup("saving the model anyway")  # the final model is the point of the run
        if self.config.sample_at_end and self.progress.global_step > 0:
            self.sample()
        if self.dist.is_main:
            self._status("saving model")
        weights = self.setup.gathered_transformer_weights()  # collective with FSDP, None otherwise
        if not self.dist.is_main:  # only rank 0 writes
            self._end_of_run()
            return []
        destination = self.final_destination()
        try:
            with self._averaged_weights():
                self.output_paths = WanModelSaver(self.model, self.setup, self.config).save(
                    destination, transformer_weights=weights, trained=self._trained())
            if self.ema is not None and self.config.ema_save_raw:
                self.output_paths += self._save_raw(destination)
        except Exception as e:
            if not is_write_failure(e):
                raise
            raise UserError(self._save_failure(e)) from None
        logger.info(self.skips.summary())
        for warning in end_warnings(self.skips, self.sample_failures, self.samples_tried, self.nonfinite_total,
                                    self.backup_failure):
            logger.warning(warning)
            self.callbacks.on_warning(warning)
        self._close_tensorboard()
        self._record_finished(self.output_paths)
        self._end_of_run()
        return self.output_paths

    def final_destination(self) -> Path:
        """Where the final model goes: `output_model_destination`, numbered when taken (chosen once, so the end's
        samples name the file the save writes)."""
        if self._final_destination is None:
            self._final_destination = free_destination(self.config.output_model_destination,
                                                       self.config.overwrite_output)
        return self._final_destination

    def _end_of_run(self) -> None:
        """Every rank, once rank 0 has saved: the workspace lock and log released, the process group ended."""
        self.dist.barrier()
        self.close()

    def _backup_of_this_step(self) -> Path | None:
        """The newest backup, when it holds the current step's weights."""
        backups = list_backups(self.run) if self.run is not None else []
        current = bool(backups) and backups[-1].name == f"step-{self.progress.global_step:08d}"
        return backups[-1] if current else None

    def _save_failure(self, error: BaseException) -> str:
        """One line: why the final save failed and where the trained weights still are."""
        destination = self.config.output_model_destination
        backup = self._backup_of_this_step()
        where = (f"the backup {backup} holds the trained weights: free space or change "
                 "output_model_destination, then run again with continue_last_backup=true (it resumes at the "
                 "end and saves)" if backup is not None else
                 "no backup holds this run's final weights (backup_before_save is off or failed)")
        return f"cannot write the model to '{destination}' ({write_failure(error)}): {where}"

    def close(self) -> None:
        """The end of a run, however it ended: the workspace lock and log released, the process group ended."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self._close_log_file()
        self._close_tensorboard()  # a stopped or failed run's event file too (end() closes a finished one's)
        self.dist.finish()

    def _status(self, text: str, done: int = 0, total: int = 0) -> None:
        """What the run does now (the GUI's status line shows it until the next phase or step)."""
        logger.info(text if not total else f"{text} {done}/{total}")
        self.callbacks.on_phase(text, done, total)


@dataclasses.dataclass
class _Schedules:
    backup: Schedule
    sample: Schedule
    save: Schedule
    validate: Schedule


class _SynchronizedStop(Exception):
    """A stop that every rank raises after the same optimizer step (so collective work can follow)."""


def _planned(verdict: RunVerdict | None, concept_type: ConceptType) -> dict:
    """The loader's `planned` argument: start-up's verdict of its concepts (none for E2V, whose loader judges)."""
    return {} if verdict is None else {"planned": verdict.of_type(concept_type)}
