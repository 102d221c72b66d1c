"""A sample on CUDA against the same weights sampled on the CPU, and a LoRA run with memory_preset AUTO on CUDA,
killed (SIGKILL) and resumed: bit-identical to the run that was never stopped."""
from __future__ import annotations

import numpy as np
import pytest

from tests.cuda.device import DEVICE, MARKS
from tests.cuda.runs import release

pytestmark = MARKS

F32 = dict(train_dtype="FLOAT32", transformer_dtype="FLOAT32")


def sample(trainer):
    from modules.config.train_config import SampleConfig
    from modules.modelSampler.WanModelSampler import WanModelSampler
    from modules.synthetic.shape_clips import RED_CIRCLE_RIGHT

    config = SampleConfig(prompt=RED_CIRCLE_RIGHT.prompt, frames=9, height=48, width=48, steps=8, cfg_scale=1.0,
                          seed=0)
    return WanModelSampler(trainer.model).generate(config, False).astype(np.float32)


def test_a_sample_on_cuda_shows_what_the_cpu_shows(cuda_run, tmp_path):
    """float32 on both devices (TF32 off): the same video to within a level of 255 on average; the bf16 sample
    (what users run) within 8 levels of it."""
    trained = cuda_run(tmp_path / "train", **F32).train()
    (lora,) = trained.trainer.end()
    on_device = sample(trained.trainer)
    release(trained.trainer)
    assert on_device.shape == (9, 48, 48, 3) and on_device.std() > 1  # a picture, not a constant
    cpu = cuda_run(tmp_path / "cpu", train_device="cpu", lora_weight_path=str(lora), max_steps=1, **F32).trainer()
    cpu.start()
    on_cpu = sample(cpu)
    release(cpu)
    assert float(np.abs(on_device - on_cpu).mean()) <= 1.0
    bf16 = cuda_run(tmp_path / "bf16", lora_weight_path=str(lora), max_steps=1).trainer()
    bf16.start()
    in_bf16 = sample(bf16)
    release(bf16)
    assert float(np.abs(in_bf16 - on_device).mean()) <= 8.0


@pytest.mark.slow
def test_sigkill_then_resume_with_auto_memory_equals_an_uninterrupted_run(learning_model, motifs, cache_dir, tmp_path):
    from tests.faults.test_kill_and_resume import Run, assert_same_tensors, lora_tensors

    settings = dict(train_device=DEVICE, memory_preset="AUTO", resolution=[48, 48], frames=9, lora_rank=8,
                    lora_alpha=8, output_dtype="FLOAT32", cache_dir=str(cache_dir))
    reference = Run(learning_model("t2v"), motifs, tmp_path / "reference", **settings)
    run = Run(learning_model("t2v"), motifs, tmp_path / "killed", **settings)
    try:
        reference.start()
        log = reference.finish()
        assert "memory_preset AUTO" in log or DEVICE == "cpu", log[-2000:]  # AUTO planned for the detected GPU
        run.start(FAULT_STEP_DELAY="0.3")  # room to kill between steps; changes nothing computed
        run.kill_when(lambda: (run.backups / "step-00000004").is_dir())
        assert not run.lora.exists()
        run.start("continue_last_backup=true")
        assert "resumed from" in run.finish()
    finally:
        reference.close()
        run.close()
    assert_same_tensors(lora_tensors(run.lora), lora_tensors(reference.lora))
