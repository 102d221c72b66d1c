"""A resume whose config change makes the backup unloadable is refused in one line naming the key,
instead of a warning followed by a tensor size mismatch (issue #10, item 12)."""
from __future__ import annotations

import pytest
import torch

from modules.config.train_config import TrainConfig
from modules.trainer.GenericTrainer import GenericTrainer
from modules.trainer.resume_check import tensor_mismatch
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.run_paths import run_dir


@pytest.fixture(scope="module")
def backed_up(tiny_model, video_dataset, tmp_path_factory):
    """A workspace holding the backup of one LoRA step (rank 4, default targets)."""
    work = tmp_path_factory.mktemp("resume-refusals")
    trainer = GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), video_dataset, work,
                                                                     epochs=1, max_steps=1)))
    trainer.start()
    trainer.train()
    trainer.backup()
    trainer.close()
    return work


def resume(tiny_model, video_dataset, work, **overrides) -> GenericTrainer:
    config = train_config_dict(tiny_model("t2v"), video_dataset, work, continue_last_backup=True, **overrides)
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    try:
        trainer.start()
    finally:
        trainer.close()
    return trainer


@pytest.mark.parametrize("overrides, named", [
    (dict(lora_rank=8), "lora_rank: 4 -> 8"),
    (dict(lora_target_modules=["attn1.to_q"]), "lora_target_modules: "),
    (dict(lora_blocks=[0]), "lora_blocks: [] -> [0]"),
])
def test_a_change_of_what_is_trained_is_refused_naming_the_key(tiny_model, video_dataset, backed_up, overrides, named):
    with pytest.raises(UserError) as error:
        resume(tiny_model, video_dataset, backed_up, **overrides)
    message = str(error.value)
    assert message.startswith("cannot resume from ") and "step-00000001" in message
    assert named in message and "\n" not in message
    assert "continue_last_backup" in message


def test_a_reshaped_lora_is_described_by_its_tensors(tiny_model, video_dataset, backed_up):
    with pytest.raises(UserError, match=r"tensors differ in shape, e\.g\. .*lora_A.*: \(4, \d+\) in the backup, "
                                        r"\(8, \d+\) now"):
        resume(tiny_model, video_dataset, backed_up, lora_rank=8)


def test_a_change_that_keeps_the_tensors_resumes_when_asked_to(tiny_model, video_dataset, backed_up):
    trainer = resume(tiny_model, video_dataset, backed_up, learning_rate=5e-4, resume_changed_config=True)
    assert trainer.progress.global_step == 1


@pytest.mark.parametrize("overrides, named", [(dict(seed=7), "seed: 42 -> 7"),
                                              (dict(learning_rate=5e-4), "learning_rate: 0.001 -> 0.0005")])
def test_another_runs_backup_is_not_resumed(tiny_model, video_dataset, backed_up, overrides, named):
    """A new run (another seed or learning rate) in an old run's workspace: the old backup is named, not resumed."""
    with pytest.raises(UserError) as error:
        resume(tiny_model, video_dataset, backed_up, **overrides)
    message = str(error.value)
    assert message.startswith("not resuming ") and "step-00000001" in message and named in message
    assert "resume_changed_config=true" in message and "\n" not in message


def test_tensor_mismatch_names_missing_and_extra_tensors():
    import torch

    saved = {"a": torch.Size([2]), "b": torch.Size([2])}  # shapes: nothing is copied to compare
    assert tensor_mismatch(saved, {"a": torch.Size([2]), "b": torch.Size([2])}) is None
    assert tensor_mismatch(saved, {"a": torch.Size([2]), "c": torch.Size([2])}) == (
        "1 trained tensors missing and 1 extra, e.g. c")


def test_the_only_backup_with_a_damaged_optimizer_is_refused_and_kept_then_resumed_with_a_fresh_one(
        tiny_model, video_dataset, backed_up, tmp_path):
    import shutil

    from modules.trainer.backup import read_backup

    work = tmp_path / "copy"
    shutil.copytree(backed_up, work)
    backup = run_dir(work / "workspace") / "backup" / "step-00000001"
    damaged = backup / "optimizer.safetensors"
    data = bytearray(damaged.read_bytes())
    data[-5] ^= 0x01
    damaged.write_bytes(bytes(data))
    with pytest.raises(UserError) as error:
        resume(tiny_model, video_dataset, work)
    message = str(error.value)
    assert message.startswith(f"cannot resume from {backup}: optimizer.safetensors does not match the checksum")
    assert "resume_fresh_optimizer=true" in message and "\n" not in message
    assert damaged.read_bytes() == bytes(data)
    trainer = resume(tiny_model, video_dataset, work, resume_fresh_optimizer=True)
    assert trainer.progress.global_step == 1
    saved = read_backup(backup, with_optimizer=False).trainable
    state = trainer.setup.trainable_state()
    assert all(torch.equal(state[name].cpu(), saved[name]) for name in saved)
    assert not trainer.optimizer.state  # fresh
