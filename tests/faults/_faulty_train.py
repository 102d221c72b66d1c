"""`scripts/train.py` with faults injected for tests, chosen by environment variables (never used outside tests).

FAULT_STEP_DELAY=S    sleep S seconds after each optimizer step, so a test can kill the run between steps
FAULT_HANG_BACKUP=N   the backup of step N writes half of its trainable.safetensors, then hangs
FAULT_HANG_LORA=1     the final LoRA write writes half of the file, then hangs
FAULT_MARKER=PATH     touched when a write hangs: the test kills the process then (SIGKILL, mid-write)

None of them changes what is computed, so a run killed and resumed must end with the uninterrupted run's LoRA.
"""
from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO_ROOT / "scripts"), str(REPO_ROOT)]


def _hang(stream_or_path, data: bytes) -> None:
    """Write the first half of `data`, make it durable, announce it, and wait to be killed."""
    if isinstance(stream_or_path, (str, os.PathLike)):
        with open(stream_or_path, "wb") as f:
            return _hang(f, data)
    stream_or_path.write(data[: len(data) // 2])
    stream_or_path.flush()
    os.fsync(stream_or_path.fileno())
    Path(os.environ["FAULT_MARKER"]).touch()
    time.sleep(600)


def install_faults() -> None:
    delay = float(os.environ.get("FAULT_STEP_DELAY", "0") or 0)
    if delay:
        from modules.trainer.GenericTrainer import GenericTrainer

        step = GenericTrainer._optimizer_step

        def slow_step(self, *args, **kwargs):
            step(self, *args, **kwargs)
            time.sleep(delay)

        GenericTrainer._optimizer_step = slow_step

    hang_backup = os.environ.get("FAULT_HANG_BACKUP")
    if hang_backup:
        from safetensors.torch import save

        import modules.trainer.backup as backup

        save_file = backup.save_file
        folder_prefix = f".step-{int(hang_backup):08d}."  # atomic_write_dir's temp folder

        def hanging_save_file(tensors, filename, metadata=None):
            if Path(filename).parent.name.startswith(folder_prefix):
                _hang(filename, save(tensors, metadata))
            return save_file(tensors, filename, metadata)

        backup.save_file = hanging_save_file

    if os.environ.get("FAULT_HANG_LORA"):
        import modules.modelSaver.WanLoRASaver as saver

        write = saver.write_safetensors

        def hanging_write(stream, tensors, metadata=None):
            buffer = io.BytesIO()
            write(buffer, tensors, metadata)
            _hang(stream, buffer.getvalue())

        saver.write_safetensors = hanging_write


if __name__ == "__main__":
    import train  # scripts/train.py (also sets up logging and one-line errors through _bootstrap)
    from _bootstrap import run_main

    install_faults()
    run_main(train.main)
