"""Outputs respect the umask like any normal file (issue #10, item 9): a ComfyUI service running as
another user must be able to read a full fine-tune's folder, samples, backups and cache entries."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from modules.config.train_config import TrainConfig
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.atomic import atomic_dir, atomic_write_bytes
from tests.conftest import train_config_dict


@pytest.fixture
def umask():
    """umask(value) for the test; the old one comes back after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Relative path -> permission bits of every entry below `root`."""
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}


@pytest.mark.parametrize("mask, file_mode, folder_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750),
                                                          (0o077, 0o600, 0o700)])
def test_atomic_writes_get_the_modes_the_umask_gives(tmp_path, umask, mask, file_mode, folder_mode):
    umask(mask)
    atomic_write_bytes(tmp_path / "file.bin", b"x")
    with atomic_dir(tmp_path / "folder") as folder:
        (folder / "inner").mkdir()
        (folder / "inner" / "weights.bin").write_bytes(b"y")
        os.chmod(folder / "inner" / "weights.bin", 0o600)  # as tempfile-based library writers leave them
    assert modes(tmp_path) == {"file.bin": file_mode, "folder": folder_mode, "folder/inner": folder_mode,
                               "folder/inner/weights.bin": file_mode}


def test_atomic_temp_names_hold_no_digits(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (seen.append(Path(src).name), real_replace(src, dst)))
    atomic_write_bytes(tmp_path / "clip.gif", b"x")
    assert len(seen) == 1 and seen[0].startswith(".clip.") and not any(c.isdigit() for c in seen[0])


@pytest.mark.slow
def test_a_full_fine_tune_run_writes_every_output_with_the_umask_modes(tiny_model, video_dataset, tmp_path, umask):
    umask(0o022)
    sample = {"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 2}
    config = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, epochs=1, training_method="FINE_TUNE",
                               output_model_format="DIFFUSERS", output_model_destination=str(tmp_path / "output" / "model"),
                               samples=[sample], sample_at_end=True, backup_after=1, backup_after_unit="STEP")
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    trainer.train()
    trainer.end()
    wrong = {}
    for root in ("output", "workspace", "cache"):
        for name, mode in modes(tmp_path / root).items():
            expected = 0o755 if (tmp_path / root / name).is_dir() else 0o644
            if mode != expected:
                wrong[f"{root}/{name}"] = oct(mode)
    assert wrong == {}
    written = [p.name for p in tmp_path.rglob("*")]
    assert any(n.endswith(".safetensors") for n in written) and any(n.endswith(".mp4") for n in written)
    assert any(n.startswith("step-") for n in written)  # backups
