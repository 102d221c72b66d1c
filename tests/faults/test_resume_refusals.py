"""A resume whose config change makes the backup unloadable is refused in one line naming the key,
instead of a warning followed by a tensor size mismatch (issue #10, item 12)."""
from __future__ import annotations

import pytest

from modules.trainer.GenericTrainer import GenericTrainer
from modules.trainer.resume_check import tensor_mismatch
from modules.util.config.train_config import TrainConfig
from modules.util.errors import UserError
from tests.conftest import train_config_dict


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


def test_a_change_that_keeps_the_tensors_still_resumes(tiny_model, video_dataset, backed_up):
    trainer = resume(tiny_model, video_dataset, backed_up, learning_rate=5e-4)
    assert trainer.progress.global_step == 1


def test_tensor_mismatch_names_missing_and_extra_tensors():
    import torch

    saved = {"a": torch.Size([2]), "b": torch.Size([2])}  # shapes: nothing is copied to compare
    assert tensor_mismatch(saved, {"a": torch.Size([2]), "b": torch.Size([2])}) is None
    assert tensor_mismatch(saved, {"a": torch.Size([2]), "c": torch.Size([2])}) == (
        "1 trained tensors missing and 1 extra, e.g. c")
