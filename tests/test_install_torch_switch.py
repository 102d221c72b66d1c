"""What docs/install.md and the README tell a user whose venv got the CPU torch (the demo on a machine without a GPU)
and who now has one: install.sh keeps the torch it finds, and after `pip uninstall -y torch` it installs the build for
the machine. Run on install.sh itself, with the fake venv python of tests/test_installer.py."""
from __future__ import annotations

from tests.test_installer import install


def _an_nvidia_gpu_appears(tmp_path) -> None:
    nvidia_smi = tmp_path / "bin" / "nvidia-smi"
    nvidia_smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    nvidia_smi.chmod(0o755)


def test_an_installed_torch_is_kept_and_an_uninstalled_one_is_replaced_by_the_gpu_build(tmp_path):
    result, pip = install(tmp_path)  # the demo's first run, no GPU: PyPI's torch
    assert "no NVIDIA or AMD GPU found" in result.stderr and "-m pip install torch==2.13.0" in pip
    _an_nvidia_gpu_appears(tmp_path)
    assert install(tmp_path)[1] == []  # the venv is complete: its torch stays, whatever the machine has now
    (tmp_path / "repo" / ".venv" / "has-torch").unlink()  # .venv/bin/python -m pip uninstall -y torch
    result, pip = install(tmp_path)
    assert "NVIDIA GPU found" in result.stderr
    assert "-m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" in pip
