"""The trainer's resume from the newest backup of its workspace: which backup, whether its config and tensors
still fit this run (the pure checks are in resume_check.py), and loading it; under FSDP rank 0 decides for all."""
from __future__ import annotations

import logging

from modules.trainer.backup import Backup, DamagedBackup, latest_backup, read_backup
from modules.trainer.backup_manifest import plausible_progress
from modules.trainer.resume_check import (
    backup_config_changes,
    base_lora_change,
    base_lora_fingerprint,
    changed_config_refusal,
    config_fingerprint,
    describe_change,
    saved_config_value,
    unloadable_reason,
)
from modules.modelSetup.int8_storage import int8_fingerprint
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


class TrainerResume:
    """Mixed into GenericTrainer: reads its config, workspace, setup, optimizer, scheduler, EMA and dist."""

    def _fingerprints(self) -> dict[str, str]:
        if getattr(self, "_base_weights", None) is None:  # frozen: made once
            self._base_weights = f"{self.config.base_weight_format.name} {int8_fingerprint(self.model.transformers())}"
        return {"config": config_fingerprint(self.config, self.dist.data_world_size), "dataset": self.data.fingerprint(),
                "base_loras": base_lora_fingerprint(self.model.base_loras), "base_weights": self._base_weights.strip()}

    def _resume(self) -> None:
        sharded = self.setup.sharded
        backup, error = None, None
        if self.dist.is_main or not sharded:
            try:
                backup = latest_backup(self.run, with_optimizer=not self.config.resume_fresh_optimizer)
            except UserError as e:  # under FSDP every rank must hear it, or the others wait forever
                if not sharded:
                    raise
                error = str(e)
        if sharded:  # rank 0 picks (and checks) the backup; the others need its position, and read their shards
            path, error = self.dist.broadcast_object((backup.path if backup is not None else None, error))
            if error:
                raise UserError(error)
            if not self.dist.is_main and path is not None:
                backup = read_backup(path, with_states=False)
        if backup is None:
            logger.info("continue_last_backup: no backup in %s yet, starting fresh", self.run.backups)
            return
        changes = backup_config_changes(backup.path, backup.world_size, self.config, self.dist.data_world_size)
        self._refuse_unloadable(backup, changes or [])
        now = self._fingerprints()
        self._refuse_implausible(backup, same_data=backup.fingerprints == now)
        # The saved config decides when it is there: an earlier release's fingerprint covers fewer keys.
        config_changed = bool(changes) if changes is not None else \
            backup.fingerprints.get("config", now["config"]) != now["config"]
        if config_changed and not self.config.resume_changed_config:
            raise UserError(changed_config_refusal(backup.path, changes or []))  # e.g. a new run in an old workspace
        changed_base = base_lora_change(backup.path, backup.fingerprints.get("base_loras", now["base_loras"]),
                                        now["base_loras"])  # older backups recorded none: nothing to compare
        if changed_base and not self.config.resume_changed_config:
            raise UserError(changed_base)
        saved_base = backup.fingerprints.get("base_weights")  # older backups recorded none: nothing to compare
        if saved_base is not None and saved_base != now["base_weights"]:  # no bit-identical resume on another base
            raise UserError(f"cannot resume from {backup.path}: it was trained on another quantised base ({saved_base}; "
                            f"now {now['base_weights']}); give the same base_model_name / transformer_override and "
                            "base_weight_format, or train without continue_last_backup")
        for what, value in backup.fingerprints.items():
            if now.get(what) != value and self.dist.is_main and (what != "config" or config_changed):
                lines = [describe_change(*change) for change in changes or []] if what == "config" else []
                logger.warning("resuming from %s although the %s changed since it was written%s", backup.path, what,
                               f": {'; '.join(lines)}" if lines else "")
        if backup.shards is not None:  # written by an FSDP run, read by any kind of run
            self.setup.load_shards(self.optimizer, backup.shards)
        else:
            self.setup.load_trainable_state(backup.trainable)
            if not self.config.resume_fresh_optimizer:
                self.setup.load_optimizer_state(self.optimizer, backup.optimizer)
        if self.ema is not None and backup.ema:
            self.ema.load_state_dict(backup.ema)
        elif self.ema is not None:  # EMA turned on since the backup: the average starts at its weights
            self.ema.reset()
            logger.info("the backup holds no EMA: the average starts at its weights")
        self.lr_scheduler.load_state_dict(backup.lr_scheduler)
        if self.config.resume_fresh_optimizer:  # the fresh state's lr is step 0's: take the schedule's
            for group, lr in zip(self.optimizer.param_groups, self.lr_scheduler.get_last_lr()):
                group["lr"] = lr
            logger.info("resume_fresh_optimizer: the optimizer state starts fresh at step %d",
                        backup.progress.global_step)
        self.progress = backup.progress
        logger.info("resumed from %s at step %d (epoch %d, batch %d)", backup.path, self.progress.global_step,
                    self.progress.epoch, self.progress.epoch_batch)

    def _refuse_implausible(self, backup: Backup, same_data: bool) -> None:
        """A step counter no run of this data could have reached (e.g. global_step 10^30) is refused in one line:
        it would end the run at once and go into the saved model's header."""
        problem = plausible_progress(backup.progress.to_dict(), self._steps_per_epoch() if same_data else None,
                                     saved_config_value(backup.path, "epochs"))
        if problem:
            raise DamagedBackup(f"cannot resume from {backup.path}: {problem}; it is kept as it is: move it out of "
                                f"{backup.path.parent} to resume an older backup, or train without "
                                "continue_last_backup")

    def _refuse_unloadable(self, backup: Backup, changes: list[tuple[str, object, object]]) -> None:
        """Refuse in one line naming the key, before a size-mismatch error deep in torch."""
        saved = {k: v.shape for k, v in backup.trainable.items()} if backup.trainable else None
        message = unloadable_reason(backup.path, changes, saved, self.setup.trainable_shapes())
        if self.setup.sharded:  # only rank 0 read the backup's tensors: it decides for every rank
            message = self.dist.broadcast_object(message)
        if message:
            raise UserError(message)
